package reconcile

import (
	"cmp"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/proto"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/hotkeys"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/accesslog"
	"github.com/kvxds/kvxds/xds/envoylb"
	"github.com/kvxds/kvxds/xds/translate"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// Hot keys: every instance observes the requests the Envoys connected to
// it log (AccessLogSink), in one bounded sketch per pool with hot keys
// on. An Envoy streams its logs to the instance it is attached to, so a
// follower's sketch is a sample of the fleet's traffic, and the leader's
// too when there are several instances: logs are not forwarded, and the
// leader's sample decides (a hot key is hot in every sample). The leader
// decides each pool's table every Interval (hotkeys.Decide) and publishes
// it with its weight decisions; followers serve the leader's tables;
// Join's WithHotKeys puts them in the model. A table change changes only
// the pool's routes. Fail static: without logs the last table stays.

// HotTables are the pools' hot-key tables, by pool.
type HotTables = map[string][]fleet.HotKey

// Reasons a logged request went to another replica than its key's first,
// as kvxds_requests_away_total and the status label them.
const (
	AwaySpread = status.AwaySpread
	AwayEscape = status.AwayEscape
	AwayBound  = status.AwayBound
)

var awayReasons = status.AwayReasons

// hotState is what an instance knows of its pools' hot keys.
type hotState struct {
	mu sync.Mutex
	// pools are the pools with hot keys on, as of the last push;
	// clusters names each of their clusters' pool.
	pools    map[string]*hotPool
	clusters map[string]string
	// tables are the tables this instance decided (or, after gaining
	// the lead, its predecessor's, which it starts from).
	tables decided[[]fleet.HotKey]
	// seen counts, per pool, the keyed requests observed and those sent
	// away by reason, since the instance started.
	seen map[string]*hotSeen

	away     *prometheus.CounterVec
	requests *prometheus.CounterVec
}

type hotSeen struct {
	requests uint64
	away     map[string]uint64
}

// hotPool is one pool with hot keys on, as of the last push.
type hotPool struct {
	settings fleet.HotKeys
	keys     []fleet.HashKey
	headers  []string // the key chain's headers as Envoy logs them
	healthy  int
	sketch   *hotkeys.Sketch
	served   map[hotkeys.ID]bool
	// picked says Envoy's Lua filters pick the pool's replicas from a
	// slot table (its own pick filter, or its decode pools' prefill
	// filter), not its cluster's hash table.
	picked bool
	// homes are the Envoy tables of the pool's clusters with every
	// replica in them, by cluster: a key's first replica.
	homes map[string]*homeTable
}

// homeTable answers which replica a key's hash falls on when every
// replica of an assignment is in the table, and whether that replica is
// in the table as served. Its balancer is built at the first logged
// request that needs it, not at the push: at 1,000 replicas a build
// costs about as much as the rest of a push, and a balancer whose
// cluster and replicas (health aside) did not change is kept from one
// push to the next.
type homeTable struct {
	cluster *clusterv3.Cluster
	cla     *endpointv3.ClusterLoadAssignment
	// hosts and lweights are the assignment's, every host healthy: what
	// the balancer is built from.
	hosts    []envoylb.Host
	lweights []uint32
	addrs    []string
	serving  []bool
	// bal is shared by the push's tables over the same replicas.
	bal *homeBalancer
	// served is the balancer of the table as served (health as it
	// is), built on first use: where a key goes now.
	served *homeBalancer
	// slots, in a pool whose Envoys pick replicas by its slot table
	// (balance_on = "prompt_bytes"), is that table with every replica
	// serving: a key's first replica is its slot's, not the ring's.
	slots *fleet.SlotTable
}

// homeBalancer is a home table's balancer, built on first use.
type homeBalancer struct {
	built bool
	b     *envoylb.Balancer // nil when built: not a hashing cluster
}

func newHotState(reg prometheus.Registerer) *hotState {
	f := promauto.With(reg)
	return &hotState{
		pools: map[string]*hotPool{}, clusters: map[string]string{},
		tables: newDecided(hotKind), seen: map[string]*hotSeen{},
		away: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_requests_away_total",
			Help: "Logged requests of pools with hot keys that Envoy sent to another replica than their key's first (the one the key alone hashes to with every replica in the table), by pool and reason: spread (a hot key), escape (the first replica is out of the table), followed (the pick filter sent it where its key's last request went), bound (otherwise: bounded load, or a table not yet applied).",
		}, []string{"pool", "reason"}),
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_keyed_requests_logged_total",
			Help: "Logged requests with a key, of pools with hot keys, by pool.",
		}, []string{"pool"}),
	}
}

