package fleet

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
)

// LoRA adapters.
//
// A multi-LoRA pool serves one base model and many adapters; each request
// names one (the OpenAI body's "model"). An engine holds at most max_lora
// adapters on its GPU, a request for an adapter it does not hold waits
// for a swap-in, and each adapter's prefix cache is its own. Spreading an
// adapter's requests over every replica loads every adapter everywhere
// and swaps constantly. kvxds places each adapter on a small, stable set
// of replicas sized to its demand (Adapter.Replicas), chosen by
// rendezvous hashing and by the replicas' free slots (AdapterMembers),
// and serves each set as a cluster of its own that the adapter's route
// hashes over with the pool's keys, as it serves a tenant group.

// AdapterInfix joins a pool's name and an adapter's name into the name of
// the adapter's cluster and assignment: adapter "sql" of pool "chat" is
// "chat/adapter/sql".
const AdapterInfix = "/adapter/"

// Defaults and limits of a pool's adapter settings.
const (
	// DefaultAdapterHeader is the request header that names a request's
	// adapter: set by the generated Lua filter for Envoy from the body,
	// sent by gRPC clients themselves.
	DefaultAdapterHeader = "x-kvxds-adapter"
	// AdapterRejectedHeader is the header the Lua filter sets when the
	// body's adapter field cannot name an adapter, with the reason; the
	// access log carries it so that kvxds counts rejections.
	AdapterRejectedHeader = "x-kvxds-adapter-rejected"
	// DefaultAdapterBodyField is the JSON body field naming the model.
	DefaultAdapterBodyField = "model"
	// DefaultMaxLoRA is the adapter slots a replica is assumed to have
	// until its engine reports its own: vLLM's default --max-loras (1).
	// An engine started without the flag holds one adapter at a time;
	// assuming more would place adapters where they swap.
	DefaultMaxLoRA = 1
	// DefaultAdaptersMax bounds the adapters a pool places: each has a
	// cluster, an assignment and a route.
	DefaultAdaptersMax = 256
	// MaxAdapters bounds Adapters.Max.
	MaxAdapters = 4096
	// MaxAdapterSlots bounds Adapters.MaxLoRA.
	MaxAdapterSlots = 1024
	// DefaultAdaptersInterval is the shortest time between two placement
	// changes of a pool.
	DefaultAdaptersInterval = 10 * time.Second
	// DefaultAdaptersHalfLife forgets an adapter's demand over about a
	// minute.
	DefaultAdaptersHalfLife = 60 * time.Second
	// MaxAdapterName bounds an adapter's name in bytes.
	MaxAdapterName = 128
	// DefaultAdapterBodyBytes is the longest body the Lua filter reads
	// for the adapter field when the pool sets no body limit.
	DefaultAdapterBodyBytes = 4 << 20
)

// Adapters is how a consistent-hashing pool places LoRA adapters (the
// policy's adapters { } block). Nil turns it off.
type Adapters struct {
	// Header is the request header an adapter's route matches exactly.
	Header string `json:"header"`
	// BodyField is the top-level JSON body field the Lua filter copies
	// into Header for Envoy.
	BodyField string `json:"body_field"`
	// BaseModels are model names that mean "no adapter": the filter sets
	// no header for them, and they are never placed.
	BaseModels []string `json:"base_models,omitempty"`
	// Always are adapters placed whatever their demand (one replica at
	// least); others are learned.
	Always []string `json:"always,omitempty"`
	// MaxLoRA is the adapter slots a replica is assumed to have unless
	// its engine reports its own (Endpoint.MaxLoRA).
	MaxLoRA int `json:"max_lora"`
	// Max bounds the adapters placed; the rest use the pool's routes.
	Max int `json:"max"`
	// Interval is the shortest time between placement changes; HalfLife
	// how fast demand is forgotten (duration strings in JSON).
	Interval time.Duration `json:"-"`
	HalfLife time.Duration `json:"-"`
	// MemberWeight is Group.MemberWeight for the adapters' tables.
	MemberWeight uint32 `json:"member_weight,omitempty"`
}

