package fleet

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// A hot key is a key value that carries more of a pool's requests than
// one replica can serve: a system prompt every conversation starts with,
// a document many users ask about. Hashing sends all of it to one replica,
// whose queue then sets the pool's tail latency, while the others idle.
// kvxds learns a pool's hot keys from the data plane's access logs (a
// bounded top-k of key values and their share of requests, decided by the
// leader) and serves them in the pool's routes: a request whose key is
// hot hashes on its key and on a few bits of its spread sub-key
// (HotKeys.SpreadBy), so that the hot key's shared prefix is warm on
// Spread table positions and each conversation under it stays on one.
// Cold keys hash as before. The table carries key values, which are
// hashes for body keys, never prompt text.

// HotKeys is how a consistent-hashing pool finds and spreads its hot keys
// (the policy's hash { hot_keys { } } block). Nil turns it off.
type HotKeys struct {
	// Share is the share of the pool's keyed requests from which a key is
	// hot; zero means one replica's fair share (1 / healthy replicas).
	Share float64 `json:"share,omitempty"`
	// Max bounds the number of hot keys the pool's routes carry.
	Max int `json:"max"`
	// SpreadBy is the sub-key a hot key's requests are spread by, sent
	// in SpreadHeader: a body key for Envoy (the generated Lua filter
	// computes it), the value a gRPC client sends itself otherwise.
	SpreadBy HashKey `json:"spread_by"`
	// LogCluster is the Envoy cluster through which access logs reach
	// kvxds: the bootstrap's xDS cluster.
	LogCluster string `json:"log_cluster"`
	// Interval is the shortest time between two changes of the pool's
	// table, which are route (RDS) updates. It serialises as a Go
	// duration string ("10s"), as the pool's timeouts do.
	Interval time.Duration `json:"-"`
	// HalfLife is how fast a key's observed load is forgotten (a duration
	// string in JSON).
	HalfLife time.Duration `json:"-"`
	// Declared are the values the operator declares always hot (the
	// policy's declared blocks), sorted by key and value: values of
	// header keys, for pools whose data plane sends no access logs
	// (proxyless gRPC clients). They come from the policy, so every
	// instance serves them without the leader's decisions.
	Declared []DeclaredHotKey `json:"declared,omitempty"`
}

// DeclaredHotKey is a value of a header key of the chain that is always
// hot: it is in the pool's table, spread over every replica, whatever
// the logs say.
type DeclaredHotKey struct {
	// Key is the index in Hash.Keys of a header key.
	Key int `json:"key"`
	// Value is the header's value, as clients send it.
	Value string `json:"value"`
}

// hotKeysJSON is HotKeys' serialised form: durations as Go duration
// strings, omitted when zero.
type hotKeysJSON struct {
	Share      float64 `json:"share,omitempty"`
	Max        int     `json:"max"`
	SpreadBy   HashKey `json:"spread_by"`
	LogCluster string  `json:"log_cluster"`
	Interval   string  `json:"interval,omitempty"`
	HalfLife   string  `json:"half_life,omitempty"`

	Declared []DeclaredHotKey `json:"declared,omitempty"`
}

