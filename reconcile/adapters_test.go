package reconcile

import (
	"context"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/hotkeys"
	"github.com/kvxds/kvxds/xds/accesslog"
	"github.com/kvxds/kvxds/xds/server"
	"github.com/kvxds/kvxds/xds/translate"
)

const adapterPolicy = `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    hot_keys { enabled = false }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000",
                        "10.0.0.5:8000", "10.0.0.6:8000", "10.0.0.7:8000", "10.0.0.8:8000"] }
  adapters {
    base_models = ["llama"]
    adapters    = ["always-on"]
    max_lora    = 4
    interval    = "50ms"
  }
}
`

// adapterTestPool is an adapter pool's state with settings a and healthy
// replicas.
func adapterTestPool(a fleet.Adapters, healthy int) *adapterPool {
	return &adapterPool{settings: a, healthy: healthy, sketch: hotkeys.NewSketch(a.HalfLife)}
}

// Decisions size each adapter from its share of the pool's requests,
// grow at once, shrink only after a full interval below (TestAdapterShrink), fall back
// on the engines without logs (smoothed over the half-life), and keep the
// placement without either.
func TestDecideAdapters(t *testing.T) {
	set := fleet.DefaultAdapters()
	set.Interval = 10 * time.Second
	set.BaseModels = []string{"llama"}
	s := newAdapterState(prometheus.NewRegistry())
	ap := adapterTestPool(set, 8)
	s.pools["chat"] = ap
	t0 := time.Unix(1000, 0)
	observe := func(now time.Time, counts map[string]int) {
		for name, n := range counts {
			for range n {
				s.pools["chat"].sketch.Observe(func() int {
					if name == "" {
						return baseKey
					}
					return adapterKey
				}(), map[bool]string{true: baseValue, false: name}[name == ""], now)
				ap.observed++
			}
		}
	}
	replicas := func(pl fleet.AdapterPlacement) map[string]int {
		out := map[string]int{}
		for _, a := range pl.Adapters {
			if a.Stage != fleet.StageLeaving {
				out[a.Name] = a.Replicas
			}
		}
		return out
	}
	stages := func(pl fleet.AdapterPlacement) map[string]string {
		out := map[string]string{}
		for _, a := range pl.Adapters {
			out[a.Name] = a.Stage
		}
		return out
	}
	// 80% sql (ceil(0.8 × 8 × 0.75) = 5), 10% fr (ceil(0.6) = 1), 10% base.
	observe(t0, map[string]int{"sql": 800, "fr": 100, "": 100})
	pl := s.decidePool("chat", ap, engineDemand{}, t0)
	if got, want := replicas(pl), map[string]int{"sql": 5, "fr": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replicas %v, want %v", got, want)
	}
	// Placed: clusters first, routes with the next decision.
	if got, want := stages(pl), map[string]string{"sql": fleet.StageAdding, "fr": fleet.StageAdding}; !reflect.DeepEqual(got, want) {
		t.Fatalf("stages %v, want %v", got, want)
	}
	s.placed.own["chat"] = pl
	// Demand falls below half: the placement holds for an interval.
	t1 := t0.Add(10 * time.Minute) // the old counts decayed away
	observe(t1, map[string]int{"sql": 10, "fr": 100, "": 890})
	pl = s.decidePool("chat", ap, engineDemand{}, t1)
	if got := replicas(pl); got["sql"] != 5 || got["fr"] != 1 {
		t.Fatalf("shrank at once: %v", got)
	}
	if got, want := stages(pl), map[string]string{"sql": "", "fr": ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("stages %v, want both routed", got)
	}
	s.placed.own["chat"] = pl
	t2 := t1.Add(set.Interval)
	observe(t2, map[string]int{"sql": 10, "fr": 100, "": 890})
	pl = s.decidePool("chat", ap, engineDemand{}, t2)
	if got := replicas(pl); got["sql"] != 1 || got["fr"] != 1 {
		t.Fatalf("after an interval below half: %v, want sql 1", got)
	}
	s.placed.own["chat"] = pl
	// No logs: the engines' in-flight adapters keep it, without headroom.
	t3 := t2.Add(set.Interval)
	pl = s.decidePool("chat", ap, engineDemand{reporting: 8, inFlight: map[string]int{"sql": 3, "fr": 2, "llama": 8}, slots: map[string]int{"r1": 2}}, t3)
	if got := replicas(pl); !reflect.DeepEqual(got, map[string]int{"sql": 3, "fr": 2}) {
		t.Errorf("from the engines: %v, want sql 3 (grown), fr 2", got)
	}
	if pl.Slots["r1"] != 2 {
		t.Errorf("slots %v, want r1's reported 2", pl.Slots)
	}
	s.placed.own["chat"] = pl
	// An adapter the engines no longer report is forgotten over the
	// half-life; then, after an interval below half, it loses its route
	// first, and its cluster with the next decision.
	t3 = t3.Add(set.Interval)
	pl = s.decidePool("chat", ap, engineDemand{reporting: 8, inFlight: map[string]int{"sql": 3}}, t3)
	if got := replicas(pl); !reflect.DeepEqual(got, map[string]int{"sql": 3, "fr": 2}) {
		t.Fatalf("one decision without fr: %v, want it kept on 2", got)
	}
	s.placed.own["chat"] = pl
	t3 = t3.Add(5 * set.HalfLife) // 2 × 2⁻⁵ in flight: below minInFlight
	pl = s.decidePool("chat", ap, engineDemand{reporting: 8, inFlight: map[string]int{"sql": 3}}, t3)
	if got, want := stages(pl), map[string]string{"sql": "", "fr": ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("stages %v, want %v (fr held an interval)", got, want)
	}
	s.placed.own["chat"] = pl
	t3 = t3.Add(set.Interval)
	pl = s.decidePool("chat", ap, engineDemand{reporting: 8, inFlight: map[string]int{"sql": 3}}, t3)
	if got, want := stages(pl), map[string]string{"sql": "", "fr": fleet.StageLeaving}; !reflect.DeepEqual(got, want) {
		t.Fatalf("stages %v, want %v", got, want)
	}
	s.placed.own["chat"] = pl
	t3 = t3.Add(set.Interval)
	pl = s.decidePool("chat", ap, engineDemand{reporting: 8, inFlight: map[string]int{"sql": 3, "fr": 1}}, t3)
	if got, want := stages(pl), map[string]string{"sql": "", "fr": ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("stages %v, want %v (a leaving adapter's cluster is served: it is routed at once)", got, want)
	}
	s.placed.own["chat"] = pl
	// Nothing at all: the placement stays.
	if got := s.decidePool("chat", ap, engineDemand{}, t3.Add(set.Interval)); !placementKind.equal(got, pl) {
		t.Errorf("without signals the placement changed: %+v → %+v", pl, got)
	}
}