// keyHeaders is a key chain's headers as Envoy logs them: a header key's
// own name, a body key's generated header, "" for cookie and query keys.
func keyHeaders(keys []fleet.HashKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		switch {
		case k.Header != "":
			out[i] = k.Header
		case k.Body():
			out[i] = bodykey.Header(i)
		}
	}
	return out
}

// update points the hot-key state at a pushed model, whose Envoy
// resources are res (nil if unknown).
func (h *hotState) update(f fleet.Fleet, plan func(string) fleet.Plan, res *translate.Resources) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pools := map[string]*hotPool{}
	clusters := map[string]string{}
	prefills := prefillPools(f)
	for i := range f.Pools {
		p := &f.Pools[i]
		if p.Balancer != fleet.ConsistentHash || p.Hash.Hot == nil {
			continue
		}
		hp := &hotPool{settings: *p.Hash.Hot, keys: p.Hash.Keys, headers: keyHeaders(p.Hash.Keys), served: map[hotkeys.ID]bool{},
			picked: translate.Picks(p, translate.Envoy) || prefills[p.Name]}
		// Keep what was observed unless how it decays changed.
		if old := h.pools[p.Name]; old != nil && old.settings.HalfLife == hp.settings.HalfLife {
			hp.sketch = old.sketch
		} else {
			hp.sketch = hotkeys.NewSketch(hp.settings.HalfLife)
		}
		for _, e := range p.Endpoints {
			if e.Health == fleet.Healthy {
				hp.healthy++
			}
		}
		for _, k := range p.HotKeys {
			hp.served[hotkeys.ID{Key: k.Key, Value: k.Value}] = true
		}
		names := []string{p.Name}
		for _, g := range plan(p.Name).Groups {
			names = append(names, g.Cluster)
		}
		var old map[string]*homeTable
		if prev := h.pools[p.Name]; prev != nil {
			old = prev.homes
		}
		hp.homes = homeTables(res, names, old)
		if ht := hp.homes[p.Name]; ht != nil && translate.Picks(p, translate.Envoy) {
			all := *p
			all.Endpoints = slices.Clone(p.Endpoints)
			for i := range all.Endpoints {
				all.Endpoints[i].Health = fleet.Healthy
			}
			ht.slots = fleet.NewSlotTable(&all, &fleet.Pool{})
		}
		for _, n := range names {
			clusters[n] = p.Name
		}
		pools[p.Name] = hp
		if h.seen[p.Name] == nil {
			h.seen[p.Name] = &hotSeen{away: map[string]uint64{}}
			for _, r := range awayReasons {
				h.away.WithLabelValues(p.Name, r)
			}
			h.requests.WithLabelValues(p.Name)
		}
	}
	for name := range h.seen {
		if pools[name] == nil {
			delete(h.seen, name)
			h.tables.forget(name)
			for _, r := range awayReasons {
				h.away.DeleteLabelValues(name, r)
			}
			h.requests.DeleteLabelValues(name)
		}
	}
	h.pools, h.clusters = pools, clusters
}