type adaptersJSON struct {
	Header       string   `json:"header"`
	BodyField    string   `json:"body_field"`
	BaseModels   []string `json:"base_models,omitempty"`
	Always       []string `json:"always,omitempty"`
	MaxLoRA      int      `json:"max_lora"`
	Max          int      `json:"max"`
	Interval     string   `json:"interval,omitempty"`
	HalfLife     string   `json:"half_life,omitempty"`
	MemberWeight uint32   `json:"member_weight,omitempty"`
}

// MarshalJSON writes a with its durations as strings.
func (a Adapters) MarshalJSON() ([]byte, error) {
	j := adaptersJSON{Header: a.Header, BodyField: a.BodyField, BaseModels: a.BaseModels, Always: a.Always,
		MaxLoRA: a.MaxLoRA, Max: a.Max, MemberWeight: a.MemberWeight}
	if a.Interval != 0 {
		j.Interval = a.Interval.String()
	}
	if a.HalfLife != 0 {
		j.HalfLife = a.HalfLife.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *Adapters) UnmarshalJSON(b []byte) error {
	var j adaptersJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*a = Adapters{Header: j.Header, BodyField: j.BodyField, BaseModels: j.BaseModels, Always: j.Always,
		MaxLoRA: j.MaxLoRA, Max: j.Max, MemberWeight: j.MemberWeight}
	for _, d := range []struct {
		name, s string
		dst     *time.Duration
	}{{"interval", j.Interval, &a.Interval}, {"half_life", j.HalfLife, &a.HalfLife}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("adapters: %s: %w", d.name, err)
		}
		*d.dst = v
	}
	return nil
}

// DefaultAdapters are the settings of an empty adapters { } block.
func DefaultAdapters() Adapters {
	return Adapters{
		Header:    DefaultAdapterHeader,
		BodyField: DefaultAdapterBodyField,
		MaxLoRA:   DefaultMaxLoRA,
		Max:       DefaultAdaptersMax,
		Interval:  DefaultAdaptersInterval,
		HalfLife:  DefaultAdaptersHalfLife,
	}
}

// withDefaults fills a's zero settings in with DefaultAdapters', and
// sorts its lists.
func (a Adapters) withDefaults() Adapters {
	d := DefaultAdapters()
	a.Header = strings.ToLower(cmp.Or(a.Header, d.Header))
	a.BodyField = cmp.Or(a.BodyField, d.BodyField)
	a.MaxLoRA = cmp.Or(a.MaxLoRA, d.MaxLoRA)
	a.Max = cmp.Or(a.Max, d.Max)
	a.Interval = cmp.Or(a.Interval, d.Interval)
	a.HalfLife = cmp.Or(a.HalfLife, d.HalfLife)
	a.BaseModels = slices.Compact(slices.Sorted(slices.Values(a.BaseModels)))
	a.Always = slices.Compact(slices.Sorted(slices.Values(a.Always)))
	return a
}

// IsBase reports whether model is one of a's base models.
func (a *Adapters) IsBase(model string) bool {
	_, ok := slices.BinarySearch(a.BaseModels, model)
	return ok
}

// validate reports what is wrong with a pool's adapter settings.
func (a Adapters) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("adapters: "+format, args...)) }
	if a.Header == "" || strings.ContainsFunc(a.Header, func(c rune) bool { return c <= ' ' || c >= 0x7f || c == ':' }) {
		bad("bad header %q", a.Header)
	}
	if a.BodyField == "" {
		bad("empty body field")
	}
	if a.MaxLoRA < 1 || a.MaxLoRA > MaxAdapterSlots {
		bad("max_lora %d outside 1..%d", a.MaxLoRA, MaxAdapterSlots)
	}
	if a.Max < 1 || a.Max > MaxAdapters {
		bad("max %d outside 1..%d", a.Max, MaxAdapters)
	}
	if a.Interval <= 0 || a.HalfLife <= 0 {
		bad("interval %s and half-life %s must be positive", a.Interval, a.HalfLife)
	}
	for _, n := range a.Always {
		if why := CheckAdapterName(n); why != "" {
			bad("adapter %q: %s", n, why)
		}
	}
	return errs
}

