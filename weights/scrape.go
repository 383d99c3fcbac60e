package weights

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// Target is one replica's metrics endpoint.
type Target struct {
	// ID is the replica's stable identity (its hash key).
	ID string
	// URL is the replica's metrics page, e.g. http://10.0.0.7:8000/metrics.
	URL string
	// Domain is the replica's weight domain: the replicas that share its
	// hash table (see StepDomains). The Scraper ignores it.
	Domain string
	// Parse turns a page into signals; the caller binds an engine profile.
	// contentType is the response's Content-Type header. body is only
	// valid until Parse returns: the Scraper reuses its buffer. An error
	// that is (or wraps) a *ScrapeError keeps its Kind; any other error
	// counts as FailParse, and so does a panic.
	Parse func(body []byte, contentType string) (Signals, error)
}

// ScraperOptions configures a Scraper. Zero values mean the defaults.
type ScraperOptions struct {
	// Client fetches the pages. nil means a client whose Transport keeps
	// one idle connection per replica alive between cycles and ignores
	// proxy settings from the environment.
	Client *http.Client
	// Workers bounds the scrapes in flight; default 64.
	Workers int
	// Timeout bounds one fetch, from dial to the page's last byte (Parse
	// is not bounded); default 1s.
	Timeout time.Duration
	// MaxBodyBytes bounds a page (after decompression); a larger page
	// fails with FailParse. Default 4 MiB.
	MaxBodyBytes int64
	// Logger gets one line per replica state change; nil discards.
	Logger hclog.Logger
	// Registerer gets the scrape metrics; nil leaves them unregistered.
	// Scrapers of several pools may share one Registerer: the first
	// registers the metric vectors, the others find them already
	// registered and use them, each writing only its own pool label.
	// Pools sharing a Registerer must have distinct names.
	Registerer prometheus.Registerer
	// Pool is the pool's name: a label on the metrics and a field on the
	// log lines.
	Pool string
	// JitterSeed is mixed into Run's per-target jitter. kvxds instances
	// that scrape the same replicas should use different seeds (e.g. a
	// hash of the host name) so that, should their cycles line up, they
	// still reach a given replica at different moments.
	JitterSeed uint64
}

const (
	defaultWorkers      = 64
	defaultTimeout      = time.Second
	defaultMaxBodyBytes = 4 << 20

	// acceptHeader is what Prometheus sends: OpenMetrics first, then the
	// classic text format. Python's prometheus_client (vLLM, SGLang)
	// answers it with OpenMetrics, so Parse must handle both.
	acceptHeader = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

	// maxDrainBytes is how much of an error page is read to keep its
	// connection; past it, closing the connection is cheaper.
	maxDrainBytes = 64 << 10
)

// Scraper fetches the metrics pages of one pool's replicas. It is safe for
// concurrent use, but calls to Scrape (and Run) on one Scraper should not
// overlap: each call's targets are taken as the pool's whole fleet, and the
// per-replica metric series and log state of replicas not among them are
// dropped. So Scrape(ctx, nil) retires a pool's replica series.
type Scraper struct {
	client     *http.Client
	workers    int
	timeout    time.Duration
	timeoutHdr string
	maxBody    int64
	log        hclog.Logger
	pool       string
	seed       uint64
	m          *scrapeMetrics
	duration   prometheus.Observer

	// now is the clock for Observation.Time; tests replace it.
	now func() time.Time

	bufs sync.Pool // *bytes.Buffer

	mu       sync.Mutex
	replicas map[string]*replicaState
}

// replicaState is what the Scraper remembers of a replica between scrapes,
// so that it logs state changes rather than every scrape.
type replicaState struct {
	failing FailureKind // "" while ok (or before the first scrape)
	fails   int         // consecutive failed scrapes
}

// StatusError is the error of a scrape answered with a non-2xx status; it
// is wrapped in a *ScrapeError of kind FailHTTPStatus.
type StatusError struct {
	StatusCode int
	Status     string // e.g. "503 Service Unavailable"
}

func (e *StatusError) Error() string { return "unexpected HTTP status " + e.Status }

