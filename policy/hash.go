package policy

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/fleet"
)

type hashSpec struct {
	DefRange      hcl.Range      `hcl:",def_range"`
	Algorithm     *hcl.Attribute `hcl:"algorithm,optional"`
	TableSize     *hcl.Attribute `hcl:"table_size,optional"`
	MinRingSize   *hcl.Attribute `hcl:"min_ring_size,optional"`
	MaxRingSize   *hcl.Attribute `hcl:"max_ring_size,optional"`
	PerWeight     *hcl.Attribute `hcl:"entries_per_weight,optional"`
	BalanceFactor *hcl.Attribute `hcl:"balance_factor,optional"`
	BalanceOn     *hcl.Attribute `hcl:"balance_on,optional"`
	LoadInterval  *hcl.Attribute `hcl:"load_interval,optional"`
	Keyless       *hcl.Attribute `hcl:"keyless,optional"`
	GRPCRingCap   *hcl.Attribute `hcl:"grpc_ring_cap,optional"`
	MaxBodyBytes  *hcl.Attribute `hcl:"max_body_bytes,optional"`
	Keys          []keySpec      `hcl:"key,block"`
	HotKeys       []hotKeysSpec  `hcl:"hot_keys,block"`
}

func (s hashSpec) defRange() hcl.Range { return s.DefRange }