// CheckAdapterName says why name cannot name a placed adapter, or "":
// 1 to MaxAdapterName bytes of printable ASCII without whitespace, what
// every client carries unchanged in a header and in a cluster name.
func CheckAdapterName(name string) string {
	if name == "" {
		return "empty name"
	}
	if len(name) > MaxAdapterName {
		return fmt.Sprintf("name of %d bytes, above %d", len(name), MaxAdapterName)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= 0x20 || c >= 0x7f {
			return fmt.Sprintf("name byte %#x is not printable ASCII without whitespace", c)
		}
	}
	return ""
}

// Adapter is one placed adapter of a pool, as decided from its demand.
type Adapter struct {
	Name string `json:"name"`
	// Replicas is the number of healthy replicas it is placed on.
	Replicas int `json:"replicas"`
	// Share is its share of the pool's requests when it was decided: it
	// orders placement (the largest first take free slots).
	Share float64 `json:"share"`
	// Stage is "" once the adapter is routed; StageAdding or
	// StageLeaving while its cluster is served without its route. Each
	// decision advances every adapter one stage (see StageAdding).
	Stage string `json:"stage,omitempty"`
}

// Routed reports whether a's route is served (its stage is "").
func (a Adapter) Routed() bool { return a.Stage == "" }

// ClusterName is the name of a's cluster and assignment in pool.
func (a Adapter) ClusterName(pool string) string { return pool + AdapterInfix + a.Name }

// AdapterPlacement is a pool's placement as the leader decides and
// publishes it: the adapters, and the adapter slots each replica's engine
// reports (by identity; replicas absent use the policy's MaxLoRA).
type AdapterPlacement struct {
	Adapters []Adapter      `json:"adapters,omitempty"`
	Slots    map[string]int `json:"slots,omitempty"`
}

// AdapterDrop is an adapter Prepare left out of its pool, and why: its
// requests use the pool's own routes. A bad entry never fails a push.
type AdapterDrop struct {
	Pool    string  `json:"pool"`
	Adapter Adapter `json:"adapter"`
	Reason  string  `json:"reason"`
}

// checkAdapter says why a cannot be placed in pool p, or "".
func checkAdapter(p *Pool, a Adapter) string {
	if why := CheckAdapterName(a.Name); why != "" {
		return why
	}
	switch {
	case p.LoRA.IsBase(a.Name):
		return "a base model"
	case a.Replicas < 1:
		return fmt.Sprintf("replicas %d below 1", a.Replicas)
	case math.IsNaN(a.Share) || a.Share < 0 || a.Share > 1:
		return fmt.Sprintf("share %g outside [0, 1]", a.Share)
	case !validStage(a.Stage):
		return fmt.Sprintf("unknown stage %q", a.Stage)
	}
	return ""
}

// dropBadAdapters removes from the normalised pool p every adapter that
// cannot be placed and returns them with their reasons: adapters of a
// pool without adapter settings, bad names or numbers, repeated names
// (the first stays), and adapters beyond LoRA.Max (the highest shares
// stay, ties by name). Pool.Adapters stays sorted by name.
func dropBadAdapters(p *Pool) []AdapterDrop {
	if len(p.Adapters) == 0 {
		return nil
	}
	var drops []AdapterDrop
	drop := func(a Adapter, format string, args ...any) {
		drops = append(drops, AdapterDrop{Pool: p.Name, Adapter: a, Reason: fmt.Sprintf(format, args...)})
	}
	if p.Balancer != ConsistentHash || p.LoRA == nil {
		for _, a := range p.Adapters {
			drop(a, "the pool places no adapters")
		}
		p.Adapters = nil
		return drops
	}
	keep := p.Adapters[:0:0]
	for i, a := range p.Adapters {
		if why := checkAdapter(p, a); why != "" {
			drop(a, "%s", why)
			continue
		}
		if i > 0 && p.Adapters[i-1].Name == a.Name {
			drop(a, "repeats adapter %q", a.Name)
			continue
		}
		keep = append(keep, a)
	}
	if n := p.LoRA.Max; len(keep) > n {
		slices.SortStableFunc(keep, byShare)
		for _, a := range keep[n:] {
			drop(a, "beyond the pool's %d adapters", n)
		}
		keep = keep[:n]
		slices.SortFunc(keep, func(a, b Adapter) int { return cmp.Compare(a.Name, b.Name) })
	}
	p.Adapters = keep
	return drops
}

