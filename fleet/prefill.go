package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Prefill/decode disaggregation pairs two pools: the decode pool, where
// requests are sent and balanced by load, and the prefill pool, whose
// replicas compute prompts and hand their KV cache to the decode replica.
// Prefix affinity pays on the prefill side, so the prefill pool is a
// consistent-hashing pool and its key chain picks the prefill replica:
//
//   - Clients that orchestrate the two steps themselves (vLLM's proxy
//     pattern, proxyless gRPC) use the two pools as two targets: the
//     prefill pool hashed on its keys, the decode pool balanced.
//   - Envoy, in front of decode replicas that run llm-d's routing
//     sidecar, sends each request to a decode replica and names the
//     prefill replica in a header (Prefill.Header), chosen from the decode
//     pool's PrefillTable (a SlotTable) by the prefill pool's key chain: consistent, the
//     same on every Envoy and every kvxds instance.
//
// The table is a pure function of the prefill pool's replicas (Prepare
// builds it), carried in the decode pool so that a change of the prefill
// side reaches the decode pool's routes, where Envoy reads it.

// DefaultPrefillHeader is the header llm-d's routing sidecar reads the
// prefill replica from (host:port).
const DefaultPrefillHeader = "x-prefiller-host-port"

// PrefillSlots is the number of slots in a prefill table: a key's slot is
// its hash modulo PrefillSlots, so each replica holds about
// PrefillSlots/N of the key space, and a replica that joins or leaves
// moves only slots of its own.
const PrefillSlots = 1024

// MaxPrefillHosts bounds the replicas a prefill table can name: a slot
// holds its host's index as three hex digits.
const MaxPrefillHosts = 4096

// Prefill links a decode pool to its prefill pool.
type Prefill struct {
	// Pool names the prefill pool: a consistent-hashing pool without a
	// prefill block of its own.
	Pool string `json:"pool"`
	// Header receives the chosen prefill replica, host:port.
	Header string `json:"header"`
	// MinBodyBytes: a request whose declared body is shorter is prefilled
	// by its decode replica (no header is set); a short prompt costs less
	// to compute than to transfer. Zero sends every request to a prefill
	// replica.
	MinBodyBytes int `json:"min_body_bytes,omitempty"`
}