// Adapters are sized with headroom 0.75 per slot for placed adapters (a
// quarter of max_lora), at most 1: a replica's few slots go to as few
// members as keep each under 4/3 of its share, its many to as many as
// keep each under its share. The engines' reports win over the policy,
// the fewest slots of any.
func TestAdapterHeadroom(t *testing.T) {
	for _, tc := range []struct {
		maxLoRA int
		slots   map[string]int
		want    float64
		sql     int // replicas of 80% of 8 replicas' requests
	}{
		{maxLoRA: 1, want: 0.75, sql: 5},
		{maxLoRA: 4, want: 0.75, sql: 5},
		{maxLoRA: 7, want: 0.75, sql: 5},
		{maxLoRA: 8, want: 1, sql: 7},
		{maxLoRA: 16, want: 1, sql: 7},
		{maxLoRA: 4, slots: map[string]int{"r1": 8, "r2": 12}, want: 1, sql: 7},
		{maxLoRA: 8, slots: map[string]int{"r1": 8, "r2": 4}, want: 0.75, sql: 5},
	} {
		if got := placementHeadroom(tc.maxLoRA, tc.slots); got != tc.want {
			t.Errorf("placementHeadroom(%d, %v) = %v, want %v", tc.maxLoRA, tc.slots, got, tc.want)
		}
		set := fleet.DefaultAdapters()
		set.MaxLoRA = tc.maxLoRA
		s := newAdapterState(prometheus.NewRegistry())
		ap := adapterTestPool(set, 8)
		s.pools["chat"] = ap
		now := time.Unix(1000, 0)
		for i := range 1000 {
			if i < 800 {
				ap.sketch.Observe(adapterKey, "sql", now)
			} else {
				ap.sketch.Observe(baseKey, baseValue, now)
			}
			ap.observed++
		}
		pl := s.decidePool("chat", ap, engineDemand{slots: tc.slots}, now)
		if len(pl.Adapters) != 1 || pl.Adapters[0].Replicas != tc.sql {
			t.Errorf("max_lora %d, slots %v: placed %+v, want sql on %d", tc.maxLoRA, tc.slots, pl.Adapters, tc.sql)
		}
	}
}