// byShare orders adapters by share, highest first, then by name.
func byShare(a, b Adapter) int {
	return cmp.Or(cmp.Compare(b.Share, a.Share), cmp.Compare(a.Name, b.Name))
}

// validateAdapters reports what is wrong with a pool's adapter settings
// and placement (the entries dropBadAdapters would drop).
func (p Pool) validateAdapters() []error {
	var errs []error
	if p.LoRA != nil {
		if p.Balancer != ConsistentHash {
			errs = append(errs, fmt.Errorf("pool %q: adapters need consistent hashing, not %q", p.Name, p.Balancer))
		}
		for _, err := range p.LoRA.validate() {
			errs = append(errs, fmt.Errorf("pool %q: %w", p.Name, err))
		}
	}
	if len(p.Adapters) == 0 {
		return errs
	}
	if p.LoRA == nil {
		return append(errs, fmt.Errorf("pool %q: adapter placement without adapter settings", p.Name))
	}
	for i, a := range p.Adapters {
		if why := checkAdapter(&p, a); why != "" {
			errs = append(errs, fmt.Errorf("pool %q: adapter %q: %s", p.Name, a.Name, why))
		}
		if i > 0 && p.Adapters[i-1].Name >= a.Name {
			errs = append(errs, fmt.Errorf("pool %q: adapter %q: not sorted by name, or repeated", p.Name, a.Name))
		}
	}
	if len(p.Adapters) > p.LoRA.Max {
		errs = append(errs, fmt.Errorf("pool %q: %d adapters, above max %d", p.Name, len(p.Adapters), p.LoRA.Max))
	}
	for _, e := range p.Endpoints {
		if e.MaxLoRA < 0 || e.MaxLoRA > MaxAdapterSlots {
			errs = append(errs, fmt.Errorf("pool %q: endpoint %s: max_lora %d outside 0..%d", p.Name, e.Address(), e.MaxLoRA, MaxAdapterSlots))
		}
	}
	return errs
}

// AdapterPlan is one placed adapter's table.
type AdapterPlan struct {
	// Name is the adapter's; the embedded GroupPlan its cluster
	// (Adapter.ClusterName), members (in hash key order) and ring sizes.
	Name string
	GroupPlan
	// OverCapacity is set when the adapter is in the tail: the slots for
	// placed adapters were taken by adapters of larger share, so it is on
	// its first-ranked replica that holds adapters, in the slots kept for
	// the tail there (TailSlots), which its engine swaps among the tail's
	// adapters.
	OverCapacity bool
}

// Adapter placement.
//
// Adapters are placed in order of decided share, highest first (then by
// name), so the busiest take slots first; the decision keeps an adapter's
// share until it moves by more than a factor of √2, so that noise does
// not reorder them. Each ranks the pool's replicas by rendezvous hashing,
// xxhash64("adapter\x00" + name + "\x00" + identity) highest first (the
// prefix keeps its ranking apart from a tenant group of the same name),
// and takes replicas in rank order, skipping those whose slots for placed
// adapters are taken, until it holds Replicas that hold adapters. A
// replica's slots are its engine's max_lora (Endpoint.MaxLoRA) when
// reported, else the policy's MaxLoRA; a quarter of them (at least one)
// are for placed adapters, one each per member, and the rest are kept for
// the tail (TailSlots). An adapter that finds no slot is in the tail
// (OverCapacity): one member, its first-ranked replica that holds
// adapters, where the tail's adapters share the slots kept for them. A
// tail adapter's replica depends on the replicas alone, so it never moves
// for capacity, and its conversations stay together.
//
// A replica that is saturated (the escape hatch, Endpoint.Saturated)
// keeps its place and counts toward the adapter's replicas: saturation
// passes, and a fill-in would load the adapter elsewhere only to move it
// back. It is served healthy in the adapter's table (adapterMembers). A
// replica that drains to leave, is degraded or unhealthy keeps its place
// (and its slot) with its health, as in a group, so it gets no new
// requests while the next-ranked replica fills in. A replica joining or
// leaving moves only the adapters that rank it among their members, and
// those whose slots it changes.