// hash decodes a hash block into the model's own type. Algorithm is
// fleet.Maglev or fleet.RingHash (fleet.DefaultAlgorithm, or RingHash when
// ring sizes are set); TableSize is a Maglev table's (prime), zero for
// ring_hash; MinRingSize is set whenever MaxRingSize is below
// fleet.DefaultMinRingSize; GRPCRingCap zero means fleet.DefaultGRPCRingCap;
// Keyless is fleet.DefaultKeyless unless set; MaxBodyBytes is
// DefaultMaxBodyBytes when the chain has body keys or hot keys are on
// (their spread sub-key is read from the body), zero otherwise; Hot is
// the hot_keys block's settings, fleet.DefaultHotKeys without one, nil
// when it says enabled = false (hotkeys.go). lora says the pool serves
// LoRA adapters (an adapters block): BalanceFactor is then
// DefaultAdaptersBalanceFactor unless set, and the bound counts prompt
// bytes unless balance_on says otherwise. prefill says a decode pool
// names it as its prefill pool: keyed on headers alone and setting
// neither balance_factor nor balance_on, it is bounded at
// DefaultPrefillBalanceFactor on prompt bytes, unless load_interval = "0s"
// leaves its filters without a table; loose reports that bound, which
// leaves the weights defaults of an unbounded pool.
func (d *decoder) hash(spec *hashSpec, lora, prefill bool) (h fleet.Hash, loose bool) {
	h = fleet.Hash{Algorithm: fleet.DefaultAlgorithm}

	known := true // whether h.Algorithm is what the user asked for
	if a := spec.Algorithm; a != nil {
		var alg fleet.Algorithm
		alg, known = enum(d, a, nil, "Unknown hash algorithm", func(s string) string {
			return fmt.Sprintf("%q is not a hash algorithm; use %q or %q.", s, fleet.Maglev, fleet.RingHash)
		}, fleet.Maglev, fleet.RingHash)
		if known {
			h.Algorithm = alg
		}
	} else if spec.TableSize == nil && (spec.MinRingSize != nil || spec.MaxRingSize != nil || spec.PerWeight != nil) {
		// Ring sizes only apply to a ring.
		h.Algorithm = fleet.RingHash
	}

	if a := spec.TableSize; a != nil {
		if known && h.Algorithm == fleet.RingHash {
			d.errorf(a.NameRange, "Not a ring_hash setting",
				`table_size sizes a Maglev table; remove it, or set algorithm = %q. A ring_hash ring is sized by min_ring_size and max_ring_size.`, fleet.Maglev)
		} else if n, good := d.tableSize(a); good {
			h.TableSize = n
		}
	} else if h.Algorithm == fleet.Maglev {
		h.TableSize = fleet.DefaultMaglevTableSize
	}

	// ringSize returns a valid ring size setting, or nil.
	ringSize := func(a *hcl.Attribute) (uint64, *hcl.Attribute) {
		if a == nil {
			return 0, nil
		}
		switch {
		case known && h.Algorithm == fleet.Maglev && spec.Algorithm == nil: // chosen by table_size
			d.errorf(a.NameRange, "Not a maglev setting",
				`%s sizes a ring_hash ring, but table_size (line %d) sizes a Maglev table: remove %s for Maglev, or table_size for ring_hash.`,
				a.Name, spec.TableSize.Range.Start.Line, a.Name)
			return 0, nil
		case known && h.Algorithm == fleet.Maglev:
			d.errorf(a.NameRange, "Not a maglev setting",
				`%s sizes a ring_hash ring; remove it, or set algorithm = %q. A Maglev table is sized by table_size.`, a.Name, fleet.RingHash)
			return 0, nil
		}
		n, good := d.uintIn(a.Name, a.Expr, 1, fleet.MaxRingSize, "Invalid ring size")
		if !good {
			return 0, nil
		}
		return n, a
	}
	minN, minA := ringSize(spec.MinRingSize)
	maxN, maxA := ringSize(spec.MaxRingSize)
	if minA != nil && maxA != nil && minN > maxN {
		d.errorf(maxA.Expr.Range(), "Invalid ring size",
			"max_ring_size %d is smaller than min_ring_size %d (line %d); raise max_ring_size or lower min_ring_size.",
			maxN, minN, minA.Range.Start.Line)
	}
	h.MinRingSize, h.MaxRingSize = minN, maxN
	if a := spec.PerWeight; a != nil {
		if n, set := ringSize(a); set != nil {
			h.EntriesPerWeight = n
			// The ring size follows the healthy weight; fixed sizes would
			// contradict it.
			for _, r := range []*hcl.Attribute{spec.MinRingSize, spec.MaxRingSize} {
				if r != nil {
					d.errorf(r.NameRange, "Conflicting ring sizes",
						"entries_per_weight (line %d) sizes the ring to %d entries per unit of healthy weight, so the ring size follows the replicas; remove %s, or remove entries_per_weight for a fixed ring size.",
						a.Range.Start.Line, n, r.Name)
				}
			}
			if spec.MinRingSize != nil || spec.MaxRingSize != nil {
				h.MinRingSize, h.MaxRingSize = 0, 0
			}
		}
	}
	if spec.MinRingSize == nil && maxA != nil && maxN < fleet.DefaultMinRingSize {
		// The data planes' own minimum would exceed the maximum, and they
		// reject that.
		h.MinRingSize = maxN
	}

	if a := spec.BalanceFactor; a != nil {
		n, good := d.integer(a.Name, a.Expr)
		switch {
		case !good: // already reported
		case n.Sign() < 0 || n.Sign() > 0 && n.Cmp(big.NewInt(fleet.MinBalanceFactor)) < 0:
			d.errorf(a.Expr.Range(), "Invalid balance factor",
				"balance_factor must be 0 (off) or at least 100 (percent of average load), not %s; 150 lets a replica take 1.5 times the average load before keys spill over.", n)
		case !n.IsUint64() || n.Uint64() > math.MaxUint32:
			d.errorf(a.Expr.Range(), "Invalid balance factor",
				"balance_factor %s is too large; the maximum is %d.", n, uint64(math.MaxUint32))
		default:
			h.BalanceFactor = uint32(n.Uint64())
		}
	}

	if a := spec.GRPCRingCap; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, fleet.MinGRPCRingCap, fleet.MaxRingSize, "Invalid gRPC ring cap"); good {
			h.GRPCRingCap = n
		}
	}

	h.Keyless = fleet.DefaultKeyless
	if a := spec.Keyless; a != nil {
		if b, good := enum(d, a, nil, "Unknown keyless balancing", func(s string) string {
			return fmt.Sprintf("%q is not a way to spread requests that carry no hash key; use %q (the default), %q, or %q to hash them on a random value like a data plane without a fallback.",
				s, fleet.RoundRobin, fleet.LeastRequest, fleet.Random)
		}, fleet.RoundRobin, fleet.LeastRequest, fleet.Random); good {
			h.Keyless = b
		}
	}

	h.Keys = d.keys(spec)
	// Hot keys first: their spread sub-key is a body key too, for which
	// Envoy reads the body as for the chain's own.
	h.Hot = d.hotKeys(spec.HotKeys, h.Keys)
	d.bodyKeys(spec, &h)
	if lora && spec.BalanceFactor == nil && h.BalanceFactor == 0 {
		h.BalanceFactor = DefaultAdaptersBalanceFactor
	}
	prefillBound := prefill && !lora && spec.BalanceFactor == nil && spec.BalanceOn == nil && h.BalanceFactor == 0
	if prefillBound {
		h.BalanceFactor = DefaultPrefillBalanceFactor
	}
	d.balanceOn(spec, &h, lora || prefillBound)
	d.loadInterval(spec, &h)
	if prefillBound && h.LoadInterval == 0 {
		// Without a table no key is known to be new, and the loose
		// bound alone would move none.
		h.BalanceFactor, h.BalanceOn = 0, ""
	}
	loose = prefillBound && h.BalanceFactor > 0
	if spec.BalanceFactor == nil && !lora && h.BalanceFactor == DefaultPromptPrefixBalanceFactor &&
		(h.BalanceOn != fleet.BalanceOnPromptBytes || h.LoadInterval == 0) {
		h.BalanceFactor = DefaultUntabledBalanceFactor
	}
	return h, loose
}