// homeTables are the home tables of the named clusters of res, sharing
// old's balancers where their cluster and replicas are unchanged.
func homeTables(res *translate.Resources, names []string, old map[string]*homeTable) map[string]*homeTable {
	out := map[string]*homeTable{}
	if res == nil {
		return out
	}
	clas := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, cla := range res.Endpoints {
		clas[cla.GetClusterName()] = cla
	}
	for _, c := range res.Clusters {
		if !slices.Contains(names, c.GetName()) {
			continue
		}
		svc := c.GetEdsClusterConfig().GetServiceName()
		if svc == "" {
			svc = c.GetName()
		}
		cla := clas[svc]
		if cla == nil {
			continue
		}
		hosts, lweights, err := envoylb.Hosts(cla)
		if err != nil {
			continue
		}
		ht := &homeTable{cluster: c, cla: cla, hosts: hosts, lweights: lweights,
			addrs: make([]string, len(hosts)), serving: make([]bool, len(hosts)), bal: &homeBalancer{}, served: &homeBalancer{}}
		for i := range hosts {
			ht.addrs[i], ht.serving[i] = hosts[i].Address, hosts[i].Health == envoylb.Healthy
			hosts[i].Health = envoylb.Healthy
		}
		if o := old[c.GetName()]; o != nil && slices.Equal(o.hosts, hosts) && slices.Equal(o.lweights, lweights) && proto.Equal(o.cluster, c) {
			ht.bal = o.bal
		}
		out[c.GetName()] = ht
	}
	return out
}

// first is the index of the replica a key value hashes to in t (Envoy
// hashes a header value as XXH64 with seed 0; the pick filter takes its
// slot's), -1 if t does not hash.
func (t *homeTable) first(value string) int {
	if t.slots != nil {
		return slices.Index(t.addrs, t.slots.Host(bodykey.PrefillSlot(value, fleet.PrefillSlots)))
	}
	hb := t.bal
	if !hb.built {
		hb.built = true
		// The table with every replica in it: where the key goes when
		// nothing is out.
		all := proto.Clone(t.cla).(*endpointv3.ClusterLoadAssignment)
		for _, lle := range all.GetEndpoints() {
			for _, e := range lle.GetLbEndpoints() {
				e.HealthStatus = corev3.HealthStatus_HEALTHY
			}
		}
		if b, err := envoylb.NewBalancer(t.cluster, all); err == nil {
			hb.b = b
		}
	}
	if hb.b == nil {
		return -1
	}
	hash, _ := envoylb.HeaderHash([]string{value})
	return hb.b.Owner(hash)
}

// AccessLogSink is where the access log service hands this instance's
// logged requests.
func (r *Reconciler) AccessLogSink() accesslog.Sink { return hotSink{r} }

type hotSink struct{ r *Reconciler }

func (s hotSink) KeyHeaders(name string) (string, []string, bool) {
	h := s.r.hot
	h.mu.Lock()
	defer h.mu.Unlock()
	pool, ok := h.clusters[name]
	if !ok {
		if pool, headers, ok := s.r.lora.keyHeaders(name); ok {
			return pool, headers, ok
		}
		return s.r.prefill.keyHeaders(name)
	}
	return pool, h.pools[pool].headers, true
}

