package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/kvxds/kvxds/xds/translate/bodykey"

	"github.com/kvxds/kvxds/fleet"
)

// Body keys: json_field, prompt_prefix and conversation read the JSON
// request body. Envoy
// computes them with a generated Lua filter that buffers the body (up to
// max_body_bytes) and sets one generated header per key, which the route
// hashes on; proxyless gRPC clients have no access to the body and keep
// only the header keys.
const (
	// DefaultMaxBodyBytes is how much of a request body Envoy buffers for
	// body keys and hot keys' spread_by by default (the model's).
	DefaultMaxBodyBytes = fleet.DefaultMaxBodyBytes
	// MinMaxBodyBytes and MaxMaxBodyBytes bound max_body_bytes.
	MinMaxBodyBytes = 1 << 10
	MaxMaxBodyBytes = 64 << 20
	// MinPromptPrefix is the shortest prompt_prefix: the first bytes of a
	// chat body's messages ([{"role":"system","content":") are the same
	// in every request.
	MinPromptPrefix = 64
	// DefaultPromptPrefixBalanceFactor is the balance_factor of a hash
	// block with a prompt_prefix key that does not set one: a popular
	// prefix (a shared system prompt) would otherwise send every request
	// to one replica. It bounds the keys with a prefix cached somewhere;
	// where Envoys log their load, a key none placed lately is bounded at
	// its share of the mean (100), since moving it costs no hit. 250
	// measured best on Mooncake's trace with that split
	// (docs/benchmarks/traces.md).
	DefaultPromptPrefixBalanceFactor = 250
	// DefaultUntabledBalanceFactor is that default where the filters
	// learn no fleet table (balance_on = "requests", or load_interval =
	// "0s"): no key is then known to be new, one factor bounds them all,
	// and 150 keeps the tail there (docs/benchmarks/hot-keys.md).
	DefaultUntabledBalanceFactor = 150
	// DefaultAdaptersBalanceFactor is the balance_factor of a pool
	// serving LoRA adapters whose hash block sets none: with it, Envoy
	// picks each adapter request's replica among the adapter's where its
	// adapter runs, on prompt bytes. Measured on the multi-LoRA
	// benchmark (docs/benchmarks/workloads.md): against no bound, engine
	// TTFT p95 4.6–4.7 s against 5.1–6.0 s at a hit rate of 0.84 against
	// 0.80–0.83; 150 overflowed and swapped more.
	DefaultAdaptersBalanceFactor = 200
	// DefaultPrefillBalanceFactor is the balance_factor of a prefill
	// pool keyed on headers alone (a session id) that sets none, on
	// prompt bytes. It is loose: one session's prompts are one
	// conversation's, and moving them costs its cache. What it turns on
	// is the pick filters' fleet table, where a key no Envoy placed
	// lately is bounded at its share of the mean (100), so that a new
	// conversation opens on a prefill replica not already computing more
	// than its share; unbounded, sessions hashed to one replica computed
	// a fifth more than those of another. It takes a bounded pool's
	// escape defaults and keeps an unbounded pool's weights, which gRPC
	// clients balance the pool's ring by. Measured on chat, P/D 4:4
	// behind 8 Envoys (docs/benchmarks/prefill-decode.md).
	DefaultPrefillBalanceFactor = 1000
)

// BodyKeyHeader is the header Envoy sets for the body key at index i
// (from 0) of a chain.
func BodyKeyHeader(i int) string { return bodykey.Header(i) }

// checkNotGenerated keeps header keys off the names kvxds generates.
func checkNotGenerated(s string) error {
	if strings.HasPrefix(s, bodykey.HeaderPrefix) {
		return fmt.Errorf("%q is reserved: Envoy sets %sN from the body key N of the chain, and drops any a client sends; name another header", s, bodykey.HeaderPrefix)
	}
	if s == bodykey.SpreadHeader {
		return fmt.Errorf("%q is reserved: it carries a request's spread sub-key for hot keys; name another header", s)
	}
	return nil
}

// checkJSONField checks a dot path of object keys, as written in JSON
// without escapes.
func checkJSONField(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf(`json_field must not be empty; name a string field of the JSON body, as in "user" or "metadata.conversation_id"`)
	}
	for _, seg := range strings.Split(s, ".") {
		if seg == "" {
			return "", fmt.Errorf("json_field %q has an empty segment; separate the object keys of the path with single dots, as in \"metadata.conversation_id\"", s)
		}
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
			return "", fmt.Errorf("json_field %q contains %q; object keys are matched as written, so use keys without quotes, backslashes or control characters", s, c)
		}
	}
	return s, nil
}

// promptPrefix decodes a prompt_prefix attribute.
func (d *decoder) promptPrefix(a *hcl.Attribute) (fleet.HashKey, bool) {
	n, ok := d.integer(a.Name, a.Expr)
	if !ok {
		return fleet.HashKey{}, false
	}
	if n.Sign() < 0 || !n.IsInt64() || n.Int64() < MinPromptPrefix || n.Int64() > MaxMaxBodyBytes {
		d.errorf(a.Expr.Range(), "Invalid hash key",
			"prompt_prefix %s is out of range; use %d to %d bytes. Below %d, every chat request shares the same first bytes ([{\"role\":\"system\",\"content\":\"); 4096 keys on about the first thousand tokens.",
			n, MinPromptPrefix, MaxMaxBodyBytes, MinPromptPrefix)
		return fleet.HashKey{}, false
	}
	return fleet.HashKey{PromptPrefix: int(n.Int64())}, true
}

