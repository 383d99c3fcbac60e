package reconcile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/hotkeys"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/clients"
	"github.com/kvxds/kvxds/xds/translate"
)

// Status returns the read model of this instance's pools, replicas and
// part in high availability, as of now: the model last pushed, joined
// with what scraping knows of each replica. The caller adds what the
// reconcile step does not know (data planes, served versions, the build
// version).
func (r *Reconciler) Status() status.Status {
	now := r.now()
	r.mu.Lock()
	in := statusInput{
		now: now, policy: r.policy, fleet: r.fleet, decisions: r.served,
		since: r.since, shares: r.shares, rule: status.DefaultHotspotRule,
		costs: r.costs, lastCost: r.lastCost,
		sources: sourceKinds(r.discovered),
	}
	model := r.model
	r.mu.Unlock()
	in.hot = r.hot.status(in.fleet)
	// A follower scrapes nothing: its views are empty.
	in.views = r.scrape.View()
	in.adapters = r.lora.status(in.fleet, model.Plan, in.views)
	in.prefill = r.prefill.status(in.fleet)
	return buildStatus(&in, r.id, r.HA())
}

func buildStatus(in *statusInput, id string, haSt status.HA) status.Status {
	st := status.Status{
		Time:        in.now,
		Instance:    status.Instance{ID: id},
		HA:          haSt,
		HotspotRule: in.rule,
		Pools:       buildPools(in),
		DataPlanes:  []status.DataPlane{},
	}
	if in.policy != nil {
		st.Instance.Policy = in.policy.Filename
	}
	return st
}

// statusInput is everything a status is built from; buildPools is a pure
// function of it.
type statusInput struct {
	now       time.Time
	policy    *policy.Policy
	fleet     fleet.Fleet
	decisions ha.Decisions
	views     map[string]weights.PoolView
	sources   map[string]map[string]string // pool → address → source kind
	since     map[string]map[string]healthSince
	shares    map[string]map[string]float64 // pool → identity → gRPC ring share
	costs     map[string][]pushCost         // pool → the last hour's pushes' costs
	lastCost  map[string]pushCost           // pool → its last push's cost
	rule      status.HotspotRule
	hot       map[string]*status.HotKeys  // pool → its hot keys, for pools with them on
	adapters  map[string]*status.Adapters // pool → its adapters, for pools placing them
	prefill   map[string]*status.Prefill  // decode pool → its prefill side
}

// healthSince is when a replica entered its current health.
type healthSince struct {
	health status.Health
	since  time.Time
}