func (s hotSink) Observe(req accesslog.Request) {
	h := s.r.hot
	now := s.r.now()
	forward := s.r.forwarding.Load()
	if key, value, ok := s.r.lora.observe(req, now); ok && forward {
		s.r.exchange.Forward(req.Pool, ha.ObservedAdapters, key, value)
	}
	s.r.prefill.observe(req)
	if req.Key < 0 {
		return // a request without a key, of a pool placing adapters
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	hp := h.pools[req.Pool]
	if hp == nil {
		return
	}
	// Observed at arrival: Envoys' clocks and buffering (about a
	// second) do not skew the decay.
	if hp.sketch.Observe(req.Key, req.Value, now) && forward {
		s.r.exchange.Forward(req.Pool, ha.ObservedHotKeys, req.Key, req.Value)
	}
	seen := h.seen[req.Pool]
	seen.requests++
	h.requests.WithLabelValues(req.Pool).Inc()
	reason := hp.awayReason(req)
	if reason != "" {
		seen.away[reason]++
		h.away.WithLabelValues(req.Pool, reason).Inc()
	}
}

// absorb counts n requests another instance's Envoys logged, into the
// pool's sketch only: the leader decides from every instance's logs, and
// each instance's counters stay its own.
func (h *hotState) absorb(pool string, key int, value string, n uint32, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hp := h.pools[pool]; hp != nil {
		hp.sketch.ObserveN(key, value, n, now)
	}
}

// absorb takes the observations that instances following this one
// forward with their load reports.
func (r *Reconciler) absorb(obs []ha.Observation) {
	now := r.now()
	for _, o := range obs {
		switch o.Kind {
		case ha.ObservedHotKeys:
			r.hot.absorb(o.Pool, o.Key, o.Value, o.N, now)
		case ha.ObservedAdapters:
			r.lora.absorb(o.Pool, o.Key, o.Value, o.N, now)
		}
	}
}

// PrefillHeader is the prefill header of a decode pool, "" for others.
func (s hotSink) PrefillHeader(pool string) string { return s.r.prefill.header(pool) }

// PrefillKeys is a decode pool's prefill pool and its key headers.
func (s hotSink) PrefillKeys(pool string) (string, []string) { return s.r.prefill.keys(pool) }

var _ accesslog.PrefillSink = hotSink{}

// awayReason says why a request went to another replica than its key's
// first, "" if it did not (or it is not known where it went).
func (hp *hotPool) awayReason(req accesslog.Request) string {
	if req.Upstream == "" {
		return ""
	}
	t := hp.homes[req.Cluster]
	if t == nil || req.Adapter != "" && t.slots != nil {
		// An adapter's request is not judged: its cluster is its own,
		// or, where Envoy picks, its replicas are (fleet.AdapterPick).
		return ""
	}
	first := t.first(req.Value)
	if first < 0 || t.addrs[first] == req.Upstream {
		return ""
	}
	switch {
	case hp.served[hotkeys.ID{Key: req.Key, Value: req.Value}]:
		return AwaySpread
	case !t.serving[first]:
		return AwayEscape
	case req.Followed:
		return status.AwayFollow
	}
	return AwayBound
}

// decide decides the table of each pool whose Interval has passed, while
// this instance leads. It reports whether a table changed, and when it
// next has to run (zero: no pool has hot keys on).
func (h *hotState) decide(now time.Time, leading bool) (changed bool, next time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	interval := func(name string) time.Duration {
		if iv := h.pools[name].settings.Interval; iv > 0 {
			return iv
		}
		return fleet.DefaultHotKeysInterval
	}
	return h.tables.run(slices.Collect(maps.Keys(h.pools)), interval, now, leading, func(name string) []fleet.HotKey {
		hp := h.pools[name]
		return hp.sketch.Decide(now, hp.healthy, &hp.settings, h.tables.own[name], hp.home(name))
	})
}

// home is where a key of the pool goes while it is not hot, in the
// pool's own cluster as served, or each bucket of a hot one, so that
// Decide spreads the keys of a crowded replica. It is nil, which spreads
// keys by their share alone, in a pool whose replicas Envoy's filters
// pick from a slot table (hp.picked): there each request is bounded
// already on the prompt bytes its replica has to compute, and each copy
// of a key's prefix is a prefill that bound had made unnecessary
// (retrieval's 2 KiB key: engine TTFT p99 159 ms became 419–462 ms).
// The caller holds the state's lock.
func (hp *hotPool) home(pool string) hotkeys.Home {
	t := hp.homes[pool]
	if t == nil || hp.picked {
		return nil
	}
	// The substitution of the last key asked for: a key's buckets are
	// asked for one after another.
	var last, sub string
	var buf []byte
	return func(id hotkeys.ID, spread, bucket int) int {
		if spread < 2 {
			return t.now(id.Value)
		}
		if last != id.Value || sub == "" {
			last, sub = id.Value, translate.SpreadSubstitution(id.Value)
		}
		// The rewritten spread header the bucket's requests hash on:
		// the bucket's log2(spread) bits, most significant first.
		buf = buf[:0]
		for i := fleet.SpreadLevel(spread) - 1; i >= 0; i-- {
			buf = append(buf, '0'+byte(bucket>>i&1))
		}
		return t.now(string(append(buf, sub...)))
	}
}

// now is the index of the replica a key value hashes to in t as served,
// -1 if t does not hash.
func (t *homeTable) now(value string) int {
	hb := t.served
	if !hb.built {
		hb.built = true
		if b, err := envoylb.NewBalancer(t.cluster, t.cla); err == nil {
			hb.b = b
		}
	}
	if hb.b == nil {
		return -1
	}
	hash, _ := envoylb.HeaderHash([]string{value})
	return hb.b.Owner(hash)
}

// ownTables returns a copy of the tables this instance decided.
func (h *hotState) ownTables() HotTables {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tables.copy()
}

// seed makes a new leader start from its predecessor's tables, and
// decide one Interval after now.
func (h *hotState) seed(t HotTables, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tables.seed(t, slices.Collect(maps.Keys(h.pools)), now)
}

// hotKind compares and copies hot-key tables; an empty one is absent.
var hotKind = decisionKind[[]fleet.HotKey]{
	equal: slices.Equal[[]fleet.HotKey],
	clone: func(keys []fleet.HotKey) ([]fleet.HotKey, bool) { return slices.Clone(keys), len(keys) > 0 },
}

func cloneHot(t HotTables) HotTables { return cloneDecided(t, hotKind) }

// status is the hot-key part of each pool's status: the table served,
// shown hashed, and what this instance observed.
func (h *hotState) status(f fleet.Fleet) map[string]*status.HotKeys {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]*status.HotKeys{}
	for _, p := range f.Pools {
		hp := h.pools[p.Name]
		if hp == nil {
			continue
		}
		st := &status.HotKeys{Keys: []status.HotKey{}, Tracked: hp.sketch.Len(), Away: map[string]uint64{}}
		if seen := h.seen[p.Name]; seen != nil {
			st.Requests = seen.requests
			for _, r := range awayReasons {
				st.Away[r] = seen.away[r]
			}
		}
		for _, k := range p.HotKeys {
			st.Keys = append(st.Keys, status.HotKey{
				Key: k.Key, KeyName: keyName(p.Hash.Keys, k.Key), Value: ShownValue(p.Hash.Keys, k.Key, k.Value),
				Share: k.Share, Spread: k.Spread, Why: hotWhy(k),
			})
		}
		sort.SliceStable(st.Keys, func(i, j int) bool { return st.Keys[i].Share > st.Keys[j].Share })
		out[p.Name] = st
	}
	return out
}

