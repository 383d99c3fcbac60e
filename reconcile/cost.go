package reconcile

import (
	"cmp"
	"reflect"
	"slices"
	"time"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/clients"
	"github.com/kvxds/kvxds/xds/translate"
)

// What a push cost: for every hash table each kind of client builds, the
// share of its hash space (so of its sessions) whose replica changed,
// computed exactly from the tables before and after. The tables are
// built from the resources each kind is served (xds/clients over
// xds/translate's output), so they are the clients' own. A moved point is
// "own" if its replica before or after changed in the push (joined or
// left the pool or that table, changed address, health or weight), else
// collateral: moved between replicas that did not change.

// Causes of a push's cost, as kvxds_hash_space_moved_total labels them. A
// push that changed more than one of these in a pool is "mixed": the
// share of a point is not split between causes it cannot be traced to.
const (
	costMembership = status.CauseMembership
	costHealth     = status.CauseHealth
	costWeight     = status.CauseWeight
	costPolicy     = status.CausePolicy
	costMixed      = status.CauseMixed
)

var costCauses = []string{costMembership, costHealth, costWeight, costPolicy, costMixed}

// hashTable is one client's table, owners by index into a pool-wide list
// of identities so that tables of two pushes compare by identity: a Maglev
// table (slots) or a ring (sorted hashes and their owners).
type hashTable struct {
	table  string // cluster: the pool's own, or a group's
	kind   string // client kind
	maglev bool
	// members are the replicas the table's assignment lists, in or out
	// of the table.
	members []int32
	slots   []int32
	hashes  []uint64
	owners  []int32
}

func (t *hashTable) empty() bool { return len(t.slots) == 0 && len(t.hashes) == 0 }

// poolTables are the tables of a pool as of one push.
type poolTables struct {
	pool   fleet.Pool
	ids    map[string]int32 // identity → owner index of the tables
	tables []hashTable
}

// tableCost is what one push moved in one table of one client kind.
type tableCost struct {
	table, kind     string
	own, collateral float64
}

// pushCost is what one push cost one pool.
type pushCost struct {
	time    time.Time
	cause   string
	changed int // replicas that joined, left, or changed health or weight
	tables  []tableCost
}

// tableClients are the kinds of client whose tables a push's cost
// counts, each with the model of its tables. (A client served without a
// ring hash has none.)
var tableClients = []struct {
	kind   translate.Kind
	client clients.Client
}{
	{translate.Envoy, clients.Envoy},
	{translate.GRPC, clients.GRPC},
	{translate.GRPCJS, clients.GRPCJS},
}

// served is what each kind of client of tableClients is served for one
// model.
type served []*clients.Served

// serve translates md for each kind of tableClients.
func serve(md fleet.Model) (served, error) {
	out := make(served, len(tableClients))
	for i, tc := range tableClients {
		res, err := translate.Translate(md, tc.kind)
		if err != nil {
			return nil, err
		}
		out[i] = clients.NewServed(res.Clusters, res.Endpoints)
	}
	return out, nil
}

// of is what kind is served, nil if it is not one of tableClients.
func (s served) of(kind translate.Kind) *clients.Served {
	for i, tc := range tableClients {
		if tc.kind == kind && i < len(s) {
			return s[i]
		}
	}
	return nil
}

// resourceSink is a Sink that hands out the resources it serves each kind
// of client (the xDS server does): a push's tables are built from the
// very resources it serves, not translated again.
type resourceSink interface {
	Resources(translate.Kind) *translate.Resources
}

// servedBy is what sink serves each kind of tableClients, nil if it does
// not say.
func servedBy(sink Sink) served {
	rs, ok := sink.(resourceSink)
	if !ok {
		return nil
	}
	out := make(served, len(tableClients))
	for i, tc := range tableClients {
		res := rs.Resources(tc.kind)
		if res == nil {
			return nil
		}
		out[i] = clients.NewServed(res.Clusters, res.Endpoints)
	}
	return out
}

