package weights

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// scrapeTestParse is a stand-in for an engine profile: the page is one number,
// the queue depth.
func scrapeTestParse(body []byte, _ string) (Signals, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(string(body)), 64)
	if err != nil {
		return Signals{}, err
	}
	return Signals{QueueDepth: v}, nil
}

func scrapeTestServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// scrapeHangServer answers nothing until the client gives up or the test ends.
func scrapeHangServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	// Cleanups run last-in first-out: release the handlers, then Close
	// (which waits for them).
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv
}

// scrapeRefusedURL is the address of a closed listener.
func scrapeRefusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/metrics"
}

// scrapeLogBuffer is a log sink safe for concurrent writes.
type scrapeLogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *scrapeLogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *scrapeLogBuffer) lines(substrs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
next:
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if l == "" {
			continue
		}
		for _, s := range substrs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

func TestScrapeOK(t *testing.T) {
	var accept, timeoutHdr atomic.Value
	srv := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		accept.Store(r.Header.Get("Accept"))
		timeoutHdr.Store(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"))
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, "7")
	})
	var gotCT string
	parse := func(body []byte, ct string) (Signals, error) {
		gotCT = ct
		return scrapeTestParse(body, ct)
	}
	s := NewScraper(ScraperOptions{Timeout: 2 * time.Second})
	fixed := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s.now = func() time.Time { return fixed }

	obs := s.Scrape(context.Background(), []Target{{ID: "r1", URL: srv.URL + "/metrics", Parse: parse}})
	if len(obs) != 1 {
		t.Fatalf("got %d observations", len(obs))
	}
	o := obs[0]
	if o.Err != nil || o.ID != "r1" || o.Signals.QueueDepth != 7 || !o.Time.Equal(fixed) {
		t.Fatalf("observation = %+v", o)
	}
	if gotCT != "text/plain; version=0.0.4" {
		t.Errorf("Parse got content type %q", gotCT)
	}
	if accept.Load() != acceptHeader {
		t.Errorf("Accept = %q", accept.Load())
	}
	if timeoutHdr.Load() != "2" {
		t.Errorf("X-Prometheus-Scrape-Timeout-Seconds = %q", timeoutHdr.Load())
	}
}

func TestScrapeFailureKinds(t *testing.T) {
	okSrv := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "1") })
	status := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "engine is starting", http.StatusInternalServerError)
	})
	big := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		page := bytes.Repeat([]byte("x"), 4096)
		if r.URL.Query().Has("chunked") {
			// No Content-Length: the limit must hold while reading.
			for i := 0; i < len(page); i += 512 {
				w.Write(page[i : i+512])
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Write(page)
	})
	garbage := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "not a number") })
	hang := scrapeHangServer(t)

	missing := func([]byte, string) (Signals, error) {
		return Signals{}, &ScrapeError{Kind: FailMissing, Err: errors.New("no vllm:num_requests_waiting")}
	}
	wrappedInvalid := func([]byte, string) (Signals, error) {
		return Signals{}, fmt.Errorf("profile vllm: %w", &ScrapeError{Kind: FailInvalid, Err: errors.New("occupancy 1.5")})
	}
	panicky := func([]byte, string) (Signals, error) { panic("boom") }
	var typedNil *ScrapeError
	nilScrapeErr := func([]byte, string) (Signals, error) { return Signals{}, typedNil }

	cases := []struct {
		name string
		t    Target
		want FailureKind
	}{
		{"timeout", Target{URL: hang.URL, Parse: scrapeTestParse}, FailTimeout},
		{"refused", Target{URL: scrapeRefusedURL(t), Parse: scrapeTestParse}, FailRefused},
		{"status", Target{URL: status.URL, Parse: scrapeTestParse}, FailHTTPStatus},
		{"too large", Target{URL: big.URL, Parse: scrapeTestParse}, FailParse},
		{"too large chunked", Target{URL: big.URL + "?chunked", Parse: scrapeTestParse}, FailParse},
		{"parse error", Target{URL: garbage.URL, Parse: scrapeTestParse}, FailParse},
		{"parse kind kept", Target{URL: okSrv.URL, Parse: missing}, FailMissing},
		{"wrapped parse kind kept", Target{URL: okSrv.URL, Parse: wrappedInvalid}, FailInvalid},
		{"parse panics", Target{URL: okSrv.URL, Parse: panicky}, FailParse},
		{"typed nil ScrapeError", Target{URL: okSrv.URL, Parse: nilScrapeErr}, FailParse},
		{"no parse func", Target{URL: okSrv.URL}, FailOther},
		{"bad URL", Target{URL: "http://[::1", Parse: scrapeTestParse}, FailOther},
		{"unsupported scheme", Target{URL: "gopher://127.0.0.1/", Parse: scrapeTestParse}, FailOther},
	}
	s := NewScraper(ScraperOptions{Timeout: 150 * time.Millisecond, MaxBodyBytes: 1024})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.t.ID = c.name
			start := time.Now()
			obs := s.Scrape(context.Background(), []Target{c.t})
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("scrape took %v", took)
			}
			err := obs[0].Err
			var se *ScrapeError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *ScrapeError", err, err)
			}
			if se.Kind != c.want {
				t.Fatalf("kind = %q, want %q (error: %v)", se.Kind, c.want, err)
			}
			_ = err.Error() // must not panic
		})
	}

	obs := s.Scrape(context.Background(), []Target{{ID: "s", URL: status.URL, Parse: scrapeTestParse}})
	var se *StatusError
	if !errors.As(obs[0].Err, &se) || se.StatusCode != 500 || !strings.Contains(obs[0].Err.Error(), "500") {
		t.Errorf("status error = %v", obs[0].Err)
	}
}