// balanceOn decodes balance_on, once balance_factor has its default: what
// the bound counts, requests (Envoy's own bound) or prompt_bytes (the
// Lua filter's choice from the pool's slot table), which needs a bound.
// Unset, a bounded chain with a prompt_prefix or conversation key counts
// prompt bytes: such keys are shared by requests whose prompts differ
// in length and in how much of them the replica caches, which a count of
// requests in flight (decoding ones among them) cannot weigh. So does a
// bounded pool serving adapters: its Envoys then pick each adapter
// request's replica where its adapter runs; and a prefill pool bounded by
// default. bytes says the pool is one of those two.
func (d *decoder) balanceOn(spec *hashSpec, h *fleet.Hash, bytes bool) {
	a := spec.BalanceOn
	if a == nil {
		if h.BalanceFactor > 0 && (bytes || slices.ContainsFunc(h.Keys, func(k fleet.HashKey) bool { return k.PromptPrefix > 0 || k.Conversation })) {
			h.BalanceOn, h.LoadInterval = fleet.BalanceOnPromptBytes, fleet.DefaultLoadInterval
		}
		return
	}
	on, good := enum(d, a, nil, "Unknown balance_on", func(s string) string {
		return fmt.Sprintf("%q is not what a bound can count; use %q (Envoy's own bound on requests in flight) or %q (Envoy's Lua filter bounds the prompt bytes in flight).",
			s, fleet.BalanceOnRequests, fleet.BalanceOnPromptBytes)
	}, fleet.BalanceOnRequests, fleet.BalanceOnPromptBytes)
	if !good {
		return
	}
	if on == fleet.BalanceOnPromptBytes && h.BalanceFactor == 0 {
		d.errorf(a.Expr.Range(), "Bound required",
			"balance_on = %q bounds the prompt bytes each replica is sent, by balance_factor; set balance_factor (150 lets a replica take 1.5 times its share) or remove balance_on.", on)
		return
	}
	h.BalanceOn = on
	if on == fleet.BalanceOnPromptBytes {
		h.LoadInterval = fleet.DefaultLoadInterval
	}
}

// loadInterval decodes load_interval, once balance_on is known: how often
// the pick filters learn the fleet's bytes in flight per replica; "0s"
// leaves each filter to its own counts.
func (d *decoder) loadInterval(spec *hashSpec, h *fleet.Hash) {
	a := spec.LoadInterval
	if a == nil {
		return
	}
	dur, ok := d.durationOr(a, fleet.DefaultLoadInterval, `"0s" turns it off.`)
	if !ok {
		return
	}
	switch {
	case h.BalanceOn != fleet.BalanceOnPromptBytes:
		d.errorf(a.Expr.Range(), "Bound on prompt bytes required",
			"load_interval is how often Envoy's pick filters learn every replica's prompt bytes in flight, which only a bound on prompt bytes reads; set balance_on = %q or remove load_interval.", fleet.BalanceOnPromptBytes)
	case dur != 0 && dur < fleet.MinLoadInterval:
		d.errorf(a.Expr.Range(), "Invalid duration",
			"load_interval %s is below %s; each interval may cost one route update of the pool. \"0s\" turns it off; the default is %q.", dur, fleet.MinLoadInterval, fleet.DefaultLoadInterval.String())
	default:
		h.LoadInterval = dur
	}
}

// tableSize decodes a Maglev table size: a prime no larger than Envoy's
// maximum. Maglev's permutation needs a prime table to fill it evenly.
func (d *decoder) tableSize(a *hcl.Attribute) (uint64, bool) {
	n, ok := d.integer(a.Name, a.Expr)
	if !ok {
		return 0, false
	}
	if n.Sign() < 0 || !n.IsUint64() || n.Uint64() > fleet.MaxMaglevTableSize {
		d.errorf(a.Expr.Range(), "Invalid table size",
			"table_size %s is out of range; use a prime from 2 to %d (the default is %d).", n, fleet.MaxMaglevTableSize, fleet.DefaultMaglevTableSize)
		return 0, false
	}
	v := n.Uint64()
	if fleet.IsPrime(v) {
		return v, true
	}
	near := fmt.Sprintf("the nearest prime is %d", nextPrime(v))
	if v > 2 {
		near = fmt.Sprintf("the nearest primes are %d and %d", prevPrime(v), nextPrime(v))
	}
	d.errorf(a.Expr.Range(), "Table size not prime", "table_size %d is not prime; %s.", v, near)
	return 0, false
}

// prevPrime returns the largest prime below n; n must be above 2.
func prevPrime(n uint64) uint64 {
	for n--; !fleet.IsPrime(n); n-- {
	}
	return n
}

func nextPrime(n uint64) uint64 {
	for n++; !fleet.IsPrime(n); n++ {
	}
	return n
}