// NewScraper returns a Scraper for one pool. It registers the scrape
// metrics on opts.Registerer (or reuses those another Scraper registered
// there), and panics, like prometheus.MustRegister, if different metrics
// of the same names are already registered.
func NewScraper(opts ScraperOptions) *Scraper {
	s := &Scraper{
		client:   opts.Client,
		workers:  opts.Workers,
		timeout:  opts.Timeout,
		maxBody:  opts.MaxBodyBytes,
		log:      opts.Logger,
		pool:     opts.Pool,
		seed:     opts.JitterSeed,
		now:      time.Now,
		replicas: make(map[string]*replicaState),
	}
	if s.client == nil {
		s.client = &http.Client{Transport: newTransport()}
	}
	if s.workers <= 0 {
		s.workers = defaultWorkers
	}
	if s.timeout <= 0 {
		s.timeout = defaultTimeout
	}
	if s.maxBody <= 0 {
		s.maxBody = defaultMaxBodyBytes
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	} else if s.pool != "" {
		s.log = s.log.With("pool", s.pool)
	}
	// Prometheus's own scrape header, so an exporter can bound its work.
	s.timeoutHdr = strconv.FormatFloat(s.timeout.Seconds(), 'f', -1, 64)
	s.m = newScrapeMetrics(opts.Registerer)
	s.duration = s.m.duration.WithLabelValues(s.pool)
	return s
}

// newTransport is tuned for scraping many replicas every few seconds.
func newTransport() *http.Transport {
	return &http.Transport{
		// Replicas are on the cluster network: an HTTP(S)_PROXY meant
		// for egress must not see their metrics traffic.
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second, // the scrape's context is the real bound
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2: true,
		// No total cap: one idle connection per replica must survive
		// between cycles. The default cap of 100 would make a
		// 1,000-replica pool redial 900 replicas every cycle.
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 2,
		// Longer than any sensible scrape interval.
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		// Compression stays on (Go asks for gzip and decompresses
		// transparently): pages compress ~10x, and MaxBodyBytes bounds
		// the decompressed size.
	}
}

// scrapeMetrics are the Scraper's own metrics. Every vector has a pool
// label, so that the Scrapers of several pools can share one set.
type scrapeMetrics struct {
	scrapes  *prometheus.CounterVec   // pool, replica, result
	duration *prometheus.HistogramVec // pool
	up       *prometheus.GaugeVec     // pool, replica
}

func newScrapeMetrics(reg prometheus.Registerer) *scrapeMetrics {
	m := &scrapeMetrics{
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_scrapes_total",
			Help: "Scrapes of replica metrics pages, by result: ok or the failure kind.",
		}, []string{"pool", "replica", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvxds_scrape_duration_seconds",
			Help:    "Duration of one scrape of a replica metrics page, parsing included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"pool"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_replica_up",
			Help: "1 if the last scrape of the replica's metrics page succeeded, else 0.",
		}, []string{"pool", "replica"}),
	}
	if reg == nil {
		return m
	}
	m.scrapes = registerShared(reg, m.scrapes)
	m.duration = registerShared(reg, m.duration)
	m.up = registerShared(reg, m.up)
	return m
}

// registerShared registers c on reg, or returns the identical collector
// already registered there (by another pool's Scraper).
func registerShared[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("weights: registering scrape metrics: %v", err))
}

// Scrape fetches every target once, concurrently with at most Workers in
// flight, each bounded by Timeout and ctx, and returns one Observation per
// target in the order of targets. Observation.Time is when that scrape
// completed. Every failure is a *ScrapeError.
//
// When ctx ends, the scrapes in flight are abandoned and those not started
// are not started; their Observations carry ctx's error, and they are
// neither counted in the metrics nor logged, as they say nothing of the
// replica.
func (s *Scraper) Scrape(ctx context.Context, targets []Target) []Observation {
	return s.scrape(ctx, targets, time.Time{}, nil)
}