func buildPools(in *statusInput) []status.Pool {
	engines := map[string]string{}
	profiles := map[string]*weights.Profile{}
	if in.policy != nil {
		for _, p := range in.policy.Pools {
			if p.Metrics != nil {
				engines[p.Name] = p.Metrics.Engine
				if prof, err := weights.ProfileFor(p.Metrics.Engine, p.Metrics.Signals); err == nil {
					profiles[p.Name] = prof
				}
			}
		}
	}
	out := make([]status.Pool, 0, len(in.fleet.Pools))
	for _, fp := range in.fleet.Pools {
		view, scraped := in.views[fp.Name]
		sp := status.Pool{
			Name: fp.Name, Balancer: string(fp.Balancer), Engine: engines[fp.Name],
			Replicas: make([]status.Replica, 0, len(fp.Endpoints)),
		}
		if fp.Balancer == fleet.ConsistentHash {
			sp.Algorithm = string(fp.Hash.Algorithm)
			if translate.Picks(&fp, translate.Envoy) {
				sp.BalanceOn = fp.Hash.BalanceOn
			}
		}
		sp.HotKeys = in.hot[fp.Name]
		sp.Adapters = in.adapters[fp.Name]
		sp.Prefill = in.prefill[fp.Name]
		if scraped {
			sp.Escapes1h, sp.WeightMoves1h, sp.Fallback = view.Escapes, view.WeightMoves, view.Fallback
			sp.RecentDecisions = recentDecisions(view.Changes)
		}
		dec, sources, since, shares := in.decisions[fp.Name], in.sources[fp.Name], in.since[fp.Name], in.shares[fp.Name]
		var queries, hits, gaugeSum, qSum, qMax float64
		var gauges, queues int
		prof := profiles[fp.Name]
		var found, missing map[string]int
		var names map[weights.SignalSet][]string // shared by replicas whose pages carried the same
		if scraped && prof != nil {
			found, missing, names = map[string]int{}, map[string]int{}, map[weights.SignalSet][]string{}
		}
		namesOf := func(s weights.SignalSet) []string {
			n, ok := names[s]
			if !ok {
				n = s.Names()
				names[s] = n
			}
			return n
		}
		for _, e := range fp.Endpoints {
			id := e.Identity()
			d, hasD := dec[id]
			rep := status.Replica{
				ID: id, Address: e.Address(), Source: sources[e.Address()],
				Health: replicaHealth(e, d, hasD), StaticWeight: e.Weight, Weight: e.Weight,
			}
			if e.Locality != (fleet.Locality{}) {
				rep.Locality = &status.Locality{Region: e.Locality.Region, Zone: e.Locality.Zone, SubZone: e.Locality.SubZone}
			}
			if hasD && d.Weight > 0 {
				rep.Multiplier = d.Weight
				rep.StaticWeight = e.Weight / d.Weight
			}
			if s, ok := since[id]; ok && s.health == rep.Health {
				rep.Since = s.since
			}
			if share, ok := shares[id]; ok {
				rep.TableShare = &share
			}
			if rep.Health == status.Draining {
				rep.Reason = "going away (discovery)"
			}
			if rv, ok := view.Replicas[id]; ok {
				if rep.Health == status.Saturated || rep.Health == status.Stale {
					rep.Reason = rv.Reason
				}
				fillSignals(&rep, &rv)
				if found != nil && !rv.PageRead.IsZero() {
					sp.PagesRead++
					lacks := prof.Lacks(rv.Carried)
					rep.SignalsFound, rep.SignalsMissing = namesOf(rv.Carried&prof.Reads()), namesOf(lacks)
					for _, n := range rep.SignalsFound {
						found[n]++
					}
					for _, n := range rep.SignalsMissing {
						missing[n]++
					}
				}
				w := &rv.Window
				if q := w.QueueDepth; q == q {
					qSum += q
					qMax = max(qMax, q)
					queues++
				}
				if w.PrefixQueries == w.PrefixQueries && w.PrefixHits == w.PrefixHits {
					queries += w.PrefixQueries
					hits += w.PrefixHits
				} else if w.HitRate == w.HitRate {
					gaugeSum += w.HitRate
					gauges++
				}
			}
			sp.Replicas = append(sp.Replicas, rep)
		}
		switch {
		case queries > 0:
			sp.HitRate1m = status.Number(min(hits/queries, 1))
		case gauges > 0:
			sp.HitRate1m = status.Number(gaugeSum / float64(gauges))
		}
		if found != nil {
			reads := prof.Reads()
			for _, n := range reads.Names() {
				c := status.SignalCoverage{Signal: n, Use: weights.SignalUse(n), Found: found[n], Missing: missing[n]}
				for _, s := range prof.Series(n) {
					c.Metrics = append(c.Metrics, s.String())
				}
				sp.Signals = append(sp.Signals, c)
			}
		}
		switch {
		case queues > 0:
			mean := qSum / float64(queues)
			sp.BusiestQueue1m, sp.MeanQueue1m = status.Number(qMax), status.Number(mean)
			if qMax >= status.BalanceMinQueue {
				sp.Balance = status.Number(qMax / mean)
			} else {
				sp.BalanceNote = fmt.Sprintf("too little load to compare: the busiest replica queues %s on average (balance needs %d)",
					status.TextFormat.Number(status.Number(math.Round(qMax*10)/10)), status.BalanceMinQueue)
			}
		case scraped && prof != nil && !prof.Reads().Has(weights.SignalQueueDepth):
			sp.BalanceNote = "the engine profile reads no queue depth"
		case scraped:
			sp.BalanceNote = "no queue depth scraped yet"
		}
		sp.Hotspot = in.rule.Hotspot(sp.Balance, sp.HitRate1m, sp.BusiestQueue1m)
		if c, ok := in.lastCost[fp.Name]; ok {
			sp.Moved = movedStatus(&c, in.costs[fp.Name], in.now)
		}
		out = append(out, sp)
	}
	return out
}