// The engines' in-flight reports are smoothed over the half-life: a rare
// adapter that comes and goes stays placed, a dip does not shrink a busy
// one, and one no longer reported is forgotten after a few half-lives.
func TestEngineNeed(t *testing.T) {
	set := fleet.DefaultAdapters() // interval 10 s, half-life 1 min
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		reports []map[string]int // one per decision, an interval apart
		want    map[string]int   // rounded, of the last
	}{
		{"new at what it is in flight on", []map[string]int{{"a": 3}}, map[string]int{"a": 3}},
		{"a dip does not shrink", []map[string]int{{"a": 3}, {"a": 3}, {"a": 1}}, map[string]int{"a": 3}},
		{"a rare adapter stays", []map[string]int{{"a": 2, "r": 1}, {"a": 2}, {"a": 2, "r": 1}, {"a": 2}, {"a": 2}}, map[string]int{"a": 2, "r": 1}},
		{"a burst does not grow", []map[string]int{{"a": 2}, {"a": 2}, {"a": 6}}, map[string]int{"a": 2}},
		{"the base model is no adapter", []map[string]int{{"a": 1, "llama": 8}}, map[string]int{"a": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set.BaseModels = []string{"llama"}
			s := newAdapterState(prometheus.NewRegistry())
			ap := adapterTestPool(set, 8)
			var got map[string]float64
			for i, r := range tc.reports {
				got = s.engineNeed("chat", ap, engineDemand{reporting: 8, inFlight: r}, t0.Add(time.Duration(i)*set.Interval))
			}
			rounded := map[string]int{}
			for n, v := range got {
				rounded[n] = int(math.Round(max(v, 1)))
			}
			if !reflect.DeepEqual(rounded, tc.want) {
				t.Errorf("%v (%v), want %v", rounded, got, tc.want)
			}
		})
	}
	// Forgotten: 1 in flight, then nothing for five half-lives.
	s := newAdapterState(prometheus.NewRegistry())
	ap := adapterTestPool(set, 8)
	s.engineNeed("chat", ap, engineDemand{reporting: 8, inFlight: map[string]int{"r": 1}}, t0)
	if got := s.engineNeed("chat", ap, engineDemand{reporting: 8, inFlight: map[string]int{"a": 1}}, t0.Add(5*set.HalfLife)); len(got) != 1 {
		t.Errorf("%v, want r forgotten", got)
	}
}

// A placement shrinks, after a full interval below, to its need from the
// logs with shrinkSlack more headroom: a placement the engines sized
// while the pool's own hash spread the adapter comes down, and a share
// just under a boundary keeps the size above it.
func TestAdapterShrink(t *testing.T) {
	set := fleet.DefaultAdapters()
	set.BaseModels = []string{"llama"}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name      string
		sql       int // requests of sql in 1,000
		from      int // replicas placed
		held, now int // replicas at once, and an interval later
	}{
		// need ceil(share × 8 × 0.75); it shrinks to ceil(share × 8 × 0.75 × 1.25)
		{"the engines' spread, then the logs", 120, 4, 4, 1},
		{"need 3 of 4 (not below half)", 380, 4, 4, 3},
		{"need 2, 2.4 with slack: kept on 3", 320, 4, 4, 3},
		{"need 2 well under", 200, 4, 4, 2},
		{"need as placed", 380, 3, 3, 3},
		{"growing is at once", 380, 2, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAdapterState(prometheus.NewRegistry())
			ap := adapterTestPool(set, 8)
			s.pools["chat"] = ap
			s.placed.own["chat"] = fleet.AdapterPlacement{Adapters: []fleet.Adapter{{Name: "sql", Replicas: tc.from, Share: float64(tc.sql) / 1000}}}
			decide := func(at time.Time) int {
				for i := range 1000 {
					if i < tc.sql {
						ap.sketch.Observe(adapterKey, "sql", at)
					} else {
						ap.sketch.Observe(baseKey, baseValue, at)
					}
				}
				ap.observed = 1000
				pl := s.decidePool("chat", ap, engineDemand{}, at)
				s.placed.own["chat"] = pl
				i := slices.IndexFunc(pl.Adapters, func(a fleet.Adapter) bool { return a.Name == "sql" })
				if i < 0 {
					t.Fatalf("sql not placed: %+v", pl.Adapters)
				}
				return pl.Adapters[i].Replicas
			}
			if got := decide(t0); got != tc.held {
				t.Errorf("at once: %d replicas, want %d", got, tc.held)
			}
			if got := decide(t0.Add(set.Interval)); got != tc.now {
				t.Errorf("an interval later: %d replicas, want %d", got, tc.now)
			}
		})
	}
}