// MarshalJSON writes h with its durations as strings.
func (h HotKeys) MarshalJSON() ([]byte, error) {
	j := hotKeysJSON{Share: h.Share, Max: h.Max, SpreadBy: h.SpreadBy, LogCluster: h.LogCluster, Declared: h.Declared}
	if h.Interval != 0 {
		j.Interval = h.Interval.String()
	}
	if h.HalfLife != 0 {
		j.HalfLife = h.HalfLife.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (h *HotKeys) UnmarshalJSON(b []byte) error {
	var j hotKeysJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*h = HotKeys{Share: j.Share, Max: j.Max, SpreadBy: j.SpreadBy, LogCluster: j.LogCluster, Declared: j.Declared}
	for _, d := range []struct {
		name, s string
		dst     *time.Duration
	}{{"interval", j.Interval, &h.Interval}, {"half_life", j.HalfLife, &h.HalfLife}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("hot keys: %s: %w", d.name, err)
		}
		*d.dst = v
	}
	return nil
}

// HotKey is one entry of a pool's hot-key table.
type HotKey struct {
	// Key is the index in Hash.Keys of the key whose value is hot.
	Key int `json:"key"`
	// Value is the key's header value (a hash for body keys).
	Value string `json:"value"`
	// Share is the key's share of the pool's keyed requests when the
	// table was decided.
	Share float64 `json:"share"`
	// Spread is the number of sub-key buckets the key is spread over: a
	// power of two, at least 2 and at most MaxSpread.
	Spread int `json:"spread"`
	// Declared says the entry is one of HotKeys.Declared rather than
	// learned: it is never dropped for Max.
	Declared bool `json:"declared,omitempty"`
}

// SpreadBits is the length of a spread sub-key's header value: that many
// '0' and '1' characters, the first bits of the sub-key's hash. A route
// keeps the first log2(Spread) of them, so one header serves every spread.
const SpreadBits = 8

// MaxSpread is the largest spread: every value of SpreadBits bits.
const MaxSpread = 1 << SpreadBits

// Defaults of a pool's hot-key settings.
const (
	// DefaultHotKeysMax bounds a pool's table: each entry is matched by
	// a route regex, which every request with a key evaluates.
	DefaultHotKeysMax = 32
	// DefaultHotKeysInterval bounds the rate of route updates.
	DefaultHotKeysInterval = 10 * time.Second
	// DefaultHotKeysHalfLife forgets a key's load over about a minute,
	// so a key stays hot through its conversations' pauses.
	DefaultHotKeysHalfLife = 60 * time.Second
	// DefaultSpreadHeader is the request header that carries a request's
	// spread sub-key (SpreadBits characters '0' and '1').
	DefaultSpreadHeader = "x-kvxds-spread"
	// DefaultLogCluster is the Envoy cluster access logs reach kvxds
	// through: the generated bootstrap's xDS cluster. The model sits
	// above xds/bootstrap, so it states the name; a test holds it to
	// bootstrap.XDSClusterName.
	DefaultLogCluster = "kvxds"
	// MaxHotKeys bounds HotKeys.Max: a pool's routes carry one route per
	// hot key.
	MaxHotKeys = 256
	// MaxHotKeyValue bounds a hot key's value in bytes; body keys' values
	// are 16 hex digits, header keys' are the client's.
	MaxHotKeyValue = 128
	// DefaultMaxBodyBytes is Hash.MaxBodyBytes unless set: how much of a
	// request body Envoy buffers for body keys and the spread sub-key,
	// 4 MiB, about a million tokens of prompt text.
	DefaultMaxBodyBytes = 4 << 20
)

// DefaultHotKeys are the hot-key settings of a consistent-hashing pool
// whose policy says nothing: on, spread by conversation.
func DefaultHotKeys() HotKeys {
	return HotKeys{
		Max:        DefaultHotKeysMax,
		SpreadBy:   HashKey{Conversation: true},
		LogCluster: DefaultLogCluster,
		Interval:   DefaultHotKeysInterval,
		HalfLife:   DefaultHotKeysHalfLife,
	}
}

// withDefaults fills h's zero settings in with DefaultHotKeys'.
func (h HotKeys) withDefaults() HotKeys {
	d := DefaultHotKeys()
	h.Max = cmp.Or(h.Max, d.Max)
	if h.SpreadBy == (HashKey{}) {
		h.SpreadBy = d.SpreadBy
	}
	h.LogCluster = cmp.Or(h.LogCluster, d.LogCluster)
	h.Interval = cmp.Or(h.Interval, d.Interval)
	h.HalfLife = cmp.Or(h.HalfLife, d.HalfLife)
	return h
}

// validate reports what is wrong with a pool's hot-key settings.
func (h HotKeys) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("hot keys: "+format, args...)) }
	if math.IsNaN(h.Share) || h.Share < 0 || h.Share >= 1 {
		bad("share %g outside [0, 1)", h.Share)
	}
	if h.Max < 1 || h.Max > MaxHotKeys {
		bad("max %d outside 1..%d", h.Max, MaxHotKeys)
	}
	sources := 0
	for _, set := range []bool{h.SpreadBy.Conversation, h.SpreadBy.PromptPrefix != 0, h.SpreadBy.JSONField != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 || h.SpreadBy.Header != "" || h.SpreadBy.Cookie != "" || h.SpreadBy.QueryParameter != "" {
		bad("spread_by must be exactly one body key (conversation, prompt_prefix or json_field)")
	}
	if h.SpreadBy.PromptPrefix < 0 {
		bad("negative spread_by prompt prefix %d", h.SpreadBy.PromptPrefix)
	}
	if h.LogCluster == "" {
		bad("empty log cluster")
	}
	if h.Interval <= 0 || h.HalfLife <= 0 {
		bad("interval %s and half-life %s must be positive", h.Interval, h.HalfLife)
	}
	if len(h.Declared) > h.Max {
		bad("%d declared values, above max %d", len(h.Declared), h.Max)
	}
	for i, e := range h.Declared {
		if why := CheckHotKeyValue(e.Value); why != "" {
			bad("declared value %d: %s", i, why)
		}
		if i > 0 && cmp.Or(cmp.Compare(h.Declared[i-1].Key, e.Key), cmp.Compare(h.Declared[i-1].Value, e.Value)) >= 0 {
			bad("declared value %d: not sorted by key and value, or repeated", i)
		}
	}
	return errs
}