// SlotTable is a pool's key space in PrefillSlots slots, each naming the
// replica its keys go to, and the key chain that picks a slot: a decode
// pool's view of its prefill pool (Pool.PrefillTable), or a hash pool's
// own table where Envoy's Lua filter picks the replica (balance_on =
// "prompt_bytes").
type SlotTable struct {
	// Keys is the prefill pool's key chain: the first key a request has
	// picks its slot; a request with none gets a random slot.
	Keys []HashKey `json:"keys"`
	// MaxBodyBytes is the prefill pool's body limit for its body keys.
	MaxBodyBytes int `json:"max_body_bytes,omitempty"`
	// Hosts are the serving prefill replicas' addresses (host:port),
	// sorted; empty when none serves, and the decode replicas prefill
	// locally.
	Hosts []string `json:"hosts"`
	// Slots are PrefillSlots indexes into Hosts; empty with Hosts.
	Slots []uint16 `json:"slots"`
	// Hot are the prefill pool's hot keys (its HotKeys): a request of one
	// picks its slot by its key and the first log2(Spread) bits of its
	// spread sub-key (SpreadBy), so the key's conversations spread over
	// up to Spread slots, each conversation on one.
	Hot []HotKey `json:"hot,omitempty"`
	// SpreadBy is the prefill pool's spread sub-key; nil when it finds no
	// hot keys.
	SpreadBy *HashKey `json:"spread_by,omitempty"`
	// BalanceFactor is the prefill pool's Hash.BalanceFactor: with it,
	// each Envoy bounds its requests in flight to a prefill replica as
	// Envoy bounds a hash table's (zero: unbounded).
	BalanceFactor uint32 `json:"balance_factor,omitempty"`
	// BalanceOn is the prefill pool's Hash.BalanceOn: with
	// BalanceOnPromptBytes the bound counts prompt bytes, not requests.
	BalanceOn string `json:"balance_on,omitempty"`
	// LoadInterval is the prefill pool's Hash.LoadInterval: how often
	// kvxds serves the fleet's figures where the bound counts prompt
	// bytes (zero: each filter's own counts).
	LoadInterval time.Duration `json:"load_interval,omitempty"`
	// Load is each host's prompt bytes in flight (Endpoint.InFlightBytes),
	// in Hosts order, where the pool's load is observed (Pool.LoadAt);
	// nil otherwise. LoadAt is when it was counted, LoadTTL how long a
	// filter believes it (ten load intervals): a table kvxds no longer
	// refreshes (kvxds gone) stops biasing the bound.
	Load    []uint64      `json:"load,omitempty"`
	LoadAt  time.Time     `json:"load_at,omitzero"`
	LoadTTL time.Duration `json:"load_ttl,omitempty"`
	// LoadLag is how long after a request starts its Envoy's own count
	// of it may be missing from Load (the upstream log's flush interval,
	// twice, and the push); zero without Load.
	LoadLag time.Duration `json:"load_lag,omitempty"`
	// Cached is, where the bound counts prompt bytes, each host's
	// prefix-cache hit rate in sixteenths (Endpoint.Cached), in Hosts
	// order; nil when none is known. The bound weighs a host's bytes in
	// flight by 1 − Cached/16: a replica whose requests mostly hit its
	// cache computes little of the bytes it was sent.
	Cached []uint8 `json:"cached,omitempty"`
	// Adapters are, in a hash pool's own table, its placed adapters'
	// entries by name (PickAdapters).
	Adapters map[string]AdapterPick `json:"adapters,omitempty"`
	// AdapterSlots are then each host's adapter slots (Adapters.Slots),
	// in Hosts order, and Running, with Load, the adapters each host has
	// requests in flight for (Endpoint.InFlightAdapters, at most
	// MaxRunning), so that a request goes where its adapter runs or a
	// slot is free rather than wait for one.
	AdapterSlots []int    `json:"adapter_slots,omitempty"`
	Running      []string `json:"running,omitempty"`
	// Went are, with Load, the keys whose last request went away from
	// their slot's replica (Pool.Went, the MaxWent latest whose replica
	// is in Hosts), sorted by key: a filter sends a key's next request
	// there while it is under the bound, where its prefix was last
	// computed.
	Went []WentKey `json:"went,omitempty"`
	// Seen are, with Load, the keys placed lately (Pool.Seen): a key not
	// in it has no prefix cached anywhere, so that moving it costs no hit,
	// and a filter bounds it at its slot's share of the mean, not at
	// BalanceFactor.
	Seen string `json:"seen,omitempty"`
}

// WentKey is a key (its hash's first eight hex digits) and the index in
// Hosts of the replica its last request went to.
type WentKey struct {
	Key  string `json:"key"`
	Host int    `json:"host"`
}

// MaxWent is the most keys a table names in Went: eleven bytes each.
const MaxWent = 2048

// MaxCached is the highest Endpoint.Cached (weights.CachedMax): a host
// counts at least a sixteenth of its bytes in flight.
const MaxCached = 15

// LoadLogFlush is how often Envoy flushes the upstream log that reports
// a pool's requests in flight: a tenth of its load interval, at least
// MinLoadInterval.
func LoadLogFlush(h Hash) time.Duration { return max(h.LoadInterval/10, MinLoadInterval) }

// LoadTTL is how long a pick filter believes a table's bytes in flight:
// ten load intervals (kvxds refreshes a table at least every five).
func LoadTTL(h Hash) time.Duration { return 10 * h.LoadInterval }

// Host returns the prefill replica of slot s, or "" if there is none.
func (t *SlotTable) Host(s int) string {
	if t == nil || s < 0 || s >= len(t.Slots) {
		return ""
	}
	return t.Hosts[t.Slots[s]]
}

// Shares returns each host's number of slots, in Hosts order.
func (t *SlotTable) Shares() []int {
	if t == nil {
		return nil
	}
	out := make([]int, len(t.Hosts))
	for _, i := range t.Slots {
		out[i]++
	}
	return out
}