// adapterScore is an endpoint's weight in adapter's ranking.
func adapterScore(adapter, identity string) uint64 {
	return xxhash.Sum64String("adapter\x00" + adapter + "\x00" + identity)
}

// AdapterRanking returns the indexes of p's endpoints in a's rendezvous
// ranking, highest first (ties by hash key).
func AdapterRanking(p *Pool, name string) []int {
	type ranked struct {
		score uint64
		i     int
	}
	rs := make([]ranked, len(p.Endpoints))
	for i := range p.Endpoints {
		rs[i] = ranked{adapterScore(name, p.Endpoints[i].HashKey), i}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(p.Endpoints[a.i].HashKey, p.Endpoints[b.i].HashKey))
	})
	out := make([]int, len(rs))
	for j, r := range rs {
		out[j] = r.i
	}
	return out
}

// Slots is the adapter slots of endpoint e of a pool placing adapters
// with settings a.
func (a *Adapters) Slots(e *Endpoint) int {
	if e.MaxLoRA > 0 {
		return e.MaxLoRA
	}
	return a.MaxLoRA
}

// planAdapters places the normalised pool p's adapters.
func planAdapters(p *Pool) []AdapterPlan {
	if len(p.Adapters) == 0 || p.LoRA == nil {
		return nil
	}
	order := slices.Clone(p.Adapters)
	slices.SortStableFunc(order, byShare)
	// free is each replica's slots for placed adapters: all but the
	// tail's (TailSlots).
	free := make([]int, len(p.Endpoints))
	for i := range p.Endpoints {
		n := p.LoRA.Slots(&p.Endpoints[i])
		free[i] = n - TailSlots(n)
	}
	holds := func(i int) bool { return p.Endpoints[i].HoldsAdapters() }
	plans := make(map[string]AdapterPlan, len(order))
	for _, a := range order {
		var idx []int
		held := 0
		over := false
		ranking := AdapterRanking(p, a.Name)
		for _, i := range ranking {
			if held == a.Replicas {
				break
			}
			if free[i] == 0 {
				continue
			}
			free[i]--
			idx = append(idx, i)
			if holds(i) {
				held++
			}
		}
		if held == 0 {
			// No slot of its own: the adapter is in the tail, on its
			// first-ranked replica that holds adapters, where it shares
			// the slots kept for the tail.
			if j := slices.IndexFunc(ranking, holds); j >= 0 {
				idx = append(idx, ranking[j])
				over = true
			}
		}
		slices.Sort(idx)
		ms := adapterMembers(p, idx)
		plans[a.Name] = AdapterPlan{Name: a.Name, OverCapacity: over, GroupPlan: GroupPlan{
			Cluster: a.ClusterName(p.Name), Members: ms,
			PerWeight:     GroupEntriesPerWeight(a.Replicas, p.LoRA.MemberWeight, p.Hash.GRPCRingCap),
			EnvoyRingSize: envoyRingSize(p, ms),
		}}
	}
	out := make([]AdapterPlan, len(p.Adapters))
	for i, a := range p.Adapters {
		out[i] = plans[a.Name]
	}
	return out
}

// TailSlots is how many of a replica's n adapter slots are kept for the
// tail: all but a quarter (at least one). The slots of its own that an
// adapter takes only keep the busiest adapters apart, one per replica
// first; an adapter that finds none is in the tail, on its first-ranked
// replica, whose engine keeps what is busy there loaded (its least
// recently used adapter is evicted). Measured on the multi-lora benchmark
// (docs/benchmarks/workloads.md): a quarter of the slots for placed
// adapters swaps less and moves adapters less than three quarters, since
// the tail's adapters, on one replica each, never move for capacity.
func TailSlots(n int) int {
	return n - max(1, n/4)
}

// HoldsAdapters reports whether e counts toward the replicas of the
// adapters it is a member of, and toward the replicas adapters are sized
// against: a healthy replica, or one the escape hatch took out for now
// (saturated). Saturation comes and goes with load: a fill-in for it
// would load the adapter on another replica (a swap-in and a cold cache)
// only to move it back when the member recovers. A replica that drains
// to leave, is degraded or unhealthy gets a fill-in.
func (e *Endpoint) HoldsAdapters() bool {
	return e.Health == Healthy || e.Health == Draining && e.Saturated
}