// Run scrapes the targets returned by targets() every interval until ctx
// ends, and sends each cycle's observations on out (it blocks while out is
// full, and does not close it). The first cycle starts at once; a cycle
// that overruns its interval delays the next, and ticks missed meanwhile
// are dropped. A cycle cut short by ctx is not sent.
//
// Within a cycle, each target's scrape starts after a per-target delay in
// [0, jitterFraction×interval), a hash of the target's ID and
// ScraperOptions.JitterSeed. The delays spread a large pool's scrapes over
// the window instead of bursting them (on the replicas' network, and on
// kvxds's CPU and sockets), and, being fixed per replica, they keep each
// replica's scrapes exactly one interval apart, which counter rates rely
// on. Workers start targets in order of their delay, so a worker waits only
// when no target is due. jitterFraction is clamped to [0, 1]; the cycle
// lasts about jitterFraction×interval + Timeout (longer if more than
// Workers replicas are slow at once), which should stay below interval.
func (s *Scraper) Run(ctx context.Context, interval time.Duration, jitterFraction float64, targets func() []Target, out chan<- []Observation) {
	if interval <= 0 || targets == nil {
		return
	}
	if !(jitterFraction > 0) { // also NaN
		jitterFraction = 0
	}
	jitterFraction = min(jitterFraction, 1)
	window := time.Duration(jitterFraction * float64(interval))

	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		start := time.Now()
		ts := targets()
		offsets := make([]time.Duration, len(ts))
		for i, t := range ts {
			offsets[i] = jitterOffset(s.seed, t.ID, window)
		}
		obs := s.scrape(ctx, ts, start, offsets)
		if ctx.Err() != nil {
			return
		}
		select {
		case out <- obs:
		case <-ctx.Done():
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// jitterOffset returns a delay in [0, window) that depends only on seed and
// id: FNV-1a, then a SplitMix64 finaliser so that similar IDs (replica-1,
// replica-2, ...) spread over the whole window.
func jitterOffset(seed uint64, id string, window time.Duration) time.Duration {
	if window <= 0 {
		return 0
	}
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := range 8 {
		h ^= (seed >> (8 * i)) & 0xff
		h *= prime64
	}
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= prime64
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	frac := float64(h>>11) / (1 << 53) // [0, 1)
	d := time.Duration(frac * float64(window))
	if d >= window { // float rounding
		d = window - 1
	}
	return d
}

// scrape is Scrape with optional per-target start offsets from start.
func (s *Scraper) scrape(ctx context.Context, targets []Target, start time.Time, offsets []time.Duration) []Observation {
	obs := make([]Observation, len(targets))
	aborted := make([]bool, len(targets))

	// Dispatch in order of start offset, so that a worker waiting for its
	// target's start never holds back a target that is already due.
	order := make([]int, len(targets))
	for i := range order {
		order[i] = i
	}
	if offsets != nil {
		slices.SortStableFunc(order, func(a, b int) int {
			return cmp.Compare(offsets[a], offsets[b])
		})
	}

	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(s.workers, len(targets)) {
		wg.Go(func() {
			var timer *time.Timer
			defer func() {
				if timer != nil {
					timer.Stop()
				}
			}()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(order) {
					return
				}
				i := order[k]
				if offsets != nil {
					if wait := time.Until(start.Add(offsets[i])); wait > 0 {
						if timer == nil {
							timer = time.NewTimer(wait)
						} else {
							timer.Reset(wait)
						}
						select {
						case <-timer.C:
						case <-ctx.Done():
						}
					}
				}
				if err := ctx.Err(); err != nil {
					obs[i] = Observation{ID: targets[i].ID, Time: s.now(), Err: abortedError(err)}
					aborted[i] = true
					continue
				}
				t0 := time.Now()
				sig, err := s.scrapeOne(ctx, &targets[i])
				if err != nil && ctx.Err() != nil {
					aborted[i] = true
				} else {
					s.duration.Observe(time.Since(t0).Seconds())
				}
				obs[i] = Observation{ID: targets[i].ID, Time: s.now(), Signals: sig, Err: err}
			}
		})
	}
	wg.Wait()
	s.record(targets, obs, aborted)
	return obs
}

func abortedError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &ScrapeError{Kind: FailTimeout, Err: err}
	}
	return &ScrapeError{Kind: FailOther, Err: err}
}

// scrapeOne fetches and parses one page.
func (s *Scraper) scrapeOne(parent context.Context, t *Target) (sig Signals, err error) {
	// A custom Client's RoundTripper could panic; Scrape must not.
	defer func() {
		if r := recover(); r != nil {
			sig, err = Signals{}, &ScrapeError{Kind: FailOther, Err: fmt.Errorf("panic: %v", r)}
		}
	}()
	if t.Parse == nil {
		return Signals{}, &ScrapeError{Kind: FailOther, Err: errors.New("target has no Parse func")}
	}
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return Signals{}, &ScrapeError{Kind: FailOther, Err: err}
	}
	req.Header.Set("Accept", acceptHeader)
	req.Header.Set("User-Agent", "kvxds")
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", s.timeoutHdr)

	resp, err := s.client.Do(req)
	if err != nil {
		return Signals{}, &ScrapeError{Kind: transportKind(ctx, err), Err: err}
	}
	// Closing after reading to EOF returns the connection to the pool.
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBytes))
		return Signals{}, &ScrapeError{Kind: FailHTTPStatus, Err: &StatusError{StatusCode: resp.StatusCode, Status: resp.Status}}
	}
	if resp.ContentLength > s.maxBody {
		// Not drained: closing the connection beats reading megabytes.
		return Signals{}, &ScrapeError{Kind: FailParse, Err: fmt.Errorf("page of %d bytes exceeds the limit of %d", resp.ContentLength, s.maxBody)}
	}

	buf, _ := s.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer func() {
		if int64(buf.Cap()) <= s.maxBody+bytes.MinRead {
			buf.Reset()
			s.bufs.Put(buf)
		}
	}()
	buf.Reset()
	if resp.ContentLength > 0 {
		// +MinRead: ReadFrom wants that much room to see EOF without
		// doubling the buffer.
		buf.Grow(int(resp.ContentLength) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, s.maxBody+1))
	if err != nil {
		return Signals{}, &ScrapeError{Kind: transportKind(ctx, err), Err: fmt.Errorf("reading page: %w", err)}
	}
	if n > s.maxBody {
		return Signals{}, &ScrapeError{Kind: FailParse, Err: fmt.Errorf("page exceeds the limit of %d bytes", s.maxBody)}
	}
	return callParse(t.Parse, buf.Bytes(), resp.Header.Get("Content-Type"))
}