// EncodeSlots is Slots as the Lua filter reads it: three lowercase hex
// digits per slot, slot 0 first.
func (t *SlotTable) EncodeSlots() string {
	b := make([]byte, 0, 3*len(t.Slots))
	for _, i := range t.Slots {
		b = append(b, hexDigit(i>>8), hexDigit(i>>4), hexDigit(i))
	}
	return string(b)
}

func hexDigit(v uint16) byte { return "0123456789abcdef"[v&0xf] }

// NewSlotTable builds the table of a pool (prefill, or a hash pool's
// own, with an empty decode): every serving replica (healthy, with a
// weight) takes its weighted share of the slots, exactly, each slot going
// to the replica that wins it by weighted rendezvous hashing of its
// identity while that replica has room (assignSlots), a replica of weight
// w competing with w virtual identities. Integer hashes only, so every
// kvxds instance builds the same table on any machine; a replica joining
// or leaving moves the slots it wins or held and the few that full
// replicas pass on. Replicas sharing an address are
// served once, under the lowest identity; a replica that decode also
// lists (a replica in both roles, which discovery may find) is left out:
// it decodes.
func NewSlotTable(prefill, decode *Pool) *SlotTable {
	t := &SlotTable{Keys: slices.Clone(prefill.Hash.Keys), MaxBodyBytes: prefill.Hash.MaxBodyBytes, BalanceFactor: prefill.Hash.BalanceFactor, BalanceOn: prefill.Hash.BalanceOn}
	if t.BalanceFactor > 0 && t.BalanceOn == BalanceOnPromptBytes {
		t.LoadInterval = prefill.Hash.LoadInterval
	}
	if h := prefill.Hash.Hot; h != nil {
		by := h.SpreadBy
		t.SpreadBy = &by
		for _, k := range prefill.HotKeys {
			if k.Spread >= 2 {
				t.Hot = append(t.Hot, k)
			}
		}
	}
	type member struct {
		id     string
		addr   string
		w      uint32
		load   uint64
		cached uint8
	}
	var ms []member
	seen := map[string]bool{}
	for _, e := range decode.Endpoints {
		seen[e.Address()] = true
	}
	eps := slices.Clone(prefill.Endpoints)
	slices.SortFunc(eps, func(a, b Endpoint) int { return cmp.Compare(a.Identity(), b.Identity()) })
	for _, e := range eps {
		if e.Health != Healthy || e.Weight == 0 || seen[e.Address()] {
			continue
		}
		seen[e.Address()] = true
		ms = append(ms, member{id: e.Identity(), addr: e.Address(), w: e.Weight, load: e.InFlightBytes, cached: e.Cached})
	}
	if len(ms) == 0 {
		return t
	}
	if len(ms) > MaxPrefillHosts {
		ms = ms[:MaxPrefillHosts]
	}
	slices.SortFunc(ms, func(a, b member) int { return cmp.Compare(a.addr, b.addr) })
	for _, m := range ms {
		t.Hosts = append(t.Hosts, m.addr)
	}
	if t.BalanceFactor > 0 && t.BalanceOn == BalanceOnPromptBytes && slices.ContainsFunc(ms, func(m member) bool { return m.cached > 0 }) {
		for _, m := range ms {
			t.Cached = append(t.Cached, min(m.cached, MaxCached))
		}
	}
	if !prefill.LoadAt.IsZero() && prefill.Hash.LoadInterval > 0 {
		for _, m := range ms {
			t.Load = append(t.Load, m.load)
		}
		t.LoadLag = 3 * LoadLogFlush(prefill.Hash)
		t.LoadAt, t.LoadTTL = prefill.LoadAt, LoadTTL(prefill.Hash)
		t.Went, t.Seen = wentKeys(prefill.Went, t.Hosts), prefill.Seen
	}
	// Weights in lowest terms, so that equal replicas compete with one
	// identity each whatever their scale. Each virtual identity's hash is
	// the same for every slot but mixed with the slot's, so a table costs
	// one hash per slot and identity (more for the slots a full replica
	// passes on).
	var g uint32
	for _, m := range ms {
		g = gcd(g, m.w)
	}
	seeds := make([][]uint64, len(ms))
	for i, m := range ms {
		for k := range min(m.w/g, maxPrefillVnodes) {
			seeds[i] = append(seeds[i], prefillSeed(m.id, int(k)))
		}
	}
	t.Slots = assignSlots(PrefillSlots, seeds)
	return t
}