// buildTables builds every hash table the clients build for pool p of
// md from the resources md is served as (serve). Nil for a pool that
// does not hash, or a model that does not translate.
func buildTables(md fleet.Model, p *fleet.Pool) *poolTables {
	s, err := serve(md)
	if err != nil {
		return nil
	}
	return s.tables(md, p)
}

// tables builds every hash table the clients build for pool p of md from
// the resources they are served: for each kind of client, the pool's
// cluster and each group's that it is served and that hash (Envoy's
// Maglev or ring, gRPC's rings, grpc-js's over the whole pool, without
// group clusters). Nil for a pool that does not hash.
func (s served) tables(md fleet.Model, p *fleet.Pool) *poolTables {
	if p.Balancer != fleet.ConsistentHash {
		return nil
	}
	pt := &poolTables{pool: *p, ids: make(map[string]int32, len(p.Endpoints))}
	for i, e := range p.Endpoints {
		pt.ids[e.Identity()] = int32(i)
	}
	names := []string{p.Name}
	for _, g := range md.Plan(p.Name).Groups {
		names = append(names, g.Cluster)
	}
	for i, tc := range tableClients {
		for _, name := range names {
			t, err := s[i].Table(tc.client, name, p.Hash.GRPCRingCap)
			if err != nil {
				continue // not served to this kind, or not hashing
			}
			if ht, ok := pt.table(t, tc.kind.String()); ok {
				pt.tables = append(pt.tables, ht)
			}
		}
	}
	return pt
}

// table is t with its owners as indices of pt's identities; false if a
// host of t is not one of pt's replicas.
func (pt *poolTables) table(t *clients.Table, kind string) (hashTable, bool) {
	owner := make([]int32, len(t.Hosts))
	for i, id := range t.Hosts {
		o, ok := pt.ids[id]
		if !ok {
			return hashTable{}, false
		}
		owner[i] = o
	}
	ht := hashTable{table: t.Cluster, kind: kind, maglev: t.Maglev, members: owner}
	if t.Maglev {
		ht.slots = make([]int32, len(t.Slots))
		for i, h := range t.Slots {
			ht.slots[i] = -1
			if h >= 0 {
				ht.slots[i] = owner[h]
			}
		}
		return ht, true
	}
	ht.hashes = t.Hashes
	ht.owners = make([]int32, len(t.Owners))
	for i, h := range t.Owners {
		ht.owners[i] = owner[h]
	}
	return ht, true
}

// poolCost compares a pool's tables before and after a push. ok is false
// when nothing in the pool changed.
func poolCost(prev, next *poolTables, now time.Time) (c pushCost, ok bool) {
	changed, causes := changes(&prev.pool, &next.pool)
	if len(changed) == 0 && len(causes) == 0 {
		return c, false
	}
	c = pushCost{time: now, changed: len(changed)}
	switch len(causes) {
	case 0:
		// Nothing counted changed, yet the tables may (a group's
		// ranking): the pool's settings are the rest.
		c.cause = costPolicy
	case 1:
		for k := range causes {
			c.cause = k
		}
	default:
		c.cause = costMixed
	}
	// Map the previous push's owner indices to identities, then to this
	// push's, so that the two compare; a replica that left maps past
	// them.
	remap := make([]int32, len(prev.pool.Endpoints))
	for i, e := range prev.pool.Endpoints {
		j, in := next.ids[e.Identity()]
		if !in {
			j = int32(len(next.pool.Endpoints) + i)
		}
		remap[i] = j
	}
	isChanged := make([]bool, len(next.pool.Endpoints)+len(prev.pool.Endpoints))
	for id := range changed {
		if j, in := next.ids[id]; in {
			isChanged[j] = true
		} else if i, in := prev.ids[id]; in {
			isChanged[remap[i]] = true
		}
	}
	for _, nt := range next.tables {
		i := slices.IndexFunc(prev.tables, func(t hashTable) bool { return t.table == nt.table && t.kind == nt.kind })
		if i < 0 {
			continue // a new group: no sessions before it
		}
		// A replica that entered or left this table (a tenant group's
		// fill-in, and so the pool's own table of an exclusive group)
		// changed for it.
		tc := slices.Clone(isChanged)
		in := make([]int, len(tc))
		for _, o := range prev.tables[i].members {
			in[remap[o]]++
		}
		for _, o := range nt.members {
			in[o]--
		}
		for o, d := range in {
			tc[o] = tc[o] || d != 0
		}
		own, coll, comparable := moved(&prev.tables[i], &nt, remap, tc)
		if comparable {
			c.tables = append(c.tables, tableCost{table: nt.table, kind: nt.kind, own: own, collateral: coll})
		}
	}
	// The pool's own table first ("chat" sorts before "chat/group/…"),
	// each table's kinds in their order.
	slices.SortStableFunc(c.tables, func(a, b tableCost) int { return cmp.Compare(a.table, b.table) })
	return c, true
}