// hotWhy says why a key is in its pool's table: a spread of at most
// hotkeys.MaxCrowdSpread is one Decide gives a key for its replica's
// sake.
func hotWhy(k fleet.HotKey) string {
	switch {
	case k.Declared:
		return status.HotDeclared
	case k.Spread <= hotkeys.MaxCrowdSpread:
		return status.HotReplica
	}
	return status.HotShare
}

// ShownValue is how a hot key's value is shown (status, metrics): a body
// key's value is already a hash of the body's bytes; a header key's is
// shown as the first 8 hex digits of bodykey.Hash of it, never as sent.
func ShownValue(keys []fleet.HashKey, key int, value string) string {
	if key >= 0 && key < len(keys) && keys[key].Body() {
		return value
	}
	return bodykey.Hash([]byte(value))[:8]
}

// keyName names a key of the chain for the status: its header, or the
// kind of body key.
func keyName(keys []fleet.HashKey, i int) string {
	if i < 0 || i >= len(keys) {
		return ""
	}
	k := keys[i]
	switch {
	case k.Header != "":
		return "header " + k.Header
	case k.Conversation:
		return "conversation"
	case k.PromptPrefix > 0:
		return "prompt_prefix"
	case k.JSONField != "":
		return "json_field " + k.JSONField
	}
	return ""
}