// validateDeclared reports declared values whose key is not a header key
// of the pool's chain.
func (p Pool) validateDeclared() []error {
	if p.Balancer != ConsistentHash || p.Hash.Hot == nil {
		return nil
	}
	var errs []error
	for i, e := range p.Hash.Hot.Declared {
		if e.Key < 0 || e.Key >= len(p.Hash.Keys) || p.Hash.Keys[e.Key].Header == "" {
			errs = append(errs, fmt.Errorf("pool %q: hot keys: declared value %d: key %d is not a header key of the chain", p.Name, i, e.Key))
		}
	}
	return errs
}

// HotKeyDrop is a hot-key table entry that Prepare left out of its pool,
// and why. A bad entry never stops a pool from serving: the pool serves
// without it, as if the key were cold.
type HotKeyDrop struct {
	Pool   string `json:"pool"`
	Entry  HotKey `json:"entry"`
	Reason string `json:"reason"`
}

// SpreadLevel is log2 of a valid spread: how many bits of the spread
// header a hot key's route hashes on.
func SpreadLevel(spread int) int { return bits.Len(uint(spread)) - 1 }

// checkHotKey says why e cannot be served in pool p, or "".
func checkHotKey(p *Pool, e HotKey) string {
	switch {
	case e.Key < 0 || e.Key >= len(p.Hash.Keys):
		return fmt.Sprintf("key index %d outside the chain of %d keys", e.Key, len(p.Hash.Keys))
	case p.Hash.Keys[e.Key].Cookie != "" || p.Hash.Keys[e.Key].QueryParameter != "":
		return fmt.Sprintf("key %d is not a header or body key", e.Key)
	case e.Spread < 2 || e.Spread > MaxSpread || e.Spread&(e.Spread-1) != 0:
		return fmt.Sprintf("spread %d is not a power of two in 2..%d", e.Spread, MaxSpread)
	case math.IsNaN(e.Share) || e.Share < 0 || e.Share > 1:
		return fmt.Sprintf("share %g outside [0, 1]", e.Share)
	}
	return CheckHotKeyValue(e.Value)
}