// changes returns the identities of the replicas that joined, left or
// changed address, health or weight between two versions of a pool, and
// the causes that touched it.
func changes(a, b *fleet.Pool) (changed map[string]bool, causes map[string]bool) {
	changed, causes = map[string]bool{}, map[string]bool{}
	before := make(map[string]*fleet.Endpoint, len(a.Endpoints))
	for i := range a.Endpoints {
		before[a.Endpoints[i].Identity()] = &a.Endpoints[i]
	}
	for i := range b.Endpoints {
		e := &b.Endpoints[i]
		id := e.Identity()
		o, in := before[id]
		delete(before, id)
		if !in {
			changed[id], causes[costMembership] = true, true
			continue
		}
		// A replica re-created at a new address under its identity: to
		// grpc-js, which places replicas by address, one left and one
		// joined.
		if o.Host != e.Host || o.Port != e.Port {
			changed[id], causes[costMembership] = true, true
		}
		if o.Health != e.Health {
			changed[id], causes[costHealth] = true, true
		}
		if o.Weight != e.Weight {
			changed[id], causes[costWeight] = true, true
		}
	}
	for id := range before {
		changed[id], causes[costMembership] = true, true
	}
	sa, sb := *a, *b
	// The hot-key table changes routes only: no table moves with it.
	// An adapter placement decided anew is counted by cause apart
	// (kvxds_adapter_moves_total); it is not a policy change.
	sa.Endpoints, sb.Endpoints = nil, nil
	sa.HotKeys, sb.HotKeys = nil, nil
	sa.Adapters, sb.Adapters = nil, nil
	if !reflect.DeepEqual(sa, sb) {
		causes[costPolicy] = true
	}
	return changed, causes
}

// moved is the share of the hash space whose owner differs between two
// tables of a kind: own if either owner is a changed replica, else
// collateral. comparable is false for tables of different shapes (the
// algorithm or Maglev's size changed), where no point maps to a point.
func moved(a, b *hashTable, remap []int32, isChanged []bool) (own, coll float64, comparable bool) {
	add := func(oa, ob int32, share float64) {
		if oa >= 0 {
			oa = remap[oa]
		}
		if oa == ob {
			return
		}
		if (oa >= 0 && isChanged[oa]) || (ob >= 0 && isChanged[ob]) {
			own += share
		} else {
			coll += share
		}
	}
	switch {
	case a.maglev != b.maglev:
		return 0, 0, false
	case a.empty() || b.empty():
		// An empty table routes nothing: no session was kept, none moved
		// to a replica.
		return 0, 0, true
	case a.maglev:
		if len(a.slots) != len(b.slots) {
			return 0, 0, false
		}
		share := 1 / float64(len(b.slots))
		for i := range b.slots {
			add(a.slots[i], b.slots[i], share)
		}
		return own, coll, true
	}
	// A point x belongs to the first entry at or after it, wrapping. Merge
	// the two sorted entry lists: between consecutive boundaries p < q,
	// every point of (p, q] has the same owner in each ring, the owner of
	// its first entry at or after q.
	ha, hb := a.hashes, b.hashes
	prev := max(ha[len(ha)-1], hb[len(hb)-1])
	if ha[0] == prev && hb[0] == prev {
		// Every entry on one point: its owner owns the whole space.
		add(a.owners[0], b.owners[0], 1)
		return own, coll, true
	}
	var i, j int
	for i < len(ha) || j < len(hb) {
		var q uint64
		if j == len(hb) || (i < len(ha) && ha[i] <= hb[j]) {
			q = ha[i]
		} else {
			q = hb[j]
		}
		oa, ob := a.owners[i%len(ha)], b.owners[j%len(hb)]
		// Unsigned subtraction wraps for the first arc, as the arc does.
		add(oa, ob, float64(q-prev)/(1<<64))
		prev = q
		if i < len(ha) && ha[i] == q {
			i++
		}
		if j < len(hb) && hb[j] == q {
			j++
		}
	}
	return own, coll, true
}