// keySpec is a key block; exactly one source must be set, which is
// checked by hand to explain how to split a key with several.
type keySpec struct {
	DefRange       hcl.Range      `hcl:",def_range"`
	Header         *hcl.Attribute `hcl:"header,optional"`
	Cookie         *hcl.Attribute `hcl:"cookie,optional"`
	QueryParameter *hcl.Attribute `hcl:"query_parameter,optional"`
	JSONField      *hcl.Attribute `hcl:"json_field,optional"`
	PromptPrefix   *hcl.Attribute `hcl:"prompt_prefix,optional"`
	Conversation   *hcl.Attribute `hcl:"conversation,optional"`
}

// keys decodes the key chain of a hash block.
func (d *decoder) keys(hash *hashSpec) []fleet.HashKey {
	if len(hash.Keys) == 0 {
		d.errorf(hash.DefRange, "Missing hash key",
			`The hash block has no key; add one, as in key { header = "x-session-id" }. Keys are tried in order and the first one present in a request wins.`)
		return nil
	}
	var keys []fleet.HashKey
	seen := map[fleet.HashKey]hcl.Range{}
	for _, kb := range hash.Keys {
		set := attributesInOrder(kb.Header, kb.Cookie, kb.QueryParameter, kb.JSONField, kb.PromptPrefix, kb.Conversation)
		if len(set) == 0 {
			d.errorf(kb.DefRange, "Empty hash key",
				`A key block needs exactly one of header, cookie, query_parameter, json_field, prompt_prefix or conversation, as in key { header = "x-session-id" }.`)
			continue
		}
		for _, a := range set[1:] {
			d.errorf(a.NameRange, "Conflicting hash key sources",
				"This key already takes its value from %s (line %d); a key has exactly one source. Move %s into a key block of its own: keys are tried in order.",
				set[0].Name, set[0].Range.Start.Line, a.Name)
		}
		a := set[0]
		if a == kb.PromptPrefix {
			if k, good := d.promptPrefix(a); good && d.uniqueKey(seen, k, a, fmt.Sprint(k.PromptPrefix)) && len(set) == 1 {
				keys = append(keys, k)
			}
			continue
		}
		if a == kb.Conversation {
			if k, good := d.conversation(a); good && d.uniqueKey(seen, k, a, "= true") && len(set) == 1 {
				keys = append(keys, k)
			}
			continue
		}
		s, good := d.str(a.Name, a.Expr)
		if !good {
			continue
		}
		var k fleet.HashKey
		var err error
		switch a {
		case kb.Header:
			s = strings.ToLower(s)
			if k.Header, err = checkHeaderName(s); err == nil {
				err = checkNotGenerated(s)
			}
		case kb.JSONField:
			k.JSONField, err = checkJSONField(s)
		case kb.Cookie:
			k.Cookie, err = checkCookieName(s)
		case kb.QueryParameter:
			k.QueryParameter, err = checkQueryParameter(s)
		}
		if err != nil {
			d.errorf(a.Expr.Range(), "Invalid hash key", "%s.", err)
			continue
		}
		if !d.uniqueKey(seen, k, a, strconv.Quote(s)) {
			continue
		}
		if len(set) == 1 {
			keys = append(keys, k)
		}
	}
	return keys
}

// tchars are the characters of an HTTP token (RFC 9110), which header
// and cookie names are.
const tchars = "!#$%&'*+-.^_`|~"

func firstNonToken(s string) (rune, bool) {
	for _, c := range s {
		if !isAlnum(c) && !strings.ContainsRune(tchars, c) {
			return c, true
		}
	}
	return 0, false
}

func checkHeaderName(s string) (string, error) {
	switch {
	case s == "":
		return "", fmt.Errorf(`header must not be empty; name the request header that carries the session, as in "x-session-id"`)
	case s[0] == ':':
		return "", fmt.Errorf(`%q is an HTTP/2 pseudo-header, which cannot be a hash key; hash on a regular request header such as "x-session-id"`, s)
	}
	if c, bad := firstNonToken(s); bad {
		return "", fmt.Errorf("%q is not a valid HTTP header name: %q is not allowed; use letters, digits and %s", s, c, tchars)
	}
	return s, nil
}

func checkCookieName(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf(`cookie must not be empty; name the cookie that carries the session, as in "session"`)
	}
	if c, bad := firstNonToken(s); bad {
		return "", fmt.Errorf("%q is not a valid cookie name: %q is not allowed; use letters, digits and %s", s, c, tchars)
	}
	return s, nil
}

func checkQueryParameter(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf(`query_parameter must not be empty; name the URL query parameter that carries the session, as in "session_id"`)
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("&=#?", c) {
			return "", fmt.Errorf("%q is not a valid query parameter name: %q is not allowed", s, c)
		}
	}
	return s, nil
}