// WithHotKeys puts each pool's hot-key table into f: pools that hash
// with hot keys on take their declared values (Hot.Declared, spread over
// every healthy replica) and their table's entries that name a key of
// their chain and a valid spread, sorted by key and value; other pools
// none. Declared values come from the policy, so every instance serves
// them alike, leader or not, with logs or without.
func WithHotKeys(f fleet.Fleet, tables HotTables) fleet.Fleet {
	byID := func(a, b fleet.HotKey) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value))
	}
	for i := range f.Pools {
		p := &f.Pools[i]
		p.HotKeys = nil
		if p.Balancer != fleet.ConsistentHash || p.Hash.Hot == nil {
			continue
		}
		declared := declaredHotKeys(p)
		var keys []fleet.HotKey
		for _, k := range tables[p.Name] {
			if k.Key < 0 || k.Key >= len(p.Hash.Keys) || k.Spread < 2 || k.Spread > fleet.MaxSpread ||
				k.Spread&(k.Spread-1) != 0 || !hotkeys.ValidValue(k.Value) {
				continue
			}
			if _, ok := slices.BinarySearchFunc(declared, k, byID); ok {
				continue // declared: served as declared, not twice
			}
			k.Declared = false
			keys = append(keys, k)
		}
		slices.SortStableFunc(keys, byID)
		keys = slices.CompactFunc(keys, func(a, b fleet.HotKey) bool { return byID(a, b) == 0 })
		// Learned entries fill what the declared values leave of max;
		// a table decided under a larger max (a policy edit the leader
		// has not yet decided under) keeps its highest shares.
		if room := max(p.Hash.Hot.Max-len(declared), 0); p.Hash.Hot.Max > 0 && len(keys) > room {
			slices.SortStableFunc(keys, func(a, b fleet.HotKey) int { return cmp.Or(cmp.Compare(b.Share, a.Share), byID(a, b)) })
			keys = keys[:room]
		}
		keys = append(keys, declared...)
		slices.SortFunc(keys, byID)
		if len(keys) > 0 {
			p.HotKeys = keys
		}
	}
	return f
}

// declaredHotKeys are a pool's declared values as table entries, sorted
// by key and value: each spread as widely as a key filling every healthy
// replica (hotkeys.Spread(1, healthy)), with share 1, since nothing
// measured it.
func declaredHotKeys(p *fleet.Pool) []fleet.HotKey {
	if len(p.Hash.Hot.Declared) == 0 {
		return nil
	}
	healthy := 0
	for _, e := range p.Endpoints {
		if e.Health == fleet.Healthy {
			healthy++
		}
	}
	spread := hotkeys.Spread(1, healthy)
	out := make([]fleet.HotKey, 0, len(p.Hash.Hot.Declared))
	for _, d := range p.Hash.Hot.Declared {
		out = append(out, fleet.HotKey{Key: d.Key, Value: d.Value, Share: 1, Spread: spread, Declared: true})
	}
	slices.SortFunc(out, func(a, b fleet.HotKey) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value))
	})
	return slices.CompactFunc(out, func(a, b fleet.HotKey) bool { return a.Key == b.Key && a.Value == b.Value })
}

// envoyResources are the Envoy resources of a pushed model: the sink's
// own if it says, else translated again. Nil when no pool has hot keys
// on, or the model does not translate.
func envoyResources(sink Sink, m fleet.Model) *translate.Resources {
	if !slices.ContainsFunc(m.Fleet().Pools, func(p fleet.Pool) bool { return p.Hash.Hot != nil }) {
		return nil
	}
	if rs, ok := sink.(resourceSink); ok {
		if res := rs.Resources(translate.Envoy); res != nil {
			return res
		}
	}
	res, err := translate.Translate(m, translate.Envoy)
	if err != nil {
		return nil
	}
	return res
}
