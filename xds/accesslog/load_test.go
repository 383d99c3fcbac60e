package accesslog

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/inflight"
)

// fakeLoad serves the load of pool "docs", whose requests name adapters
// in x-kvxds-adapter, and records what it is told.
type fakeLoad struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeLoad) LoadPool(name string) (LoadLog, bool) {
	switch name {
	case "docs":
		return LoadLog{Pool: "docs", AdapterHeader: "x-kvxds-adapter"}, true
	case "chat-decode":
		// A decode pool's log: its requests load chat-prefill's replicas.
		return LoadLog{Pool: "chat-prefill", HostHeader: "x-prefiller-host-port"}, true
	}
	return LoadLog{}, false
}

func (f *fakeLoad) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeLoad) Start(stream uint64, pool, key string, a inflight.Attempt) {
	s := fmt.Sprintf("start %d %s %q %s %d %q %s", stream, pool, key, a.Host, a.Bytes, a.Adapter, a.At.Format(time.TimeOnly))
	if a.Key != "" {
		s += fmt.Sprintf(" went %s %v", a.Key, a.Away)
	}
	f.record(s)
}

func (f *fakeLoad) End(stream uint64, pool, key string) {
	f.record(fmt.Sprintf("end %d %s %q", stream, pool, key))
}

func (f *fakeLoad) Computed(stream uint64, pool string, ids []string) {
	f.record(fmt.Sprintf("computed %d %s %q", stream, pool, ids))
}

func (f *fakeLoad) CloseStream(stream uint64) { f.record(fmt.Sprintf("close %d", stream)) }

func loadEntry(typ datav3.AccessLogType, upstream string, attempt uint32, headers map[string]string) *datav3.HTTPAccessLogEntry {
	e := entry("docs", upstream, 8000, headers)
	e.CommonProperties.AccessLogType = typ
	e.CommonProperties.UpstreamRequestAttemptCount = attempt
	return e
}

// TestLoadEntries: the router's load log hands each attempt's start (with
// its content-length) and end to the load sink under one key (request id,
// attempt, upstream), counts what it cannot read, and tells the sink when
// the stream ends.
func TestLoadEntries(t *testing.T) {
	load := &fakeLoad{}
	reg := prometheus.NewRegistry()
	c := serveWith(t, Options{Sink: &fakeSink{}, Load: load, Registerer: reg})

	ready, end := datav3.AccessLogType_UpstreamPoolReady, datav3.AccessLogType_UpstreamEnd
	id := &alsv3.StreamAccessLogsMessage_Identifier{Node: envoyNode("envoy-1"), LogName: "kvxds-load/docs"}
	if err := send(t, c, httpLogs(id,
		loadEntry(ready, "10.0.2.1", 1, map[string]string{"x-request-id": "r1", "content-length": "1200"}),
		// A retry: the second attempt is its own request in flight.
		loadEntry(end, "10.0.2.1", 1, map[string]string{"x-request-id": "r1", "content-length": "1200"}),
		loadEntry(ready, "10.0.2.2", 2, map[string]string{"x-request-id": "r1", "content-length": "1200"}),
		// No content-length: a body of no declared length weighs nothing.
		// An adapter named, and one no filter could have matched.
		loadEntry(ready, "10.0.2.2", 1, map[string]string{"x-request-id": "r2", "x-kvxds-adapter": "sql-v2"}),
		loadEntry(ready, "10.0.2.2", 1, map[string]string{"x-request-id": "r5", "content-length": "9", "x-kvxds-adapter": "two words"}),
		// A request naming earlier ones computed: at most 16 ids, none
		// empty or longer than a request id may be.
		loadEntry(ready, "10.0.2.1", 1, map[string]string{"x-request-id": "r6", "content-length": "3",
			"x-kvxds-computed": "r1,," + strings.Repeat("x", 129) + ",r2,c3,c4,c5,c6,c7,c8,c9,c10,c11,c12,c13,c14,c15,c16,c17"}),
		// Where keys went: home, away, and malformed (none).
		loadEntry(ready, "10.0.2.1", 1, map[string]string{"x-request-id": "w1", "x-kvxds-went": "0123abcd"}),
		loadEntry(ready, "10.0.2.2", 1, map[string]string{"x-request-id": "w2", "x-kvxds-went": "0123abcd*"}),
		loadEntry(ready, "10.0.2.2", 1, map[string]string{"x-request-id": "w3", "x-kvxds-went": "0123ABCD*"}),
		// Malformed: no id, no upstream, a length that is no number.
		loadEntry(ready, "10.0.2.1", 1, map[string]string{"content-length": "5"}),
		loadEntry(ready, "", 1, map[string]string{"x-request-id": "r3"}),
		loadEntry(ready, "10.0.2.1", 1, map[string]string{"x-request-id": "r4", "content-length": "-1"}),
		// A periodic entry is not a start or an end.
		loadEntry(datav3.AccessLogType_UpstreamPeriodic, "10.0.2.1", 1, map[string]string{"x-request-id": "r1"}),
	), httpLogs(nil,
		loadEntry(end, "10.0.2.2", 2, map[string]string{"x-request-id": "r1"}),
	)); err != nil {
		t.Fatal(err)
	}
	// Another pool's load log, which this instance does not count.
	other := &alsv3.StreamAccessLogsMessage_Identifier{Node: envoyNode("envoy-1"), LogName: "kvxds-load/chat"}
	if err := send(t, c, httpLogs(other, loadEntry(ready, "10.0.2.1", 1, map[string]string{"x-request-id": "r9"}))); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`start 1 docs "r1\x001\x0010.0.2.1:8000" 10.0.2.1:8000 1200 "" 10:00:00`,
		`end 1 docs "r1\x001\x0010.0.2.1:8000"`,
		`start 1 docs "r1\x002\x0010.0.2.2:8000" 10.0.2.2:8000 1200 "" 10:00:00`,
		`start 1 docs "r2\x001\x0010.0.2.2:8000" 10.0.2.2:8000 0 "sql-v2" 10:00:00`,
		`start 1 docs "r5\x001\x0010.0.2.2:8000" 10.0.2.2:8000 9 "" 10:00:00`,
		`start 1 docs "r6\x001\x0010.0.2.1:8000" 10.0.2.1:8000 3 "" 10:00:00`,
		`computed 1 docs ["r1" "r2" "c3" "c4" "c5" "c6" "c7" "c8" "c9" "c10" "c11" "c12" "c13" "c14" "c15" "c16"]`,
		`start 1 docs "w1\x001\x0010.0.2.1:8000" 10.0.2.1:8000 0 "" 10:00:00 went 0123abcd false`,
		`start 1 docs "w2\x001\x0010.0.2.2:8000" 10.0.2.2:8000 0 "" 10:00:00 went 0123abcd true`,
		`start 1 docs "w3\x001\x0010.0.2.2:8000" 10.0.2.2:8000 0 "" 10:00:00`,
		`end 1 docs "r1\x002\x0010.0.2.2:8000"`,
		`close 1`,
		`close 2`,
	}
	load.mu.Lock()
	got := slices.Clone(load.calls)
	load.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("load sink got\n%q\nwant\n%q", got, want)
	}
	for result, n := range map[string]float64{ResultLoad: 10, ResultBadLoad: 3, ResultLoadOther: 1, ResultUnknownPool: 1, ResultObserved: 0} {
		if v := testutil.ToFloat64(mustCounter(t, reg, result)); v != n {
			t.Errorf("entries %s = %v, want %v", result, v, n)
		}
	}
}