func TestScrapeReusesConnections(t *testing.T) {
	var conns, n atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			http.Error(w, strings.Repeat("overloaded ", 100), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "1")
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	s := NewScraper(ScraperOptions{})
	tg := []Target{{ID: "r", URL: srv.URL, Parse: scrapeTestParse}}
	for range 6 {
		s.Scrape(context.Background(), tg)
	}
	if n.Load() != 6 || conns.Load() != 1 {
		t.Errorf("%d scrapes used %d connections, want 1", n.Load(), conns.Load())
	}
}

func TestScrapeConcurrencyBound(t *testing.T) {
	var inflight, peak atomic.Int32
	srv := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		cur := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		fmt.Fprint(w, "1")
	})
	const workers = 3
	s := NewScraper(ScraperOptions{Workers: workers})
	var targets []Target
	for i := range 24 {
		targets = append(targets, Target{ID: strconv.Itoa(i), URL: srv.URL, Parse: scrapeTestParse})
	}
	for _, o := range s.Scrape(context.Background(), targets) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
	}
	if p := peak.Load(); p > workers || p < 2 {
		t.Errorf("peak in flight = %d, want ≤ %d (and some concurrency)", p, workers)
	}
}

func TestScrapeOrder(t *testing.T) {
	// Later targets answer sooner, so completion order is reversed.
	srv := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		time.Sleep(time.Duration(10-i) * 5 * time.Millisecond)
		fmt.Fprint(w, i)
	})
	var targets []Target
	for i := range 10 {
		targets = append(targets, Target{ID: fmt.Sprint("r", i), URL: fmt.Sprint(srv.URL, "/", i), Parse: scrapeTestParse})
	}
	obs := NewScraper(ScraperOptions{Workers: 10}).Scrape(context.Background(), targets)
	if len(obs) != len(targets) {
		t.Fatalf("got %d observations", len(obs))
	}
	for i, o := range obs {
		if o.ID != targets[i].ID || o.Err != nil || o.Signals.QueueDepth != float64(i) {
			t.Errorf("observation %d = %+v", i, o)
		}
	}
}