// CheckHotKeyValue says why v cannot be a hot key's value, or "": it
// must be 1 to MaxHotKeyValue bytes of printable ASCII without
// surrounding spaces, what every client carries and compares unchanged
// in a header (gRPC metadata values are printable ASCII; HTTP strips
// surrounding whitespace).
func CheckHotKeyValue(v string) string {
	switch {
	case v == "":
		return "empty value"
	case len(v) > MaxHotKeyValue:
		return fmt.Sprintf("value of %d bytes, above %d", len(v), MaxHotKeyValue)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return fmt.Sprintf("value byte %#x is not printable ASCII", c)
		}
	}
	if v[0] == ' ' || v[len(v)-1] == ' ' {
		return "value starts or ends with a space"
	}
	return ""
}

// compareKept orders a table by what stays under Max: declared entries
// first, then the highest shares, then key and value.
func compareKept(a, b HotKey) int {
	if a.Declared != b.Declared {
		if a.Declared {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(b.Share, a.Share), compareHotKeys(a, b))
}

// compareHotKeys orders a table by key index, then value.
func compareHotKeys(a, b HotKey) int {
	return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value))
}

// dropBadHotKeys removes from the normalised pool p every table entry
// that cannot be served, and returns them with their reasons: entries of
// a pool without hot keys, bad entries, repeated (key, value) pairs
// (the first in Normalize's order stays), and entries beyond Hot.Max
// (the highest shares stay, ties by value). The table stays sorted.
func dropBadHotKeys(p *Pool) []HotKeyDrop {
	if len(p.HotKeys) == 0 {
		return nil
	}
	var drops []HotKeyDrop
	drop := func(e HotKey, format string, args ...any) {
		drops = append(drops, HotKeyDrop{Pool: p.Name, Entry: e, Reason: fmt.Sprintf(format, args...)})
	}
	if p.Balancer != ConsistentHash || p.Hash.Hot == nil {
		for _, e := range p.HotKeys {
			drop(e, "the pool has no hot keys")
		}
		p.HotKeys = nil
		return drops
	}
	keep := p.HotKeys[:0:0]
	for i, e := range p.HotKeys {
		if why := checkHotKey(p, e); why != "" {
			drop(e, "%s", why)
			continue
		}
		if i > 0 && compareHotKeys(p.HotKeys[i-1], e) == 0 {
			drop(e, "repeats key %d value %q", e.Key, e.Value)
			continue
		}
		keep = append(keep, e)
	}
	if n := p.Hash.Hot.Max; n > 0 && len(keep) > n {
		slices.SortStableFunc(keep, compareKept)
		for _, e := range keep[n:] {
			drop(e, "beyond the pool's %d hot keys", n)
		}
		keep = keep[:n]
		slices.SortFunc(keep, compareHotKeys)
	}
	p.HotKeys = keep
	return drops
}

// validateHotKeys reports what is wrong with a pool's hot-key table (the
// entries dropBadHotKeys would drop).
func (p Pool) validateHotKeys() []error {
	if len(p.HotKeys) == 0 {
		return nil
	}
	if p.Balancer != ConsistentHash || p.Hash.Hot == nil {
		return []error{fmt.Errorf("pool %q: hot-key table without hot keys", p.Name)}
	}
	var errs []error
	for i, e := range p.HotKeys {
		if why := checkHotKey(&p, e); why != "" {
			errs = append(errs, fmt.Errorf("pool %q: hot key %d: %s", p.Name, i, why))
		}
		if i > 0 && compareHotKeys(p.HotKeys[i-1], e) >= 0 {
			errs = append(errs, fmt.Errorf("pool %q: hot key %d: not sorted by key and value, or repeated", p.Name, i))
		}
	}
	if len(p.HotKeys) > p.Hash.Hot.Max {
		errs = append(errs, fmt.Errorf("pool %q: %d hot keys, above max %d", p.Name, len(p.HotKeys), p.Hash.Hot.Max))
	}
	return errs
}