// adapterMembers returns the endpoints idx (ascending) of p as an
// adapter's members. A saturated member is served healthy: the escape
// hatch takes it out of the pool's own table, whose keys its peers serve
// warm, but the adapter's other members hold none of its conversations'
// caches, and moving them there loses their prefixes for a load that
// comes back with the recovery (measured: a higher hit rate, fewer
// sessions moved, the same TTFT).
func adapterMembers(p *Pool, idx []int) []Endpoint {
	ms := make([]Endpoint, len(idx))
	for j, i := range idx {
		ms[j] = p.Endpoints[i]
		if ms[j].Saturated {
			ms[j].Health = Healthy
		}
	}
	return ms
}

// AdapterPick is a placed adapter's entry in its pool's pick table, as
// indexes into the table's Hosts: Members, its serving replicas, and
// Rank, the next AdapterRankLen serving replicas of its rendezvous
// ranking. A request naming the adapter goes to one of its members,
// chosen by rendezvous of the request's key and the members' addresses
// (so that each conversation keeps one), or, over the bound, to the next
// member in that order, then along Rank: where the adapter would be
// placed next, the same on every Envoy, so that a busy adapter's overflow
// keeps to a few replicas, where it stays loaded.
type AdapterPick struct {
	Members []uint16 `json:"members"`
	Rank    []uint16 `json:"rank,omitempty"`
}

// AdapterRankLen is how many replicas past its own an adapter's overflow
// may go to.
const AdapterRankLen = 8

// PickAdapters sets t, pool p's own slot table, to carry the entries of
// adapters (AdapterPick), each host's slots and, where p's load is
// observed, the adapters in flight on it. A member that t does not serve
// (draining, or taken out by the escape hatch) is left out of Members:
// its requests take the next member, or the ranking.
func (t *SlotTable) PickAdapters(p *Pool, adapters []AdapterPlan) {
	if len(t.Hosts) == 0 || len(adapters) == 0 {
		return
	}
	idx := make(map[string]uint16, len(t.Hosts))
	for i, h := range t.Hosts {
		idx[h] = uint16(i)
	}
	t.AdapterSlots = make([]int, len(t.Hosts))
	if t.Load != nil {
		t.Running = make([]string, len(t.Hosts))
	}
	for i := range p.Endpoints {
		e := &p.Endpoints[i]
		j, ok := idx[e.Address()]
		if !ok || t.AdapterSlots[j] != 0 {
			continue // not served, or its address already counted
		}
		t.AdapterSlots[j] = min(p.LoRA.Slots(e), MaxAdapterSlots)
		if t.Running != nil {
			t.Running[j] = capRunning(e.InFlightAdapters, MaxRunning(t.AdapterSlots[j]))
		}
	}
	t.Adapters = make(map[string]AdapterPick, len(adapters))
	for _, a := range adapters {
		var e AdapterPick
		seen := map[uint16]bool{}
		for _, m := range a.Members {
			if j, ok := idx[m.Address()]; ok && !seen[j] {
				seen[j] = true
				e.Members = append(e.Members, j)
			}
		}
		slices.Sort(e.Members)
		for _, i := range AdapterRanking(p, a.Name) {
			if len(e.Rank) == AdapterRankLen {
				break
			}
			if j, ok := idx[p.Endpoints[i].Address()]; ok && !seen[j] {
				seen[j] = true
				e.Rank = append(e.Rank, j)
			}
		}
		t.Adapters[a.Name] = e
	}
}

// MaxRunning is how many of the adapters in flight on a replica of n
// slots its pick table lists: twice its slots. A replica with more has
// adapters waiting for a slot; which of them run the logs cannot say,
// and a request for any of them may wait.
func MaxRunning(n int) int { return 2 * n }

// capRunning keeps the first n names of the space-separated list s.
func capRunning(s string, n int) string {
	for i, c := 0, 0; i < len(s); i++ {
		if s[i] == ' ' {
			if c++; c == n {
				return s[:i]
			}
		}
	}
	return s
}