// A decided share stays until the measured one moves past a factor of
// √2 from it, so that noise does not reorder the placement (fr stays at
// 15% throughout).
func TestAdapterShareBand(t *testing.T) {
	set := fleet.DefaultAdapters()
	set.BaseModels = []string{"llama"}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		sql  int // requests of sql in 1,000
		want float64
	}{
		{"unchanged", 200, 0.2},
		{"below fr, within the band", 145, 0.2},
		{"a little more", 280, 0.2},
		{"past the band", 140, 0.14},
		{"far more", 380, 0.38},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAdapterState(prometheus.NewRegistry())
			ap := adapterTestPool(set, 8)
			s.pools["chat"] = ap
			s.placed.own["chat"] = fleet.AdapterPlacement{Adapters: []fleet.Adapter{{Name: "fr", Replicas: 1, Share: 0.15}, {Name: "sql", Replicas: 1, Share: 0.2}}}
			for i := range 1000 {
				switch {
				case i < tc.sql:
					ap.sketch.Observe(adapterKey, "sql", t0)
				case i < tc.sql+150:
					ap.sketch.Observe(adapterKey, "fr", t0)
				default:
					ap.sketch.Observe(baseKey, baseValue, t0)
				}
			}
			ap.observed = 1000
			pl := s.decidePool("chat", ap, engineDemand{}, t0)
			i := slices.IndexFunc(pl.Adapters, func(a fleet.Adapter) bool { return a.Name == "sql" })
			if i < 0 || pl.Adapters[i].Share != tc.want {
				t.Errorf("%+v, want sql's share %g", pl.Adapters, tc.want)
			}
		})
	}
}

// A learned adapter is placed from a share of 0.1% and leaves below
// 0.01%, after an interval below like any shrink: a rare adapter, whose
// share rises with each request and decays between them, keeps its
// replica between requests.
func TestAdapterKeepShare(t *testing.T) {
	set := fleet.DefaultAdapters()
	set.BaseModels = []string{"llama"}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		placed bool
		rare   int // requests of rare in 100,000
		want   bool
	}{
		{"new, at 0.1%", false, 100, true},
		{"new, below 0.1%", false, 50, false},
		{"placed, below 0.1%", true, 50, true},
		{"placed, at 0.01%", true, 10, true},
		{"placed, below 0.01%", true, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newAdapterState(prometheus.NewRegistry())
			ap := adapterTestPool(set, 8)
			s.pools["chat"] = ap
			if tc.placed {
				s.placed.own["chat"] = fleet.AdapterPlacement{Adapters: []fleet.Adapter{{Name: "rare", Replicas: 1, Share: 0.001}}}
			}
			var pl fleet.AdapterPlacement
			for _, now := range []time.Time{t0, t0.Add(set.Interval)} {
				ap.sketch.ObserveN(adapterKey, "rare", uint32(tc.rare), now)
				ap.sketch.ObserveN(baseKey, baseValue, uint32(100_000-tc.rare), now)
				ap.observed = 100_000
				pl = s.decidePool("chat", ap, engineDemand{}, now)
				s.placed.own["chat"] = pl
			}
			got := slices.ContainsFunc(pl.Adapters, func(a fleet.Adapter) bool { return a.Name == "rare" && a.Stage != fleet.StageLeaving })
			if got != tc.want {
				t.Errorf("placed %v (%+v), want %v", got, pl.Adapters, tc.want)
			}
		})
	}
}

