package translate

import (
	"slices"
	"testing"
	"time"

	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"

	"github.com/kvxds/kvxds/fleet"
)

// A pool bounded on prompt bytes gets the pick filter and its slot table
// on Envoy alone, adapters or not; tenant groups keep Envoy's own bound,
// whose override would leave their replicas.
func TestPicks(t *testing.T) {
	bytes := fleet.Hash{BalanceFactor: 150, BalanceOn: fleet.BalanceOnPromptBytes, Keys: []fleet.HashKey{{Header: "x-session-id"}}}
	for _, tc := range []struct {
		name string
		edit func(p *fleet.Pool)
		want bool
	}{
		{"prompt bytes", func(p *fleet.Pool) {}, true},
		{"requests", func(p *fleet.Pool) { p.Hash.BalanceOn = fleet.BalanceOnRequests }, false},
		{"default", func(p *fleet.Pool) { p.Hash.BalanceOn = "" }, false},
		{"adapters", func(p *fleet.Pool) {
			p.LoRA = &fleet.Adapters{Header: "x-kvxds-adapter", BodyField: "model", MaxLoRA: 4, Max: 8}
		}, true},
		{"groups", func(p *fleet.Pool) {
			p.Groups = []fleet.Group{{Name: "acme", Header: "x-tenant-id", Values: []string{"acme"}, Replicas: 1}}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000, Hash: bytes}}
			p.Hash.Keys = []fleet.HashKey{{Header: "x-session-id"}}
			for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
				p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: a, Port: 8000})
			}
			tc.edit(&p)
			m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
			if err != nil {
				t.Fatal(err)
			}
			p = m.Fleet().Pools[0]
			for _, kind := range Kinds {
				l, err := buildListener(&p, kind)
				if err != nil {
					t.Fatal(err)
				}
				hcm, err := httpConnectionManager(&p, kind)
				if err != nil {
					t.Fatal(err)
				}
				filter := false
				for _, f := range hcm.GetHttpFilters() {
					filter = filter || f.GetName() == PickFilterName
				}
				rc, err := buildRoute(&p, &fleet.Plan{}, kind)
				if err != nil {
					t.Fatal(err)
				}
				tables := 0
				routes := rc.GetVirtualHosts()[0].GetRoutes()
				for _, r := range routes {
					if md := r.GetMetadata().GetFilterMetadata()[PickFilterName]; md != nil {
						tables++
						if n := len(md.GetFields()["hosts"].GetListValue().GetValues()); n != 3 {
							t.Errorf("%v: the table names %d hosts, want 3", kind, n)
						}
						if !md.GetFields()["bytes"].GetBoolValue() {
							t.Errorf("%v: the table does not bound on bytes", kind)
						}
					}
				}
				want := tc.want && kind == Envoy
				if filter != want || (tables == len(routes)) != want || (tables == 0) == want {
					t.Errorf("%v (listener %s): pick filter %v, tables on %d of %d routes; want the filter and every route's table: %v",
						kind, l.GetName(), filter, tables, len(routes), want)
				}
			}
		})
	}
}

// preparedDecode is the prepared decode pool of a fleet whose prefill
// pool (two replicas, keyed on x-session-id) has hash settings h.
func preparedDecode(t *testing.T, h fleet.Hash) fleet.Pool {
	t.Helper()
	h.Keys = []fleet.HashKey{{Header: "x-session-id"}}
	prefill := fleet.Pool{Name: "prefill", Settings: fleet.Settings{Port: 10001, Balancer: fleet.ConsistentHash, Hash: h},
		Endpoints: []fleet.Endpoint{{Host: "10.0.1.1", Port: 8000}, {Host: "10.0.1.2", Port: 8000}}}
	decode := fleet.Pool{Name: "decode", Settings: fleet.Settings{Port: 10000, Balancer: fleet.LeastRequest,
		Prefill: &fleet.Prefill{Pool: "prefill", Header: fleet.DefaultPrefillHeader}},
		Endpoints: []fleet.Endpoint{{Host: "10.0.0.1", Port: 8000}}}
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{decode, prefill}})
	if err != nil {
		t.Fatal(err)
	}
	return m.Fleet().Pools[0]
}

// A prefill pool bounding prompt bytes says so in the decode pool's
// prefill table, where the prefill filter reads it; one bounding
// requests does not.
func TestPrefillTableBytes(t *testing.T) {
	for _, on := range []string{"", fleet.BalanceOnRequests, fleet.BalanceOnPromptBytes} {
		t.Run(on, func(t *testing.T) {
			d := preparedDecode(t, fleet.Hash{BalanceFactor: 150, BalanceOn: on})
			md, err := prefillMetadata(&d)
			if err != nil {
				t.Fatal(err)
			}
			f := md.GetFilterMetadata()[PrefillFilterName].GetFields()
			if got, want := f["bytes"].GetBoolValue(), on == fleet.BalanceOnPromptBytes; got != want || f["balance"].GetNumberValue() != 150 {
				t.Errorf("table: bytes %v (want %v), balance %v", got, want, f["balance"].GetNumberValue())
			}
			if Picks(&d, Envoy) {
				t.Error("a decode pool picks its own replicas")
			}
		})
	}
}