// costHour is how long a push's cost counts in the status's totals.
const costHour = time.Hour

// countCost hands a pushed model to countCosts. Building Envoy's Maglev
// table takes milliseconds per pool (about 5 ms at 100 replicas, 20 at
// 1,000, on a busy 2-core machine), so the push does not wait for it: a
// model pushed while the previous one is being counted replaces any still
// waiting, and a burst of pushes is counted as one move from the last
// model counted (a session moved and moved back within it did not move).
// Counting rests between counts (countCosts), so a burst of pushes does
// not compete with a counting loop for the CPU.
func (r *Reconciler) countCost(m fleet.Model, at time.Time) { r.countServed(m, nil, at) }

// countServed is countCost of a model served as s (nil: translate it
// when counting).
func (r *Reconciler) countServed(m fleet.Model, s served, at time.Time) {
	r.costMu.Lock()
	r.costNext, r.costServed, r.costAt = &m, s, at
	r.costMu.Unlock()
	select {
	case r.costWake <- struct{}{}:
	default:
	}
}

// countCosts counts the cost of each model countCost hands it until
// Close.
func (r *Reconciler) countCosts() {
	for {
		select {
		case <-r.costStop:
			return
		case <-r.costWake:
		}
		r.costMu.Lock()
		m, s, at := r.costNext, r.costServed, r.costAt
		r.costNext, r.costServed = nil, nil
		r.costMu.Unlock()
		if m == nil {
			continue
		}
		start := time.Now()
		costs := r.recordServed(*m, s, at)
		r.mu.Lock()
		r.costs, r.lastCost = keepCosts(r.costs, r.lastCost, m.Fleet(), costs, at)
		r.mu.Unlock()
		// Rest four times as long as counting took, so that counting
		// takes at most a fifth of a core from pushes in a burst (whose
		// models wait and are counted together).
		select {
		case <-r.costStop:
			return
		case <-time.After(4 * time.Since(start)):
		}
	}
}

// recordCosts is recordServed of a model translated here.
func (r *Reconciler) recordCosts(m fleet.Model, now time.Time) map[string]pushCost {
	return r.recordServed(m, nil, now)
}

// recordServed builds the tables of every pool of m that changed since
// the last push counted from the resources m is served as (s; nil:
// translated once, if a pool changed), compares them with the previous
// ones and counts what moved. Only countCosts calls it (tables are its
// own).
func (r *Reconciler) recordServed(m fleet.Model, s served, now time.Time) map[string]pushCost {
	f := m.Fleet()
	next := make(map[string]*poolTables, len(f.Pools))
	out := map[string]pushCost{}
	for i := range f.Pools {
		p := &f.Pools[i]
		prev := r.tables[p.Name]
		if prev != nil && sameTables(&prev.pool, p) {
			next[p.Name] = prev
			continue
		}
		if s == nil {
			var err error
			if s, err = serve(m); err != nil {
				r.log.Error("counting a push's cost: the model does not translate", "error", err)
				return out
			}
		}
		pt := s.tables(m, p)
		if pt == nil {
			continue
		}
		next[p.Name] = pt
		if prev == nil {
			continue
		}
		c, ok := poolCost(prev, pt, now)
		if !ok {
			continue
		}
		out[p.Name] = c
		for _, t := range c.tables {
			r.moved.WithLabelValues(p.Name, t.table, t.kind, c.cause, "own").Add(t.own)
			r.moved.WithLabelValues(p.Name, t.table, t.kind, c.cause, "collateral").Add(t.collateral)
		}
	}
	r.tables = next
	return out
}