// fillSignals copies what scraping knows of a replica.
func fillSignals(rep *status.Replica, rv *weights.ReplicaView) {
	if !rv.LastScrape.IsZero() {
		rep.LastScrape = &status.Scrape{Time: rv.LastScrape, OK: rv.LastError == nil}
		if rv.LastError != nil {
			rep.LastScrape.Error = rv.LastError.Error()
		}
	}
	if rv.LastGood.IsZero() {
		return
	}
	s, w := &rv.Signals, &rv.Window
	rep.QueueDepth = status.Number(s.QueueDepth)
	rep.Running = status.Number(s.Running)
	rep.KVOccupancy = status.Number(s.KVOccupancy)
	rep.QueueDepth1m = status.Number(w.QueueDepth)
	rep.HitRate1m = status.Number(w.HitRate)
	rep.HitRateTotal = status.Number(w.HitRateTotal)
	rep.TTFTP50 = status.Number(w.TTFTP50)
	rep.TTFTP95 = status.Number(w.TTFTP95)
	rep.PreemptionRate = status.Number(w.PreemptionRate)
	if len(rv.Trend) > 0 {
		tr := &status.Trend{StepSeconds: weights.TrendStep.Seconds(), Points: make([]status.TrendPoint, len(rv.Trend))}
		for i, p := range rv.Trend {
			tr.Points[i] = status.TrendPoint{Time: p.Time, QueueDepth: status.Number(p.QueueDepth),
				HitRate: status.Number(p.HitRate), TTFTP95: status.Number(p.TTFTP95)}
		}
		rep.Trend = tr
	}
}

// recentDecisions names the scraping runner's changes as the status
// does.
func recentDecisions(cs []weights.Change) []status.Decision {
	if len(cs) == 0 {
		return nil
	}
	kinds := map[string]string{weights.ChangeEscape: status.Escape, weights.ChangeReturn: status.Return, weights.ChangeWeight: status.WeightMove}
	out := make([]status.Decision, len(cs))
	for i, c := range cs {
		out[i] = status.Decision{Time: c.Time, Replica: c.Replica, Kind: kinds[c.Kind],
			FromMultiplier: c.From, ToMultiplier: c.To, Reason: c.Reason}
	}
	return out
}

// replicaHealth is a replica's health as the status names it.
func replicaHealth(e fleet.Endpoint, d weights.Decision, hasD bool) status.Health {
	return status.ReplicaHealth(e.Health, hasD && d.Saturated, hasD && d.Stale)
}

// trackSince updates when each replica of f entered its health; replicas
// that left are forgotten. The caller holds mu.
func trackSince(prev map[string]map[string]healthSince, f fleet.Fleet, decisions ha.Decisions, now time.Time) map[string]map[string]healthSince {
	out := make(map[string]map[string]healthSince, len(f.Pools))
	for _, p := range f.Pools {
		old, dec := prev[p.Name], decisions[p.Name]
		m := make(map[string]healthSince, len(p.Endpoints))
		for _, e := range p.Endpoints {
			id := e.Identity()
			d, hasD := dec[id]
			h := replicaHealth(e, d, hasD)
			if o, ok := old[id]; ok && o.health == h {
				m[id] = o
			} else {
				m[id] = healthSince{health: h, since: now}
			}
		}
		out[p.Name] = m
	}
	return out
}

// tableShares models, for each hash pool of a model, the share of
// proxyless gRPC clients' ring each endpoint owns: the ring they build
// (xds/clients) from the clusters and assignments they are served, over
// the endpoints they put on it (healthy ones only). A replica's share is
// of the table of its weight domain: an exclusive tenant group's for the
// members that serve only there, the pool's own for every other. Out of
// the ring, a share is 0. Nil if the model does not translate (a model
// pushed always does).
func tableShares(md fleet.Model) map[string]map[string]float64 {
	res, err := translate.Translate(md, translate.GRPC)
	if err != nil {
		return nil
	}
	return servedShares(md, clients.NewServed(res.Clusters, res.Endpoints))
}

// servedShares is tableShares from the resources gRPC clients are served.
func servedShares(md fleet.Model, s *clients.Served) map[string]map[string]float64 {
	f := md.Fleet()
	out := map[string]map[string]float64{}
	for i := range f.Pools {
		p := &f.Pools[i]
		if p.Balancer != fleet.ConsistentHash {
			continue
		}
		m := make(map[string]float64, len(p.Endpoints))
		for _, e := range p.Endpoints {
			m[e.Identity()] = 0
		}
		// The pool's own table comes first: a member of a group that is
		// not exclusive keeps its share of it; an exclusive member is in
		// its group's table alone.
		names := []string{p.Name}
		for _, g := range md.Plan(p.Name).Groups {
			names = append(names, g.Cluster)
		}
		seen := map[string]bool{}
		for _, name := range names {
			t, err := s.Table(clients.GRPC, name, p.Hash.GRPCRingCap)
			if err != nil {
				continue
			}
			shares := t.Shares()
			for j, id := range t.Hosts {
				if _, in := m[id]; in && !seen[id] {
					seen[id], m[id] = true, shares[j]
				}
			}
		}
		out[p.Name] = m
	}
	return out
}