// conversation decodes a conversation attribute: true is the only value
// that makes a key.
func (d *decoder) conversation(a *hcl.Attribute) (fleet.HashKey, bool) {
	v, ok := d.value(a.Name, a.Expr, cty.Bool, "true or false")
	if !ok {
		return fleet.HashKey{}, false
	}
	if v.False() {
		d.errorf(a.Expr.Range(), "Invalid hash key",
			"conversation = false makes no key; remove this key block, or set conversation = true to key on the leading messages of the body (the system prompt and the first user message), which every turn of a conversation repeats.")
		return fleet.HashKey{}, false
	}
	return fleet.HashKey{Conversation: true}, true
}

// uniqueKey records k, or reports it as a duplicate of an earlier key.
func (d *decoder) uniqueKey(seen map[fleet.HashKey]hcl.Range, k fleet.HashKey, a *hcl.Attribute, shown string) bool {
	if prev, dup := seen[k]; dup {
		d.errorf(a.Expr.Range(), "Duplicate hash key",
			"%s %s is already a key at line %d; remove one of them.", a.Name, shown, prev.Start.Line)
		return false
	}
	seen[k] = a.Expr.Range()
	return true
}

// bodyKeys decodes max_body_bytes, defaults balance_factor for
// prompt_prefix and conversation keys, and says what gRPC clients make of body keys.
// h.Hot is decoded: hot keys read their spread sub-key from the body
// within the same limit.
func (d *decoder) bodyKeys(spec *hashSpec, h *fleet.Hash) {
	// The first body key; the first prompt_prefix or conversation key (a
	// popular prefix or opening pins its requests to one replica).
	var first, prefix *hcl.Attribute
	conv := false
	for _, kb := range spec.Keys {
		for _, a := range []*hcl.Attribute{kb.JSONField, kb.PromptPrefix, kb.Conversation} {
			if a == nil {
				continue
			}
			if first == nil || a.Range.Start.Byte < first.Range.Start.Byte {
				first = a
			}
			if a != kb.JSONField && prefix == nil {
				prefix = a
			}
			conv = conv || a == kb.Conversation
		}
	}
	if a := spec.MaxBodyBytes; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, MinMaxBodyBytes, MaxMaxBodyBytes, "Invalid body limit"); good {
			h.MaxBodyBytes = int(n)
		}
		if first == nil && h.Hot == nil {
			d.warnf(a.NameRange, "Body limit has no effect",
				"max_body_bytes bounds how much of a request body Envoy buffers for body keys and for hot keys' spread_by, and this hash block has neither; remove it.")
		}
	}
	if first == nil && h.Hot == nil {
		h.MaxBodyBytes = 0
		return
	}
	if spec.MaxBodyBytes == nil {
		h.MaxBodyBytes = DefaultMaxBodyBytes
	}
	prefixes := h.Keys
	if h.Hot != nil {
		prefixes = append(slices.Clip(prefixes), h.Hot.SpreadBy)
	}
	for _, k := range prefixes {
		if k.PromptPrefix > h.MaxBodyBytes && h.MaxBodyBytes > 0 && spec.MaxBodyBytes != nil {
			d.errorf(spec.MaxBodyBytes.Expr.Range(), "Invalid body limit",
				"max_body_bytes %d is below prompt_prefix %d: Envoy could never read that much of a prompt; raise max_body_bytes or lower prompt_prefix.",
				h.MaxBodyBytes, k.PromptPrefix)
			break
		}
	}

	if prefix != nil {
		switch a := spec.BalanceFactor; {
		case a == nil:
			h.BalanceFactor = DefaultPromptPrefixBalanceFactor
		case h.BalanceFactor == 0:
			v, diags := a.Expr.Value(nil)
			if diags.HasErrors() || v.Type() != cty.Number || !v.IsKnown() || v.IsNull() || v.AsBigFloat().Sign() != 0 {
				break
			}
			why := "keys on the start of the prompt, which a shared system prompt or template makes the same for many requests"
			if prefix.Name == "conversation" {
				why = "keys on the leading messages, which an app's fixed opening or a document many users send makes the same for many conversations"
			}
			d.errorf(a.Expr.Range(), "Bounded load required",
				"%s (line %d) %s: all of them would go to one replica. Keep balance_factor at 100 or more (unset, it is %d, or %d where the pick filters get no load table) so that Envoy spills them to the next replicas.",
				prefix.Name, prefix.Range.Start.Line, why, DefaultPromptPrefixBalanceFactor, DefaultUntabledBalanceFactor)
		}
	}

	if first == nil {
		return // hot keys alone: the chain has no body key to warn about
	}
	var headers []string
	for _, k := range h.Keys {
		if k.Header != "" {
			headers = append(headers, strconv.Quote(k.Header))
		}
	}
	fallback := "they hash on none of this chain's keys and send every request to the keyless fallback; add a header key for them"
	if len(headers) > 0 {
		fallback = "they hash on the header keys only (" + strings.Join(headers, ", ") + ")"
	}
	kinds := "json_field and prompt_prefix"
	if conv {
		kinds = "json_field, prompt_prefix and conversation"
	}
	d.warnf(first.Range, "Body keys are Envoy only",
		"Proxyless gRPC clients of this pool cannot read request bodies, so they skip %s keys: %s. Envoy computes them.", kinds, fallback)
}
