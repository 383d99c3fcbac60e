package fleet

import "time"

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
	// table, which are route (RDS) updates.
	Interval time.Duration `json:"-"`
	// HalfLife is how fast a key's observed load is forgotten.
	HalfLife time.Duration `json:"-"`
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
)