// TestDecodeLoadEntries: a decode pool's load log counts each request
// against the prefill replica its prefill header names, in the prefill
// pool, from its start to its end or until a later request names it
// computed; a request without the header (prefilled on its decode
// replica) loads none, though the computed ids it carries count.
func TestDecodeLoadEntries(t *testing.T) {
	load := &fakeLoad{}
	reg := prometheus.NewRegistry()
	c := serveWith(t, Options{Sink: &fakeSink{}, Load: load, Registerer: reg})
	ready, end := datav3.AccessLogType_UpstreamPoolReady, datav3.AccessLogType_UpstreamEnd
	id := &alsv3.StreamAccessLogsMessage_Identifier{Node: envoyNode("envoy-1"), LogName: "kvxds-load/chat-decode"}
	if err := send(t, c, httpLogs(id,
		loadEntry(ready, "10.0.3.1", 1, map[string]string{"x-request-id": "d1", "content-length": "5000", "x-prefiller-host-port": "10.0.4.2:8000"}),
		loadEntry(ready, "10.0.3.2", 1, map[string]string{"x-request-id": "d2", "content-length": "40", "x-kvxds-computed": "d1"}),
		loadEntry(end, "10.0.3.2", 1, map[string]string{"x-request-id": "d2"}),
		loadEntry(end, "10.0.3.1", 1, map[string]string{"x-request-id": "d1", "x-prefiller-host-port": "10.0.4.2:8000"}),
		loadEntry(ready, "10.0.3.1", 1, map[string]string{"x-request-id": "d3", "content-length": "9", "x-prefiller-host-port": strings.Repeat("h", 301)}),
	)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`start 1 chat-prefill "d1\x001\x0010.0.3.1:8000" 10.0.4.2:8000 5000 "" 10:00:00`,
		`computed 1 chat-prefill ["d1"]`,
		`end 1 chat-prefill "d1\x001\x0010.0.3.1:8000"`,
		`close 1`,
	}
	load.mu.Lock()
	got := slices.Clone(load.calls)
	load.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("load sink got\n%q\nwant\n%q", got, want)
	}
	for result, n := range map[string]float64{ResultLoad: 3, ResultLoadOther: 2} {
		if v := testutil.ToFloat64(mustCounter(t, reg, result)); v != n {
			t.Errorf("entries %s = %v, want %v", result, v, n)
		}
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kvxds_access_log_entries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no kvxds_access_log_entries_total{result=%q}", result)
	return nil
}