// The table of a pool bounding prompt bytes carries each host's
// prefix-cache hit rate in sixteenths, one hex digit per host in hosts
// order, where one is known; one bounding requests, or knowing none,
// carries none.
func TestPickTableCached(t *testing.T) {
	for _, tc := range []struct {
		name   string
		on     string
		cached []uint8
		want   string
	}{
		{"prompt bytes", fleet.BalanceOnPromptBytes, []uint8{0, 15, 9}, "0f9"},
		{"past the last band", fleet.BalanceOnPromptBytes, []uint8{3, 16, 0}, "3f0"},
		{"none known", fleet.BalanceOnPromptBytes, []uint8{0, 0, 0}, ""},
		{"requests", fleet.BalanceOnRequests, []uint8{0, 15, 9}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fleet.Pool{Name: "chat", Settings: fleet.Settings{Port: 10000,
				Hash: fleet.Hash{BalanceFactor: 150, BalanceOn: tc.on, Keys: []fleet.HashKey{{Header: "x-session-id"}}}}}
			// Listed out of address order: the table's is.
			for i, a := range []string{"10.0.0.3", "10.0.0.1", "10.0.0.2"} {
				p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: a, Port: 8000, Cached: tc.cached[(i+2)%3]})
			}
			m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
			if err != nil {
				t.Fatal(err)
			}
			p = m.Fleet().Pools[0]
			md, err := tableMetadata(fleet.NewSlotTable(&p, &fleet.Pool{}), PickFilterName)
			if err != nil {
				t.Fatal(err)
			}
			f := md.GetFilterMetadata()[PickFilterName].GetFields()
			if got := f["cached"].GetStringValue(); got != tc.want {
				t.Errorf("cached %q, want %q", got, tc.want)
			}
		})
	}
}

// A decode pool whose prefill pool bounds prompt bytes with a load
// interval writes the load log, with the prefill header among its
// headers, at the prefill pool's pace, and its prefill filter names
// computed requests; with no interval, or bounding requests, neither.
func TestPrefillLoadLog(t *testing.T) {
	for _, tc := range []struct {
		name     string
		on       string
		interval time.Duration
		want     bool
	}{
		{"bytes with an interval", fleet.BalanceOnPromptBytes, 2 * time.Second, true},
		{"bytes on each filter's own counts", fleet.BalanceOnPromptBytes, 0, false},
		{"requests", fleet.BalanceOnRequests, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := preparedDecode(t, fleet.Hash{BalanceFactor: 150, BalanceOn: tc.on, LoadInterval: tc.interval})
			if got := PrefillLoad(&d, Envoy); got != tc.want || ObservesLoad(&d, Envoy) != tc.want {
				t.Fatalf("PrefillLoad %v, ObservesLoad %v; want %v", got, ObservesLoad(&d, Envoy), tc.want)
			}
			if PrefillLoad(&d, GRPC) {
				t.Error("a gRPC client's decode pool logs load")
			}
			hcm, err := httpConnectionManager(&d, Envoy)
			if err != nil {
				t.Fatal(err)
			}
			var router routerv3.Router
			for _, f := range hcm.GetHttpFilters() {
				if f.GetName() == wellknown.Router {
					if err := f.GetTypedConfig().UnmarshalTo(&router); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := len(router.GetUpstreamLog()) == 1; got != tc.want {
				t.Fatalf("upstream logs %d, want one: %v", len(router.GetUpstreamLog()), tc.want)
			}
			if !tc.want {
				return
			}
			var cfg grpcalsv3.HttpGrpcAccessLogConfig
			if err := router.GetUpstreamLog()[0].GetTypedConfig().UnmarshalTo(&cfg); err != nil {
				t.Fatal(err)
			}
			if got := cfg.GetCommonConfig().GetLogName(); got != LoadLogName("decode") {
				t.Errorf("log name %q", got)
			}
			if got := cfg.GetCommonConfig().GetBufferFlushInterval().AsDuration(); got != 200*time.Millisecond {
				t.Errorf("flushed every %v, want a tenth of the prefill pool's interval", got)
			}
			if hs := cfg.GetAdditionalRequestHeadersToLog(); !slices.Contains(hs, "x-prefiller-host-port") || !slices.Contains(hs, LoadLogComputed) {
				t.Errorf("logged headers %q: want the prefill header and %s", hs, LoadLogComputed)
			}
		})
	}
}