// A standalone instance learns adapters from the logged requests, places
// them in the model, the served resources and the status; an adapter's
// appearing costs a cluster and a route change, and counts as a demand
// move.
func TestAdaptersStandalone(t *testing.T) {
	p := mustParse(t, adapterPolicy)
	reg := prometheus.NewRegistry()
	srv := server.New(server.Options{})
	r := New(Options{Sink: srv, Logger: hclog.NewNullLogger(), Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	// Before any decision the always-placed adapter is on one replica,
	// its cluster served before its route.
	if got := r.Fleet().Pools[0].Adapters; !reflect.DeepEqual(got, []fleet.Adapter{{Name: "always-on", Replicas: 1, Stage: fleet.StageAdding}}) {
		t.Fatalf("adapters before any log: %+v", got)
	}
	before := srv.Versions(translate.Envoy)
	go r.Run(ctx)
	sink := r.AccessLogSink()
	if h := sink.(accesslog.AdapterSink).AdapterHeader("chat"); h != "x-kvxds-adapter" {
		t.Fatalf("adapter header %q", h)
	}
	if pool, _, ok := sink.KeyHeaders("chat"); !ok || pool != "chat" {
		t.Fatalf("a pool placing adapters without hot keys takes no logs")
	}
	for i := range 400 {
		req := accesslog.Request{Pool: "chat", Cluster: "chat", Key: -1}
		switch i % 4 {
		case 0, 1:
			req.Adapter = "sql-lora"
		case 2:
			req.Adapter = "llama" // a base model
		}
		if i == 3 {
			req.AdapterRejected = "not_string"
		}
		sink.Observe(req)
	}
	waitFor(t, "sql-lora placed and routed", func() bool {
		return slices.ContainsFunc(r.Fleet().Pools[0].Adapters, func(a fleet.Adapter) bool { return a.Name == "sql-lora" && a.Routed() })
	})
	var sql fleet.Adapter
	for _, a := range r.Fleet().Pools[0].Adapters {
		if a.Name == "sql-lora" {
			sql = a
		}
	}
	// Half the requests: ceil(0.5 × 8 × 0.75) = 3 replicas.
	if sql.Replicas != 3 || sql.Share < 0.45 || sql.Share > 0.55 {
		t.Errorf("sql-lora %+v, want 3 replicas at 0.5", sql)
	}
	after := srv.Versions(translate.Envoy)
	for typ, v := range before {
		if typ == "type.googleapis.com/envoy.config.listener.v3.Listener" && after[typ] != v {
			t.Errorf("the listener moved with the placement")
		}
	}
	st := r.Status().Pools[0].Adapters
	if st == nil || len(st.Adapters) != 2 || st.Adapters[0].Name != "sql-lora" || len(st.Adapters[0].Members) != 3 {
		t.Fatalf("status adapters: %+v", st)
	}
	if st.Requests != 400 || st.AdapterRequests != 200 || st.Rejected["not_string"] != 1 {
		t.Errorf("status counts: %d requests, %d adapter, rejected %v", st.Requests, st.AdapterRequests, st.Rejected)
	}
	if got := testutil.ToFloat64(r.lora.moves.WithLabelValues("chat", MoveDemand)); got < 1 {
		t.Errorf("demand moves = %v", got)
	}
	// The push is counted just after the model is shown.
	waitFor(t, "the adapters push counted", func() bool { return testutil.ToFloat64(r.updates.WithLabelValues(causeAdapters)) >= 1 })
	// The leader's placement is in its published document.
	waitFor(t, "the placement published", func() bool {
		doc, ok := r.board.Get()
		return ok && len(doc.Adapters["chat"].Adapters) == 2
	})
}

// A follower serves the leader's placement and slots.
func TestAdaptersFollowed(t *testing.T) {
	p := mustParse(t, adapterPolicy)
	r := New(Options{Sink: server.New(server.Options{}), Logger: hclog.NewNullLogger(), Peers: scripted{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	pl := fleet.AdapterPlacement{Adapters: []fleet.Adapter{{Name: "fr", Replicas: 2, Share: 0.1}}, Slots: map[string]int{"10.0.0.1:8000": 8}}
	haHandler{r}.Published(ha.Document{Leader: "a", Term: 1, Adapters: Placements{"chat": pl}})
	r.pushMu.Lock()
	err := r.pushLocked(ctx, p, causeLeader)
	r.pushMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	f := r.Fleet().Pools[0]
	if want := []fleet.Adapter{{Name: "always-on", Replicas: 1, Stage: fleet.StageAdding}, {Name: "fr", Replicas: 2, Share: 0.1}}; !reflect.DeepEqual(f.Adapters, want) {
		t.Errorf("adapters %+v, want %+v", f.Adapters, want)
	}
	if f.Endpoints[0].MaxLoRA != 8 || f.Endpoints[1].MaxLoRA != 0 {
		t.Errorf("slots not joined: %d, %d", f.Endpoints[0].MaxLoRA, f.Endpoints[1].MaxLoRA)
	}
}

// WithAdapters leaves pools that place no adapters without any.
func TestWithAdapters(t *testing.T) {
	p := mustParse(t, adapterPolicy+`
pool "plain" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["10.0.1.1:8000"] }
}`)
	f := WithAdapters(Join(p, StaticTargets(p), nil), Placements{
		"plain": {Adapters: []fleet.Adapter{{Name: "x", Replicas: 1}}},
		"chat":  {Adapters: []fleet.Adapter{{Name: "b", Replicas: 1}, {Name: "a", Replicas: 2}}},
	})
	var names []string
	for _, a := range f.Pools[0].Adapters {
		names = append(names, a.Name)
	}
	if !slices.Equal(names, []string{"a", "always-on", "b"}) || f.Pools[1].Adapters != nil {
		t.Errorf("chat %v, plain %+v", names, f.Pools[1].Adapters)
	}
	if _, err := fleet.Prepare(f); err != nil {
		t.Error(err)
	}
}

// Each decision moves every adapter one stage on: make before break.
func TestStageAdapters(t *testing.T) {
	a := func(name, stage string, share float64) fleet.Adapter {
		return fleet.Adapter{Name: name, Replicas: 1, Share: share, Stage: stage}
	}
	for _, tc := range []struct {
		name       string
		want, prev []fleet.Adapter
		max        int
		out        []fleet.Adapter
	}{
		{"new ones are adding", []fleet.Adapter{a("x", "", 0.1)}, nil, 8, []fleet.Adapter{a("x", fleet.StageAdding, 0.1)}},
		{"adding ones are routed", []fleet.Adapter{a("x", "", 0.1)}, []fleet.Adapter{a("x", fleet.StageAdding, 0.1)}, 8, []fleet.Adapter{a("x", "", 0.1)}},
		{"routed ones dropped are leaving", nil, []fleet.Adapter{a("x", "", 0.1)}, 8, []fleet.Adapter{a("x", fleet.StageLeaving, 0.1)}},
		{"leaving ones are gone", nil, []fleet.Adapter{a("x", fleet.StageLeaving, 0.1)}, 8, []fleet.Adapter{}},
		{"adding ones dropped are gone", nil, []fleet.Adapter{a("x", fleet.StageAdding, 0.1)}, 8, []fleet.Adapter{}},
		{"leaving ones wanted again are routed", []fleet.Adapter{a("x", "", 0.2)}, []fleet.Adapter{a("x", fleet.StageLeaving, 0.1)}, 8, []fleet.Adapter{a("x", "", 0.2)}},
		{"leaving ones keep their slot under max", []fleet.Adapter{a("y", "", 0.5), a("z", "", 0.3)}, []fleet.Adapter{a("x", "", 0.1)}, 2,
			[]fleet.Adapter{a("x", fleet.StageLeaving, 0.1), a("y", fleet.StageAdding, 0.5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stageAdapters(tc.want, tc.prev, tc.max); !reflect.DeepEqual(got, tc.out) {
				t.Errorf("got %+v, want %+v", got, tc.out)
			}
		})
	}
}

// The status names the replicas whose slots the logged requests in flight
// fill (at least their slots' adapters in flight, the engine's own
// max_lora where it reports one), only where the pool observes load.
func TestAdapterStatusSlotsFull(t *testing.T) {
	f := loadFleet()
	a := fleet.DefaultAdapters()
	a.MaxLoRA = 2
	p := &f.Pools[0]
	p.LoRA = &a
	p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: "10.0.0.3", Port: 8000, Weight: 1, Health: fleet.Healthy, MaxLoRA: 3})
	for i := range p.Endpoints {
		p.Endpoints[i].HashKey = p.Endpoints[i].Address()
	}
	p.Endpoints[0].InFlightAdapters = "law sql"     // 2 of 2: full
	p.Endpoints[1].InFlightAdapters = "sql"         // 1 of 2
	p.Endpoints[2].InFlightAdapters = "law med sql" // 3 of its engine's 3: full
	s := newAdapterState(prometheus.NewRegistry())
	plan := func(string) fleet.Plan { return fleet.Plan{} }
	if got := s.status(f, plan, nil)["docs"].SlotsFull; got != nil {
		t.Errorf("without load observed: slots full %v, want none", got)
	}
	p.LoadAt = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	if got, want := s.status(f, plan, nil)["docs"].SlotsFull, []string{"10.0.0.1:8000", "10.0.0.3:8000"}; !slices.Equal(got, want) {
		t.Errorf("slots full %v, want %v", got, want)
	}
}