// sameTables reports whether two versions of a pool give every client
// the same tables: they are equal. (Envoy and gRPC place replicas by
// identity, but grpc-js by address, so an address change is a change.)
func sameTables(a, b *fleet.Pool) bool {
	if !slices.Equal(a.Endpoints, b.Endpoints) {
		return false
	}
	sa, sb := *a, *b
	sa.Endpoints, sb.Endpoints = nil, nil
	return reflect.DeepEqual(sa, sb)
}

// keepCosts adds this push's costs to the last hour's, forgetting older
// ones and pools that left. The caller holds mu.
func keepCosts(recent map[string][]pushCost, last map[string]pushCost, f fleet.Fleet, costs map[string]pushCost, now time.Time) (map[string][]pushCost, map[string]pushCost) {
	outR := make(map[string][]pushCost, len(f.Pools))
	outL := make(map[string]pushCost, len(f.Pools))
	for _, p := range f.Pools {
		rs := recent[p.Name]
		k := 0
		for k < len(rs) && now.Sub(rs[k].time) >= costHour {
			k++
		}
		rs = rs[k:]
		if c, ok := costs[p.Name]; ok {
			rs = append(slices.Clip(rs), c)
			outL[p.Name] = c
		} else if c, ok := last[p.Name]; ok {
			outL[p.Name] = c
		}
		if len(rs) > 0 {
			outR[p.Name] = rs
		}
	}
	return outR, outL
}

// movedStatus is a pool's Moved as of now: its last push's cost and the
// last hour's totals, the client kinds whose figures agree merged.
func movedStatus(last *pushCost, recent []pushCost, now time.Time) *status.Moved {
	if last == nil {
		return nil
	}
	m := &status.Moved{Last: &status.MovedPush{Time: last.time, Cause: last.cause, Replicas: last.changed,
		Shares: mergeShares(last.tables, nil)}}
	var sums []tableCost
	byCause := map[[2]string]map[string]float64{}
	for _, c := range recent {
		if now.Sub(c.time) >= costHour {
			continue
		}
		m.Pushes1h++
		for _, t := range c.tables {
			i := slices.IndexFunc(sums, func(s tableCost) bool { return s.table == t.table && s.kind == t.kind })
			if i < 0 {
				i = len(sums)
				sums = append(sums, tableCost{table: t.table, kind: t.kind})
			}
			sums[i].own += t.own
			sums[i].collateral += t.collateral
			k := [2]string{t.table, t.kind}
			if byCause[k] == nil {
				byCause[k] = map[string]float64{}
			}
			byCause[k][c.cause] += t.own + t.collateral
		}
	}
	m.Total1h = mergeShares(sums, byCause)
	return m
}

// mergeShares turns table costs into shares, one per table and group of
// client kinds with the same figures, tables and kinds in their order.
func mergeShares(ts []tableCost, byCause map[[2]string]map[string]float64) []status.MovedShare {
	var out []status.MovedShare
	for _, t := range ts {
		bc := byCause[[2]string{t.table, t.kind}]
		i := slices.IndexFunc(out, func(s status.MovedShare) bool {
			return s.Table == t.table && s.Own == t.own && s.Collateral == t.collateral && reflect.DeepEqual(s.ByCause, bc)
		})
		if i >= 0 {
			out[i].Clients = append(out[i].Clients, t.kind)
			continue
		}
		out = append(out, status.MovedShare{Table: t.table, Clients: []string{t.kind}, Own: t.own, Collateral: t.collateral, ByCause: bc})
	}
	return out
}