func TestScrapeCancelStopsPromptly(t *testing.T) {
	hang := scrapeHangServer(t)
	var logs scrapeLogBuffer
	reg := prometheus.NewPedanticRegistry()
	s := NewScraper(ScraperOptions{
		Workers: 2, Timeout: 10 * time.Second, Registerer: reg,
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs}),
	})
	var targets []Target
	for i := range 10 {
		targets = append(targets, Target{ID: strconv.Itoa(i), URL: hang.URL, Parse: scrapeTestParse})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	obs := s.Scrape(ctx, targets)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Scrape took %v after cancellation", took)
	}
	for i, o := range obs {
		if o.Err == nil || o.ID != targets[i].ID {
			t.Errorf("observation %d = %+v", i, o)
		}
	}
	// Abandoned scrapes say nothing about the replicas.
	if n := testutil.CollectAndCount(s.m.scrapes); n != 0 {
		t.Errorf("%d scrape series after a cancelled cycle", n)
	}
	if l := logs.lines(); len(l) != 0 {
		t.Errorf("logged %q", l)
	}

	// An already cancelled context returns at once.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	for _, o := range s.Scrape(ctx, targets) {
		if !errors.Is(o.Err, context.Canceled) {
			t.Errorf("error = %v", o.Err)
		}
	}
}

func TestScrapeLogsStateChanges(t *testing.T) {
	var mode atomic.Value // "ok", "500" or "garbage"
	mode.Store("ok")
	srv := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
		case "garbage":
			fmt.Fprint(w, "garbage")
		default:
			fmt.Fprint(w, "1")
		}
	})
	var logs scrapeLogBuffer
	s := NewScraper(ScraperOptions{
		Pool:   "gpu",
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}),
	})
	targets := []Target{
		{ID: "a", URL: srv.URL, Parse: scrapeTestParse},
		{ID: "b", URL: scrapeRefusedURL(t), Parse: scrapeTestParse}, // fails from its first scrape
	}
	for _, m := range []string{"ok", "ok", "500", "500", "500", "garbage", "garbage", "ok", "ok", "500"} {
		mode.Store(m)
		s.Scrape(context.Background(), targets)
	}
	warnA := logs.lines("[WARN]", "replica=a")
	if len(warnA) != 3 {
		t.Errorf("replica a: %d warnings, want 3 (fail, kind change, fail again):\n%s", len(warnA), strings.Join(warnA, "\n"))
	}
	if len(warnA) == 3 && (!strings.Contains(warnA[0], "kind=http_status") ||
		!strings.Contains(warnA[1], "kind=parse") || !strings.Contains(warnA[1], "previous_kind=http_status")) {
		t.Errorf("warnings:\n%s", strings.Join(warnA, "\n"))
	}
	info := logs.lines("[INFO]", "replica=a")
	if len(info) != 1 || !strings.Contains(info[0], "metrics recovered after 5 failed scrapes") {
		t.Errorf("recovery lines: %q", info)
	}
	if warnB := logs.lines("[WARN]", "replica=b", "kind=connection_refused"); len(warnB) != 1 {
		t.Errorf("replica b: %d warnings, want 1", len(warnB))
	}
	if all := logs.lines(); len(all) != 5 {
		t.Errorf("%d log lines, want 5:\n%s", len(all), strings.Join(all, "\n"))
	}
	if l := logs.lines("pool=gpu"); len(l) != 5 {
		t.Errorf("%d lines carry the pool", len(l))
	}
}