// statusCollector exports the pool figures kvxds computes better than a
// query over the engines' own series would (a fleet hit rate weighted by
// lookups, queue balance, the hotspot rule), and each replica's share of
// the hash table. Series are built at each scrape from the status, so a
// replica's and a pool's series go when they do.
type statusCollector struct {
	r                                        *Reconciler
	hitRate, balance, hotspot, share         *prometheus.Desc
	hotKeys, hotShare, hotSpread, hotTracked *prometheus.Desc
	adapterReplicas, adapterMembers          *prometheus.Desc
	adapterShare, adapterInFlight            *prometheus.Desc
	adapterOver, adapterOverfull             *prometheus.Desc
	adapterSlotsFull                         *prometheus.Desc
}

func newStatusCollector(r *Reconciler) *statusCollector {
	rule := status.DefaultHotspotRule
	return &statusCollector{
		r: r,
		hitRate: prometheus.NewDesc("kvxds_pool_hit_rate",
			"Prefix-cache hit rate of a pool over the last minute: its replicas' hits over their lookups.", []string{"pool"}, nil),
		balance: prometheus.NewDesc("kvxds_pool_balance",
			fmt.Sprintf("Busiest replica's mean queue depth over the last minute divided by the pool's mean (1 is even); absent while the busiest queues fewer than %d requests.", status.BalanceMinQueue), []string{"pool"}, nil),
		hotspot: prometheus.NewDesc("kvxds_pool_hotspot",
			fmt.Sprintf("1 while a pool's balance is above %g with a hit rate of at least %g and the busiest replica queueing at least %g requests.",
				rule.BalanceAbove, rule.HitRateAtLeast, rule.BusiestQueueAtLeast), []string{"pool"}, nil),
		share: prometheus.NewDesc("kvxds_replica_table_share",
			"Fraction of proxyless gRPC clients' hash ring a replica owns (0 while out of it).", []string{"pool", "replica"}, nil),
		hotKeys: prometheus.NewDesc("kvxds_hot_keys",
			"Entries of a pool's hot-key table as served (pools with hot keys on).", []string{"pool"}, nil),
		hotShare: prometheus.NewDesc("kvxds_hot_key_share",
			"A hot key's share of its pool's keyed requests when its table entry was decided, by pool, key index in the chain (from 0) and key (a body key's hash, or 8 hex digits of a header value's hash).", []string{"pool", "key_index", "key"}, nil),
		hotSpread: prometheus.NewDesc("kvxds_hot_key_spread",
			"The number of spread buckets of a hot key (labels as kvxds_hot_key_share).", []string{"pool", "key_index", "key"}, nil),
		hotTracked: prometheus.NewDesc("kvxds_hot_key_sketch_keys",
			fmt.Sprintf("Key values a pool's hot-key sketch tracks from the requests this instance saw logged (at most %d).", hotkeys.Capacity), []string{"pool"}, nil),
		adapterReplicas: prometheus.NewDesc("kvxds_adapter_replicas",
			"Healthy replicas a placed LoRA adapter was decided to take, by pool and adapter.", []string{"pool", "adapter"}, nil),
		adapterMembers: prometheus.NewDesc("kvxds_adapter_members",
			"Replicas in a placed adapter's table (draining and unhealthy members keep their place), by pool and adapter.", []string{"pool", "adapter"}, nil),
		adapterShare: prometheus.NewDesc("kvxds_adapter_share",
			"A placed adapter's share of its pool's requests when its placement was decided, by pool and adapter.", []string{"pool", "adapter"}, nil),
		adapterInFlight: prometheus.NewDesc("kvxds_adapter_in_flight_replicas",
			"Replicas whose engine reports a placed adapter in flight (its spread), by pool and adapter; from this instance's scrapes.", []string{"pool", "adapter"}, nil),
		adapterOver: prometheus.NewDesc("kvxds_adapter_over_capacity",
			"1 for a placed adapter in the tail: no slot of its own was left, so it is on its first-ranked replica, in the slots kept there for the tail.", []string{"pool", "adapter"}, nil),
		adapterOverfull: prometheus.NewDesc("kvxds_adapter_overfull_replicas",
			"Replicas of a pool whose engine reports more adapters in flight than its max_lora.", []string{"pool"}, nil),
		adapterSlotsFull: prometheus.NewDesc("kvxds_adapter_slots_full_replicas",
			"Replicas of a pool on which the Envoys logging their load to this instance have requests in flight for at least as many adapters as the replica has slots (pools whose pick filters observe load).", []string{"pool"}, nil),
	}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hitRate
	ch <- c.balance
	ch <- c.hotspot
	ch <- c.share
	ch <- c.hotKeys
	ch <- c.hotShare
	ch <- c.hotSpread
	ch <- c.hotTracked
	ch <- c.adapterReplicas
	ch <- c.adapterMembers
	ch <- c.adapterShare
	ch <- c.adapterInFlight
	ch <- c.adapterOver
	ch <- c.adapterOverfull
	ch <- c.adapterSlotsFull
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.r.Status().Pools {
		if p.HitRate1m != nil {
			ch <- prometheus.MustNewConstMetric(c.hitRate, prometheus.GaugeValue, *p.HitRate1m, p.Name)
		}
		if p.Balance != nil {
			ch <- prometheus.MustNewConstMetric(c.balance, prometheus.GaugeValue, *p.Balance, p.Name)
		}
		hot := 0.0
		if p.Hotspot {
			hot = 1
		}
		ch <- prometheus.MustNewConstMetric(c.hotspot, prometheus.GaugeValue, hot, p.Name)
		for _, rep := range p.Replicas {
			if rep.TableShare != nil {
				ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, *rep.TableShare, p.Name, rep.ID)
			}
		}
		if hk := p.HotKeys; hk != nil {
			// Only table entries: a bounded label set.
			ch <- prometheus.MustNewConstMetric(c.hotKeys, prometheus.GaugeValue, float64(len(hk.Keys)), p.Name)
			ch <- prometheus.MustNewConstMetric(c.hotTracked, prometheus.GaugeValue, float64(hk.Tracked), p.Name)
			for _, k := range hk.Keys {
				idx := strconv.Itoa(k.Key)
				ch <- prometheus.MustNewConstMetric(c.hotShare, prometheus.GaugeValue, k.Share, p.Name, idx, k.Value)
				ch <- prometheus.MustNewConstMetric(c.hotSpread, prometheus.GaugeValue, float64(k.Spread), p.Name, idx, k.Value)
			}
		}
		if ad := p.Adapters; ad != nil {
			// Only placed adapters (at most the pool's max): a bounded
			// label set.
			ch <- prometheus.MustNewConstMetric(c.adapterOverfull, prometheus.GaugeValue, float64(len(ad.Overfull)), p.Name)
			ch <- prometheus.MustNewConstMetric(c.adapterSlotsFull, prometheus.GaugeValue, float64(len(ad.SlotsFull)), p.Name)
			for _, a := range ad.Adapters {
				over := 0.0
				if a.OverCapacity {
					over = 1
				}
				ch <- prometheus.MustNewConstMetric(c.adapterReplicas, prometheus.GaugeValue, float64(a.Replicas), p.Name, a.Name)
				ch <- prometheus.MustNewConstMetric(c.adapterMembers, prometheus.GaugeValue, float64(len(a.Members)), p.Name, a.Name)
				ch <- prometheus.MustNewConstMetric(c.adapterShare, prometheus.GaugeValue, a.Share, p.Name, a.Name)
				ch <- prometheus.MustNewConstMetric(c.adapterInFlight, prometheus.GaugeValue, float64(a.InFlight), p.Name, a.Name)
				ch <- prometheus.MustNewConstMetric(c.adapterOver, prometheus.GaugeValue, over, p.Name, a.Name)
			}
		}
	}
}

// sourceKinds returns, for each pool, the kind of source (static, dns,
// kubernetes: the first word of the source's ID) that reported each
// address.
func sourceKinds(discovered []discovery.PoolTargets) map[string]map[string]string {
	out := make(map[string]map[string]string, len(discovered))
	for _, pt := range discovered {
		m := make(map[string]string, len(pt.Sources))
		for addr, id := range pt.Sources {
			kind, _, _ := strings.Cut(id, " ")
			m[addr] = kind
		}
		out[pt.Pool] = m
	}
	return out
}