// prefillSeed is the hash of a replica's k-th virtual identity.
func prefillSeed(id string, k int) uint64 {
	return xxhash.Sum64String("prefill\x00" + id + "\x00" + strconv.Itoa(k))
}

// maxPrefillVnodes caps a replica's virtual identities: a weight beyond it
// gains no more slots than this many, which keeps a table's cost bounded.
const maxPrefillVnodes = 64

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// mix64 is a bijective 64-bit finaliser (splitmix64's): every bit of the
// result depends on every bit of x.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// validatePrefill checks p's link to its prefill pool, given the pools by
// name.
func (p *Pool) validatePrefill(pools map[string]*Pool) []error {
	pf := p.Prefill
	if pf == nil {
		if p.PrefillTable != nil {
			return []error{fmt.Errorf("pool %q: a prefill table without a prefill pool", p.Name)}
		}
		return nil
	}
	var errs []error
	q, ok := pools[pf.Pool]
	switch {
	case pf.Pool == p.Name:
		errs = append(errs, fmt.Errorf("pool %q: prefills on itself", p.Name))
	case !ok:
		errs = append(errs, fmt.Errorf("pool %q: prefill pool %q does not exist", p.Name, pf.Pool))
	case q.Balancer != ConsistentHash:
		errs = append(errs, fmt.Errorf("pool %q: prefill pool %q does not hash", p.Name, pf.Pool))
	case q.Prefill != nil:
		errs = append(errs, fmt.Errorf("pool %q: prefill pool %q has a prefill pool of its own", p.Name, pf.Pool))
	}
	if err := CheckPrefillHeader(pf.Header); err != nil {
		errs = append(errs, fmt.Errorf("pool %q: %w", p.Name, err))
	}
	if pf.MinBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("pool %q: negative min_body_bytes %d", p.Name, pf.MinBodyBytes))
	}
	return errs
}

// CheckPrefillHeader reports why Envoy's Lua filter cannot set h as the
// prefill header, if it cannot: it must be a lowercase header token, not a
// pseudo-header, nor a header Envoy or HTTP reserve, nor one kvxds
// generates for itself.
func CheckPrefillHeader(h string) error {
	if h == "" {
		return errors.New("prefill header is empty")
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("prefill header %q: %q is not allowed; use lowercase letters, digits, '-', '_' and '.'", h, c)
		}
	}
	switch h {
	case "host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te",
		"content-length", "content-type", "authorization", "cookie":
		return fmt.Errorf("prefill header %q is reserved by HTTP; name another, as in %q", h, DefaultPrefillHeader)
	}
	for _, prefix := range []string{"x-envoy-", "grpc-", "x-kvxds-"} {
		if len(h) >= len(prefix) && h[:len(prefix)] == prefix {
			return fmt.Errorf("prefill header %q: headers starting %q are reserved; name another, as in %q", h, prefix, DefaultPrefillHeader)
		}
	}
	return nil
}

// wentKeys are the MaxWent latest of went whose replica is in hosts
// (sorted), the later first and then the lower key, sorted by key.
func wentKeys(went map[string]KeyWent, hosts []string) []WentKey {
	type kw struct {
		key string
		KeyWent
		host int
	}
	var all []kw
	for k, w := range went {
		if i, ok := slices.BinarySearch(hosts, w.Host); ok {
			all = append(all, kw{k, w, i})
		}
	}
	slices.SortFunc(all, func(a, b kw) int { return cmp.Or(cmp.Compare(b.At, a.At), cmp.Compare(a.key, b.key)) })
	all = all[:min(len(all), MaxWent)]
	slices.SortFunc(all, func(a, b kw) int { return cmp.Compare(a.key, b.key) })
	var out []WentKey
	for _, w := range all {
		out = append(out, WentKey{Key: w.key, Host: w.host})
	}
	return out
}
