package status

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)

func num(v float64) *float64 { return &v }

func TestSortReplicas(t *testing.T) {
	rep := func(id string, health Health, queue *float64) Replica {
		return Replica{ID: id, Health: health, QueueDepth: queue}
	}
	in := []Replica{
		rep("a", Serving, num(1)), rep("b", Serving, nil), rep("c", Draining, num(0)), rep("d", Serving, num(7)),
		rep("e", Stale, num(2)), rep("f", Saturated, num(3)), rep("g", Unhealthy, nil), rep("h", Saturated, num(30)), rep("i", Serving, num(7)),
	}
	var got []string
	for _, r := range SortReplicas(in) {
		got = append(got, r.ID)
	}
	if want := "g h f e c d i a b"; strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
	if in[0].ID != "a" {
		t.Error("SortReplicas changed its argument")
	}
}

func TestHealthLevel(t *testing.T) {
	for h, want := range map[Health]Level{
		Serving: OK, Draining: Warn, Stale: Warn, Degraded: Warn, Saturated: Bad, Unhealthy: Bad, "new": Warn,
	} {
		if got := HealthLevel(h); got != want {
			t.Errorf("HealthLevel(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		name       string
		f          func(Format, *float64) string
		v          *float64
		page, text string
	}{
		{"number unknown", Format.Number, nil, "–", "-"},
		{"number whole", Format.Number, num(12), "12", "12"},
		{"number fraction", Format.Number, num(6.25), "6.2", "6.25"},
		{"percent unknown", Format.Percent, nil, "–", "-"},
		{"percent", Format.Percent, num(0.8312), "83.1%", "83.1%"},
		{"percent whole", Format.Percent, num(1), "100.0%", "100.0%"},
		{"seconds unknown", Format.Seconds, nil, "–", "-"},
		{"seconds below one", Format.Seconds, num(0.0704), "70 ms", "70ms"},
		{"seconds", Format.Seconds, num(1.234), "1.23 s", "1.23s"},
	} {
		if got := tc.f(PageFormat, tc.v); got != tc.page {
			t.Errorf("%s: page %q, want %q", tc.name, got, tc.page)
		}
		if got := tc.f(TextFormat, tc.v); got != tc.text {
			t.Errorf("%s: text %q, want %q", tc.name, got, tc.text)
		}
	}
}

func TestAgo(t *testing.T) {
	now := t0
	for _, tc := range []struct {
		name       string
		t          time.Time
		page, text string
	}{
		{"zero", time.Time{}, "", ""},
		{"future", now.Add(time.Minute), "just now", "just now"},
		{"now", now.Add(-400 * time.Millisecond), "just now", "just now"},
		{"rounds up to a second", now.Add(-600 * time.Millisecond), "1s ago", "just now"},
		{"seconds", now.Add(-42 * time.Second), "42s ago", "42s ago"},
		{"minutes", now.Add(-192 * time.Second), "3m12s ago", "3m ago"},
		{"hours", now.Add(-47 * time.Hour), "47h0m0s ago", "47h ago"},
		{"days", now.Add(-72 * time.Hour), "72h0m0s ago", "3d ago"},
	} {
		if got := PageFormat.Ago(now, tc.t); got != tc.page {
			t.Errorf("%s: page %q, want %q", tc.name, got, tc.page)
		}
		if got := TextFormat.Ago(now, tc.t); got != tc.text {
			t.Errorf("%s: text %q, want %q", tc.name, got, tc.text)
		}
	}
}

func TestDataPlaneSync(t *testing.T) {
	st := &Status{Served: map[string]map[string]string{"envoy": {"cds": "c2", "eds": "e2", "lds": "l1", "rds": "r1"}}}
	all := map[string]string{"cds": "c2", "eds": "e2", "lds": "l1", "rds": "r1"}
	nack := &NACK{Type: "cds", Version: "c2", Message: "bad cluster"}
	for _, tc := range []struct {
		name  string
		dp    DataPlane
		level Level
		text  string
	}{
		{"in sync", DataPlane{Kind: "envoy", ACKed: all}, OK, "in sync"},
		{"waiting", DataPlane{Kind: "envoy"}, Warn, "waiting for its first ACK"},
		{"behind", DataPlane{Kind: "envoy", ACKed: map[string]string{"cds": "c1", "eds": "e2", "lds": "l1"}}, Warn, "behind: cds, rds"},
		{"rejecting", DataPlane{Kind: "envoy", ACKed: map[string]string{"cds": "c1", "eds": "e2", "lds": "l1", "rds": "r1"}, LastNACK: nack}, Bad, "rejecting cds"},
		{"rejected, since accepted", DataPlane{Kind: "envoy", ACKed: all, LastNACK: nack}, OK, "in sync"},
		{"kind not served", DataPlane{Kind: "grpc", ACKed: all}, OK, "in sync"},
	} {
		s := st.DataPlaneSync(&tc.dp)
		if s.Level != tc.level || s.String() != tc.text {
			t.Errorf("%s: %v %q, want %v %q", tc.name, s.Level, s.String(), tc.level, tc.text)
		}
		if (s.Rejected != nil) != (tc.level == Bad) {
			t.Errorf("%s: rejected %v", tc.name, s.Rejected)
		}
	}
}

func TestMovedLines(t *testing.T) {
	now := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	if got := TextFormat.MovedLines(now, "chat", nil); got != nil {
		t.Errorf("nil: %q", got)
	}
	m := &Moved{
		Last: &MovedPush{Time: now.Add(-2 * time.Minute), Cause: CauseWeight, Replicas: 1, Shares: []MovedShare{
			{Table: "chat", Clients: []string{"envoy"}, Own: 0.0042, Collateral: 0.0019},
			{Table: "chat", Clients: []string{"grpc", "grpc-js"}, Own: 0.0042},
			{Table: "chat/group/acme", Clients: []string{"envoy", "grpc"}, Own: 0.5},
		}},
		Pushes1h: 3,
		Total1h: []MovedShare{{Table: "chat", Clients: []string{"envoy", "grpc", "grpc-js"}, Own: 0.1, Collateral: 0.002,
			ByCause: map[string]float64{CauseWeight: 0.03, CauseMembership: 0.072}}},
	}
	want := []string{
		"last push (weight move, 1 replica, 2m ago) cost envoy 0.61% of sessions (own 0.42%, collateral 0.19%); grpc, grpc-js 0.42% (own 0.42%, collateral 0%); in group acme: envoy, grpc 50.00% (own 50.00%, collateral 0%)",
		"last hour (3 pushes) cost envoy, grpc, grpc-js 10.20% of sessions (own 10.00%, collateral 0.20%; by cause: membership 7.20%, weight 3.00%)",
	}
	if got := TextFormat.MovedLines(now, "chat", m); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	m.Pushes1h, m.Total1h = 0, nil
	if got := TextFormat.MovedLines(now, "chat", m); got[1] != "last hour: no push" {
		t.Errorf("no push in the hour: %q", got[1])
	}
}

func TestRole(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ha            HA
		role, trouble string
	}{
		{"standalone", HA{Mode: "standalone", Leading: true, Reachable: true}, "standalone", ""},
		{"no mode", HA{}, "standalone", ""},
		{"leading", HA{Mode: "kubernetes lease infra/kvxds", Leading: true, Leader: "kvxds-0", Term: 3, Reachable: true},
			"kubernetes lease infra/kvxds, leading (term 3)", ""},
		{"following", HA{Mode: "kubernetes lease infra/kvxds", Leader: "kvxds-1", Term: 3, Reachable: true},
			"kubernetes lease infra/kvxds, following kvxds-1", ""},
		{"following nobody yet", HA{Mode: "kubernetes lease infra/kvxds", Reachable: true},
			"kubernetes lease infra/kvxds, following nobody yet", ""},
		{"unreachable", HA{Mode: "following http://kvxds-0:19000", Leader: "kvxds-0", Error: "connection refused"},
			"following http://kvxds-0:19000, following kvxds-0", "unreachable: connection refused"},
		{"unreachable, no error", HA{Mode: "kubernetes lease infra/kvxds"},
			"kubernetes lease infra/kvxds, following nobody yet", "unreachable"},
		// A leader's own reachability is not the followers' trouble.
		{"leading, unreachable", HA{Mode: "kubernetes lease infra/kvxds", Leading: true, Term: 2, Error: "timeout"},
			"kubernetes lease infra/kvxds, leading (term 2)", ""},
		{"standalone, followers report", HA{Mode: "standalone", Leading: true, Reachable: true, LoadReporters: 2},
			"standalone, adding the load of 2 other instances", ""},
		{"leading, one reports", HA{Mode: "kubernetes lease infra/kvxds", Leading: true, Term: 3, Reachable: true, LoadReporters: 1},
			"kubernetes lease infra/kvxds, leading (term 3), adding the load of 1 other instance", ""},
		{"following, reports fail", HA{Mode: "kubernetes lease infra/kvxds", Leader: "kvxds-1", Reachable: true,
			LoadReportsTo: "http://10.0.0.5:19000", LoadReportError: "401 Unauthorized"},
			"kubernetes lease infra/kvxds, following kvxds-1", "cannot report its load to http://10.0.0.5:19000: 401 Unauthorized"},
		{"unreachable, reports fail", HA{Mode: "following http://a:19000", Leader: "a", Error: "refused",
			LoadReportsTo: "http://a:19000", LoadReportError: "refused"},
			"following http://a:19000, following a", "unreachable: refused; cannot report its load to http://a:19000: refused"},
	} {
		if role, trouble := tc.ha.Role(); role != tc.role || trouble != tc.trouble {
			t.Errorf("%s: %q, %q; want %q, %q", tc.name, role, trouble, tc.role, tc.trouble)
		}
	}
}

// The pool sentences with every figure the status may lack left out.
func TestPoolSentences(t *testing.T) {
	rule := DefaultHotspotRule
	const ruleText = " (rule: balance above 2, hit rate at least 0.5, busiest queue at least 2)"
	const note = "too little load to compare: the busiest replica queues 1 on average (balance needs 2)"
	for _, tc := range []struct {
		name                    string
		pool                    Pool
		balancePage, balanceTxt string
		hotspot                 string
	}{
		{"figures known", Pool{Balance: num(1.824), HitRate1m: num(0.72)}, "1.82", "1.82", ""},
		{"hotspot", Pool{Balance: num(2.64), HitRate1m: num(0.8312), Hotspot: true}, "2.64", "2.64",
			"the busiest replica queues 2.6× the mean while the hit rate is 83.1%" + ruleText},
		{"no balance, a note", Pool{BalanceNote: note, HitRate1m: num(0.72)}, "– (" + note + ")", "- (" + note + ")", ""},
		{"no balance, no note", Pool{}, "–", "-", ""},
		{"hotspot without its balance", Pool{HitRate1m: num(0.9), Hotspot: true}, "–", "-",
			"the hit rate is 90.0%" + ruleText},
		{"hotspot without its hit rate", Pool{Balance: num(3), Hotspot: true}, "3.00", "3.00",
			"the busiest replica queues 3.0× the mean" + ruleText},
		{"hotspot without figures", Pool{Hotspot: true}, "–", "-", "flagged without its figures" + ruleText},
	} {
		if got := PageFormat.Balance(&tc.pool); got != tc.balancePage {
			t.Errorf("%s: page balance %q, want %q", tc.name, got, tc.balancePage)
		}
		if got := TextFormat.Balance(&tc.pool); got != tc.balanceTxt {
			t.Errorf("%s: text balance %q, want %q", tc.name, got, tc.balanceTxt)
		}
		for _, f := range []Format{PageFormat, TextFormat} {
			if got := f.Hotspot(rule, &tc.pool); got != tc.hotspot {
				t.Errorf("%s: hotspot %q, want %q", tc.name, got, tc.hotspot)
			}
		}
	}
}

func TestReplicaNote(t *testing.T) {
	now := t0
	failed := &Scrape{Time: now.Add(-192 * time.Second), Error: "connection refused"}
	for _, tc := range []struct {
		name       string
		r          Replica
		page, text string
	}{
		{"serving", Replica{Health: Serving, LastScrape: &Scrape{Time: now, OK: true}}, "", ""},
		{"nothing known", Replica{}, "", ""},
		{"serving keeps a stray reason to itself", Replica{Health: Serving, Reason: "calm"}, "", ""},
		{"saturated", Replica{Health: Saturated, Reason: "queue depth 12 ≥ 8"}, "queue depth 12 ≥ 8", "queue depth 12 ≥ 8"},
		{"stale, scrape failed", Replica{Health: Stale, Reason: "metrics older than 10s", LastScrape: failed},
			"metrics older than 10s; last scrape failed 3m12s ago: connection refused",
			"metrics older than 10s; last scrape failed 3m ago: connection refused"},
		{"scrape failed, no time or error", Replica{Health: Serving, LastScrape: &Scrape{}}, "last scrape failed", "last scrape failed"},
		{"page lacks", Replica{Health: Draining, SignalsMissing: []string{"kv_occupancy", "ttft"}},
			"page lacks kv_occupancy, ttft", "page lacks kv_occupancy, ttft"},
	} {
		if got := PageFormat.ReplicaNote(now, &tc.r); got != tc.page {
			t.Errorf("%s: page %q, want %q", tc.name, got, tc.page)
		}
		if got := TextFormat.ReplicaNote(now, &tc.r); got != tc.text {
			t.Errorf("%s: text %q, want %q", tc.name, got, tc.text)
		}
	}
}

func TestCountHealth(t *testing.T) {
	var reps []Replica
	for _, h := range []Health{Serving, "warming", Saturated, Serving, "booting", Stale, "booting"} {
		reps = append(reps, Replica{Health: h})
	}
	want := []HealthCount{{Saturated, 1}, {Stale, 1}, {Serving, 2}, {"booting", 2}, {"warming", 1}}
	if got := CountHealth(reps); !slices.Equal(got, want) {
		t.Errorf("CountHealth = %v, want %v", got, want)
	}
	if got := CountHealth(nil); got != nil {
		t.Errorf("CountHealth(nil) = %v", got)
	}
}

func TestHotKeyLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *HotKeys
		want []string
	}{
		{"off", nil, nil},
		{"nothing logged", &HotKeys{Keys: []HotKey{}, Away: map[string]uint64{}}, []string{"hot keys: none"}},
		{"none hot", &HotKeys{Keys: []HotKey{}, Requests: 400, Away: map[string]uint64{AwayFollow: 2, AwayBound: 4}}, []string{
			"hot keys of 400 keyed requests logged: none",
			"away from their key's first replica: 1.5% (spread 0.0%, escape 0.0%, followed 0.5%, bound 1.0%)",
		}},
		{"two hot", &HotKeys{
			Keys: []HotKey{
				{Key: 0, KeyName: "header x-tenant", Value: "3f2a9c1b", Share: 0.48, Spread: 64, Why: HotShare},
				{Key: 1, KeyName: "prompt_prefix", Value: "0123456789abcdef", Share: 0.125, Spread: 2, Why: HotReplica},
				{Key: 0, KeyName: "header x-tenant", Value: "acme", Share: 1, Spread: 128, Why: HotDeclared},
			},
			Requests: 1200, Away: map[string]uint64{AwaySpread: 48, AwayEscape: 12},
		}, []string{
			"hot keys of 1200 keyed requests logged: 3f2a9c1b (header x-tenant) 48.0% spread over 64; 0123456789abcdef (prompt_prefix) 12.5% spread over 2 for its replica; acme (header x-tenant) 100.0% spread over 128 (declared)",
			"away from their key's first replica: 5.0% (spread 4.0%, escape 1.0%, followed 0.0%, bound 0.0%)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TextFormat.HotKeyLines(tc.h); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestAdapterLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *Adapters
		want []string
	}{
		{"off", nil, nil},
		{"nothing yet", &Adapters{Header: "x-kvxds-adapter", Adapters: []Adapter{}, Moves: map[string]uint64{}}, []string{
			"adapters (x-kvxds-adapter): 0 placed; moves: demand 0, membership 0, capacity 0",
		}},
		{"placed", &Adapters{
			Header: "x-kvxds-adapter", Requests: 1200, AdapterRequests: 480, EnginesReporting: 4,
			Adapters: []Adapter{
				{Name: "sql-lora", Replicas: 2, Share: 0.3, InFlight: 2, Members: []AdapterMember{{"r-1", "healthy"}, {"r-3", "draining"}, {"r-4", "healthy"}}},
				{Name: "fr", Replicas: 1, Share: 0.01, OverCapacity: true, Members: []AdapterMember{{"r-2", "healthy"}}},
			},
			Moves:     map[string]uint64{MoveDemand: 2, MoveMembership: 1},
			Rejected:  map[string]uint64{"not_string": 3, "too_long": 1},
			Overfull:  []string{"r-2"},
			SlotsFull: []string{"r-1", "r-2"},
			GRPCJS:    AdaptersGRPCJS,
		}, []string{
			"adapters (x-kvxds-adapter) of 1200 requests logged, 40.0% naming one: 2 placed; moves: demand 2, membership 1, capacity 0",
			"sql-lora 30.0% on 2 replicas: r-1, r-3 (draining), r-4; in flight on 2",
			"fr 1.0% on 1 replicas: r-2; in flight on 0; TAIL: no slot of its own, shares its replica's tail slots",
			"adapter fields rejected: not_string 3, too_long 1",
			"OVERFULL: more adapters in flight than max_lora on r-2",
			"slots full (Envoys' requests in flight): r-1, r-2; a request naming another adapter waits there",
			"grpc-js hashes adapter requests over the whole pool (no adapter clusters)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TextFormat.AdapterLines(tc.a); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestPrefillLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *Prefill
		want []string
	}{
		{"off", nil, nil},
		{"no prefill replica", &Prefill{Pool: "chat-prefill", Header: "x-prefiller-host-port", Hosts: []PrefillHost{}}, []string{
			"prefill on pool chat-prefill (x-prefiller-host-port): NO prefill replica serves: decode replicas prefill every request",
		}},
		{"serving", &Prefill{Pool: "chat-prefill", Header: "x-prefiller-host-port", MinBodyBytes: 2048, Slots: 1024,
			Hosts:    []PrefillHost{{"10.0.1.2:8000", 520}, {"10.0.1.1:8000", 504}},
			Requests: 120, Remote: 100, Unknown: 2, Keyed: 80, Away: map[string]uint64{AwaySpread: 2, AwayBound: 6},
			Pairs: []PrefillPair{{"10.0.0.1:8000", "10.0.1.1:8000", 40}, {"10.0.0.1:8000", "10.0.1.2:8000", 10}, {"10.0.0.2:8000", "10.0.1.2:8000", 50}},
		}, []string{
			"prefill on pool chat-prefill (x-prefiller-host-port, bodies of 2048 bytes and more): 2 replicas in 1024 slots; 120 requests logged: 100 remote, 18 local, 2 unknown",
			"prefill slots: 10.0.1.2:8000 520, 10.0.1.1:8000 504",
			"prefilled away from their key's replica: 10.0% of 80 keyed (spread 2.5%, followed 0.0%, bound 7.5%)",
			"decode 10.0.0.1:8000 prefilled on: 10.0.1.1:8000 40, 10.0.1.2:8000 10",
			"decode 10.0.0.2:8000 prefilled on: 10.0.1.2:8000 50",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TextFormat.PrefillLines(tc.p); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