func TestScrapeMetrics(t *testing.T) {
	okSrv := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "1") })
	status := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	refused := scrapeRefusedURL(t)

	// Two pools share one registry.
	reg := prometheus.NewPedanticRegistry()
	s1 := NewScraper(ScraperOptions{Pool: "p1", Registerer: reg})
	s2 := NewScraper(ScraperOptions{Pool: "p2", Registerer: reg})

	t1 := []Target{
		{ID: "a", URL: okSrv.URL, Parse: scrapeTestParse},
		{ID: "b", URL: status.URL, Parse: scrapeTestParse},
		{ID: "c", URL: refused, Parse: scrapeTestParse},
	}
	s1.Scrape(context.Background(), t1)
	s1.Scrape(context.Background(), t1)
	s2.Scrape(context.Background(), []Target{{ID: "a", URL: okSrv.URL, Parse: scrapeTestParse}})

	want := `
# HELP kvxds_replica_up 1 if the last scrape of the replica's metrics page succeeded, else 0.
# TYPE kvxds_replica_up gauge
kvxds_replica_up{pool="p1",replica="a"} 1
kvxds_replica_up{pool="p1",replica="b"} 0
kvxds_replica_up{pool="p1",replica="c"} 0
kvxds_replica_up{pool="p2",replica="a"} 1
# HELP kvxds_scrapes_total Scrapes of replica metrics pages, by result: ok or the failure kind.
# TYPE kvxds_scrapes_total counter
kvxds_scrapes_total{pool="p1",replica="a",result="ok"} 2
kvxds_scrapes_total{pool="p1",replica="b",result="http_status"} 2
kvxds_scrapes_total{pool="p1",replica="c",result="connection_refused"} 2
kvxds_scrapes_total{pool="p2",replica="a",result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvxds_scrapes_total", "kvxds_replica_up"); err != nil {
		t.Error(err)
	}
	counts := scrapeHistogramCounts(t, reg)
	if counts["p1"] != 6 || counts["p2"] != 1 {
		t.Errorf("duration histogram counts = %v", counts)
	}

	// b and c leave pool p1: their series go; pool p2's a stays.
	s1.Scrape(context.Background(), t1[:1])
	want = `
# HELP kvxds_replica_up 1 if the last scrape of the replica's metrics page succeeded, else 0.
# TYPE kvxds_replica_up gauge
kvxds_replica_up{pool="p1",replica="a"} 1
kvxds_replica_up{pool="p2",replica="a"} 1
# HELP kvxds_scrapes_total Scrapes of replica metrics pages, by result: ok or the failure kind.
# TYPE kvxds_scrapes_total counter
kvxds_scrapes_total{pool="p1",replica="a",result="ok"} 3
kvxds_scrapes_total{pool="p2",replica="a",result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvxds_scrapes_total", "kvxds_replica_up"); err != nil {
		t.Error(err)
	}
	if len(s1.replicas) != 1 {
		t.Errorf("scraper remembers %d replicas, want 1", len(s1.replicas))
	}

	// A failure kind change of one replica adds a series next to the old.
	s1.Scrape(context.Background(), []Target{{ID: "a", URL: status.URL, Parse: scrapeTestParse}})
	if v := testutil.ToFloat64(s1.m.scrapes.WithLabelValues("p1", "a", "http_status")); v != 1 {
		t.Errorf("http_status count = %v", v)
	}
	if v := testutil.ToFloat64(s1.m.up.WithLabelValues("p1", "a")); v != 0 {
		t.Errorf("up = %v", v)
	}

	// Retiring pool p2 drops its replica series only.
	s2.Scrape(context.Background(), nil)
	if n := testutil.CollectAndCount(s1.m.up); n != 1 {
		t.Errorf("%d up series after retiring p2, want 1", n)
	}
	if n := testutil.CollectAndCount(s1.m.scrapes); n != 2 {
		t.Errorf("%d scrape series after retiring p2, want 2", n)
	}
}

func scrapeHistogramCounts(t *testing.T, g prometheus.Gatherer) map[string]uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "kvxds_scrape_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "pool" {
					counts[lp.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return counts
}

func TestScrapeRegisterConflictPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvxds_replica_up", Help: "something else"}))
	defer func() {
		if recover() == nil {
			t.Error("NewScraper did not panic on a conflicting metric")
		}
	}()
	NewScraper(ScraperOptions{Registerer: reg})
}

func TestScrapeOddInputs(t *testing.T) {
	s := NewScraper(ScraperOptions{})
	if obs := s.Scrape(context.Background(), nil); len(obs) != 0 {
		t.Errorf("nil targets: %v", obs)
	}
	obs := s.Scrape(context.Background(), []Target{{}, {ID: "x", URL: "::", Parse: scrapeTestParse}, {ID: "x", URL: "", Parse: scrapeTestParse}})
	for _, o := range obs {
		if KindOf(o.Err) != FailOther {
			t.Errorf("%+v", o)
		}
	}
	// Run returns at once on arguments it cannot use.
	s.Run(context.Background(), 0, 0.1, func() []Target { return nil }, nil)
	s.Run(context.Background(), time.Second, 0.1, nil, nil)
}