// callParse calls p, keeping the kind of a *ScrapeError it returns and
// turning other errors and panics into FailParse.
func callParse(p func([]byte, string) (Signals, error), body []byte, contentType string) (sig Signals, err error) {
	defer func() {
		if r := recover(); r != nil {
			sig, err = Signals{}, &ScrapeError{Kind: FailParse, Err: fmt.Errorf("panic in Parse: %v", r)}
		}
	}()
	sig, err = p(body, contentType)
	if err == nil {
		return sig, nil
	}
	if se, ok := err.(*ScrapeError); ok && se == nil { // its Error method would panic
		return Signals{}, &ScrapeError{Kind: FailParse, Err: errors.New("Parse returned a nil *ScrapeError")}
	}
	var se *ScrapeError
	if !errors.As(err, &se) || se == nil || se.Kind == "" {
		return Signals{}, &ScrapeError{Kind: FailParse, Err: err}
	}
	switch {
	case se.Err == nil: // its Error method would panic
		return Signals{}, &ScrapeError{Kind: se.Kind, Err: errors.New("no detail")}
	case err == error(se):
		return Signals{}, se
	default:
		return Signals{}, &ScrapeError{Kind: se.Kind, Err: err}
	}
}

// transportKind returns the kind of a transport error. ctx is the scrape's
// own context: once its deadline passed, whatever error the transport made
// of it (a closed connection, a failed read) is a timeout.
func transportKind(ctx context.Context, err error) FailureKind {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return FailRefused
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return FailTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return FailTimeout
	}
	return FailOther
}

// record updates the metrics and log state after a cycle, and forgets
// replicas that are no longer targets.
func (s *Scraper) record(targets []Target, obs []Observation, aborted []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	current := make(map[string]struct{}, len(targets))
	for i, o := range obs {
		current[o.ID] = struct{}{}
		if aborted[i] {
			continue
		}
		st := s.replicas[o.ID]
		if st == nil {
			st = &replicaState{}
			s.replicas[o.ID] = st
		}
		if o.Err == nil {
			s.m.scrapes.WithLabelValues(s.pool, o.ID, "ok").Inc()
			s.m.up.WithLabelValues(s.pool, o.ID).Set(1)
			if st.failing != "" {
				s.log.Info(fmt.Sprintf("metrics recovered after %d failed scrapes", st.fails),
					"replica", o.ID, "failed_scrapes", st.fails)
			}
			st.failing, st.fails = "", 0
			continue
		}
		kind := KindOf(o.Err)
		s.m.scrapes.WithLabelValues(s.pool, o.ID, string(kind)).Inc()
		s.m.up.WithLabelValues(s.pool, o.ID).Set(0)
		st.fails++
		switch st.failing {
		case kind:
		case "":
			s.log.Warn("metrics scrape failing", "replica", o.ID, "url", targets[i].URL, "kind", kind, "error", o.Err)
		default:
			s.log.Warn("metrics scrape failing differently", "replica", o.ID, "url", targets[i].URL,
				"kind", kind, "previous_kind", st.failing, "error", o.Err)
		}
		st.failing = kind
	}
	for id := range s.replicas {
		if _, ok := current[id]; ok {
			continue
		}
		delete(s.replicas, id)
		s.m.scrapes.DeletePartialMatch(prometheus.Labels{"pool": s.pool, "replica": id})
		s.m.up.DeleteLabelValues(s.pool, id)
	}
}