func TestScrapeJitterOffset(t *testing.T) {
	const window = 500 * time.Millisecond
	var lo, hi, sum time.Duration = window, 0, 0
	differ := 0
	const n = 1000
	for i := range n {
		id := fmt.Sprint("replica-", i)
		d := jitterOffset(0, id, window)
		if d < 0 || d >= window {
			t.Fatalf("offset %v of %s outside [0, %v)", d, id, window)
		}
		if jitterOffset(0, id, window) != d {
			t.Fatalf("offset of %s is not deterministic", id)
		}
		if jitterOffset(42, id, window) != d {
			differ++
		}
		lo, hi, sum = min(lo, d), max(hi, d), sum+d
	}
	if lo > window/20 || hi < window*19/20 {
		t.Errorf("offsets span [%v, %v] of [0, %v)", lo, hi, window)
	}
	if mean := sum / n; mean < window*2/5 || mean > window*3/5 {
		t.Errorf("mean offset %v", mean)
	}
	if differ < n*9/10 {
		t.Errorf("only %d of %d offsets depend on the seed", differ, n)
	}
	if jitterOffset(0, "x", 0) != 0 || jitterOffset(0, "x", -time.Second) != 0 || jitterOffset(0, "x", 1) != 0 {
		t.Error("empty window must give no offset")
	}
}

func TestScrapeRunCyclesAndJitter(t *testing.T) {
	var mu sync.Mutex
	arrivals := map[string][]time.Time{}
	srv := scrapeTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		id := strings.TrimPrefix(r.URL.Path, "/")
		arrivals[id] = append(arrivals[id], time.Now())
		mu.Unlock()
		fmt.Fprint(w, "1")
	})
	var targets []Target
	for i := range 8 {
		id := fmt.Sprint("r", i)
		targets = append(targets, Target{ID: id, URL: srv.URL + "/" + id, Parse: scrapeTestParse})
	}
	const (
		interval = 200 * time.Millisecond
		jitter   = 0.5
		window   = 100 * time.Millisecond
		cycles   = 3
		slack    = 80 * time.Millisecond // scheduling under -race on a busy machine
	)
	s := NewScraper(ScraperOptions{Workers: 2, JitterSeed: 7})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan []Observation)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		s.Run(ctx, interval, jitter, func() []Target { return targets }, out)
	}()
	for c := range cycles {
		select {
		case obs := <-out:
			if len(obs) != len(targets) {
				t.Fatalf("cycle %d: %d observations", c, len(obs))
			}
			for i, o := range obs {
				if o.ID != targets[i].ID || o.Err != nil {
					t.Errorf("cycle %d observation %d = %+v", c, i, o)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("cycle %d never came", c)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}

	mu.Lock()
	defer mu.Unlock()
	distinct := map[time.Duration]bool{}
	for _, tg := range targets {
		off := jitterOffset(7, tg.ID, window)
		distinct[off] = true
		a := arrivals[tg.ID]
		if len(a) < cycles {
			t.Fatalf("%s scraped %d times", tg.ID, len(a))
		}
		// The first scrape waits for the target's offset, not longer.
		if d := a[0].Sub(start); d < off || d > off+slack {
			t.Errorf("%s: first scrape after %v, offset %v", tg.ID, d, off)
		}
		// Fixed offsets keep a replica's scrapes one interval apart.
		for k := 1; k < len(a); k++ {
			if d := a[k].Sub(a[k-1]); d < interval-slack || d > interval+slack {
				t.Errorf("%s: scrapes %d and %d are %v apart, interval %v", tg.ID, k-1, k, d, interval)
			}
		}
	}
	if len(distinct) < len(targets)/2 {
		t.Errorf("offsets not spread: %v", distinct)
	}
}
