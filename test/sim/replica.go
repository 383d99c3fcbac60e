package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// Stats is a snapshot of a replica's engine counters and state. Token
// counts are tokens, times are simulated seconds.
type Stats struct {
	ID string

	// PrefixQueries and PrefixHits are vllm:prefix_cache_queries_total and
	// vllm:prefix_cache_hits_total: prompt tokens looked up, and tokens found
	// cached, at each request's first admission.
	PrefixQueries int64
	PrefixHits    int64
	// PreemptedQueries and PreemptedHits are the same for re-admissions
	// after preemption, which vLLM keeps apart and does not export.
	PreemptedQueries int64
	PreemptedHits    int64

	Preemptions      int64 // vllm:num_preemptions_total
	PromptTokens     int64 // vllm:prompt_tokens_total
	GenerationTokens int64 // vllm:generation_tokens_total
	RequestsDone     int64 // requests finished normally (finish reason "length")
	RequestsAborted  int64 // requests whose client went away
	Steps            int64 // engine steps run

	// LoRASwapIns counts adapters loaded into a slot (sim:lora_swap_ins_total),
	// LoRAEvictions those unloaded to make room (sim:lora_evictions_total).
	LoRASwapIns   int64
	LoRAEvictions int64
	// LoRASlotWaits counts requests admitted after being passed over for
	// a slot (sim:lora_slot_waits_total), LoRASlotWaitSeconds their waits.
	LoRASlotWaits       int64
	LoRASlotWaitSeconds float64
	// ExternalQueries and ExternalHits are vllm:external_prefix_cache_*
	// of a replica with a P/D role: prompt tokens not found in its own
	// cache at first admission, and those of them it received from a
	// prefill replica.
	ExternalQueries int64
	ExternalHits    int64
	// RemotePrefills counts requests prefilled on a prefill replica
	// (sim:pd_remote_prefills_total), LocalPrefills those a decode replica
	// prefilled itself (sim:pd_local_prefills_total, both reasons), of
	// which LocalPrefillsFailed because the prefill replica failed, and
	// TransferredTokens the prompt tokens whose KV it received
	// (sim:pd_transferred_tokens_total).
	RemotePrefills      int64
	LocalPrefills       int64
	LocalPrefillsFailed int64
	TransferredTokens   int64

	// LoRALoaded lists the adapters holding a slot now, sorted.
	LoRALoaded []string
	// LoRAInFlight lists the adapters with a request waiting or running,
	// in the order each first arrived, and MaxLoRA is the engine's slots:
	// what the newest series of vllm:lora_requests_info says now (its
	// running_lora_adapters and waiting_lora_adapters both hold the
	// in-flight list, as vLLM writes them, and max_lora the slots).
	LoRAInFlight []string
	MaxLoRA      int

	Waiting      int     // vllm:num_requests_waiting
	Running      int     // vllm:num_requests_running
	KVUsage      float64 // vllm:kv_cache_usage_perc: 1 − free/total
	CachedBlocks int     // blocks holding a reusable prefix block
	SimTime      float64 // the engine's clock

	// MaxLag is the largest delay, in simulated seconds, between the wall
	// clock (× TimeScale) and the engine's clock when a step was due: how
	// far the loop fell behind. A few milliseconds are timer granularity;
	// more means TimeScale is too high for the CPU, so client-side
	// latencies stretch, though the engine's own numbers stay exact.
	MaxLag float64
}

// HitRate is PrefixHits / PrefixQueries (0 without queries).
func (s Stats) HitRate() float64 {
	if s.PrefixQueries == 0 {
		return 0
	}
	return float64(s.PrefixHits) / float64(s.PrefixQueries)
}

// Replica is one simulated inference server: an engine and its scheduler
// loop, and one listener serving the OpenAI HTTP API, /metrics and gRPC.
type Replica struct {
	cfg   Config
	ln    net.Listener
	srv   *http.Server
	grpc  *grpc.Server
	wall0 time.Time
	// reqSeq numbers completion ids.
	reqSeq atomic.Uint64

	mu     sync.Mutex
	e      *engine
	m      *metrics
	closed bool
	maxLag float64

	notify    chan struct{} // new work for an idle loop
	quit      chan struct{}
	loopDone  chan struct{}
	closeOnce sync.Once
	serveErr  chan error
	// extra are ListenGRPC's listeners, closed with the replica.
	extra []interface{ Close() error }

	// pd is a decode replica's clients of prefill replicas.
	pd pdClients
}

// errClosed ends requests still in flight when the replica closes.
var errClosed = errors.New("replica closed")

// Start runs a replica serving on addr (e.g. "127.0.0.1:0"). One port
// carries HTTP/1.1 and HTTP/2 with prior knowledge (h2c); HTTP/2 requests
// with a gRPC content type go to the gRPC server, the rest to the OpenAI API
// and /metrics.
func Start(cfg Config, addr string) (*Replica, error) {
	if err := cfg.withDefaults().validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r, err := Serve(cfg, ln)
	if err != nil {
		ln.Close()
	}
	return r, err
}

// Serve runs a replica on a listener the caller opened (one inside a
// network namespace, say), as Start does; the replica closes it. On error
// the listener is left open.
func Serve(cfg Config, ln net.Listener) (*Replica, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Replica{
		cfg:      cfg,
		ln:       ln,
		wall0:    time.Now(),
		notify:   make(chan struct{}, 1),
		quit:     make(chan struct{}),
		loopDone: make(chan struct{}),
		serveErr: make(chan error, 1),
	}
	r.pd.http = newPDHTTPClient(cfg)
	r.m = newMetrics(cfg, r)
	r.e = newEngine(cfg, r.m)
	r.e.unixAt = func(t float64) float64 { return float64(r.wallAt(t).UnixNano()) / 1e9 }

	r.grpc = grpc.NewServer()
	testpb.RegisterTestServiceServer(r.grpc, &testService{r: r})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(r.grpc, hs)

	api := r.httpHandler()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	r.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.ProtoMajor == 2 && strings.HasPrefix(req.Header.Get("Content-Type"), "application/grpc") {
				r.grpc.ServeHTTP(w, req)
				return
			}
			api.ServeHTTP(w, req)
		}),
		Protocols:         &protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 4096},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { r.serveErr <- r.srv.Serve(ln) }()
	go r.loop()
	return r, nil
}

// StartFleet starts n replicas named "replica-0" … on 127.0.0.1:0, all
// with cfg (whose ID is ignored). On error it closes those it started.
func StartFleet(n int, cfg Config) ([]*Replica, error) {
	fleet := make([]*Replica, 0, n)
	for i := 0; i < n; i++ {
		c := cfg
		c.ID = fmt.Sprintf("replica-%d", i)
		r, err := Start(c, "127.0.0.1:0")
		if err != nil {
			for _, s := range fleet {
				s.Close()
			}
			return nil, err
		}
		fleet = append(fleet, r)
	}
	return fleet, nil
}

// ID is the replica's id.
func (r *Replica) ID() string { return r.cfg.ID }

// Config is the replica's configuration with defaults filled in.
func (r *Replica) Config() Config { return r.cfg }

// Addr is the address the replica listens on, host:port.
func (r *Replica) Addr() string { return r.ln.Addr().String() }

// Close stops the replica: in-flight requests fail, the listener and every
// connection close. It is safe to call more than once.
func (r *Replica) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		close(r.quit)
		<-r.loopDone
		r.mu.Lock()
		r.e.fail(errClosed)
		extra := r.extra
		r.mu.Unlock()
		for _, l := range extra {
			l.Close()
		}
		r.pd.close()
		r.grpc.Stop()
		err = r.srv.Close()
		if serr := <-r.serveErr; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	})
	return err
}

// Shutdown stops the replica gracefully, as an engine does on SIGTERM: it
// stops accepting connections, tells its clients to go away (HTTP/2
// GOAWAY), lets the requests in flight stream to their end, then closes.
// If ctx ends first, it closes at once, failing what is left.
func (r *Replica) Shutdown(ctx context.Context) error {
	err := r.srv.Shutdown(ctx)
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	return err
}

// Stats returns a snapshot of the engine's counters and state.
func (r *Replica) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.e.snapshot()
	s.ID = r.cfg.ID
	s.MaxLag = r.maxLag
	return s
}

func (r *Replica) gaugeValues() (running, waiting int, kvUsage float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.e.running), len(r.e.waiting), r.e.cache.Usage()
}

// simNow is the simulated time that corresponds to now on the wall clock.
func (r *Replica) simNow() float64 {
	return time.Since(r.wall0).Seconds() * r.cfg.TimeScale
}

// wallAt is the wall time of simulated time t.
func (r *Replica) wallAt(t float64) time.Time {
	return r.wall0.Add(time.Duration(t / r.cfg.TimeScale * float64(time.Second)))
}

// loop is the replica's only goroutine of its own. Each turn it completes
// the step in flight, plans the next one and sleeps until that step's end
// on the wall clock (simulated end / TimeScale). Idle, it blocks until a
// request arrives. The engine clock advances by exactly the modelled step
// durations; when the loop falls behind the wall clock (timer granularity at
// a large TimeScale, a busy CPU) it runs the next steps without sleeping
// until it has caught up, so the simulated latencies do not drift.
func (r *Replica) loop() {
	defer close(r.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	r.mu.Lock()
	for {
		if len(r.e.batch) > 0 {
			r.e.complete()
		}
		if len(r.e.running) > 0 {
			// A step is due now; the wall clock may have run ahead.
			if lag := r.simNow() - r.e.now; lag > r.maxLag {
				r.maxLag = lag
			}
		}
		if !r.e.plan() {
			r.mu.Unlock()
			select {
			case <-r.notify:
			case <-r.quit:
				return
			}
			r.mu.Lock()
			continue
		}
		end := r.wallAt(r.e.stepEnd)
		r.mu.Unlock()
		if d := time.Until(end); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-r.quit:
				return
			}
		} else {
			select {
			case <-r.quit:
				return
			default:
			}
		}
		r.mu.Lock()
	}
}

// submit hands a tokenized prompt to the engine, to run under a LoRA
// adapter ("" for the base model).
func (r *Replica) submit(prompt []int, maxTokens int, adapter string) (*request, error) {
	q, err := r.newRequest(prompt, maxTokens, adapter)
	if err != nil {
		return nil, err
	}
	if err := r.enqueue(q); err != nil {
		return nil, err
	}
	return q, nil
}

// newRequest checks and builds a request, not yet handed to the engine.
func (r *Replica) newRequest(prompt []int, maxTokens int, adapter string) (*request, error) {
	if len(prompt) == 0 {
		return nil, errors.New("the prompt is empty")
	}
	if maxTokens < 1 {
		return nil, fmt.Errorf("max_tokens must be at least 1, got %d", maxTokens)
	}
	bs := r.cfg.BlockSize
	total := len(prompt) + maxTokens
	if !r.e.fits(len(prompt), maxTokens) {
		return nil, fmt.Errorf("this request needs %d tokens of KV but the replica holds only %d (%d blocks of %d)",
			total-1, r.cfg.KVBlocks*bs, r.cfg.KVBlocks, bs)
	}
	root := AdapterRoot(adapter)
	q := &request{
		tokens:    make([]int, len(prompt), total),
		hashes:    AppendAdapterBlockHashes(make([]BlockHash, 0, total/bs+1), root, prompt, bs),
		promptLen: len(prompt),
		maxTokens: maxTokens,
		seed:      promptSeed(prompt),
		adapter:   adapter,
		root:      root,
		out:       newOutput(len(prompt)),
	}
	copy(q.tokens, prompt)
	return q, nil
}

// enqueue hands q to the engine, arriving now.
func (r *Replica) enqueue(q *request) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return errClosed
	}
	q.arrival = max(r.simNow(), r.e.now)
	r.e.enqueue(q)
	r.mu.Unlock()
	r.wake()
	return nil
}

// wake tells an idle loop that there is work.
func (r *Replica) wake() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// abort withdraws a request whose client went away.
func (r *Replica) abort(q *request) {
	r.mu.Lock()
	r.e.abort(q)
	r.mu.Unlock()
}

// follow calls emit with each batch of newly generated tokens (indexes into
// outputWords) until the request finishes, and returns its result. If ctx
// ends or emit fails, the request is aborted.
func (r *Replica) follow(ctx context.Context, q *request, emit func(words []uint8, res result) error) (result, error) {
	o := q.out
	sent := 0
	for {
		select {
		case <-o.wake:
		case <-ctx.Done():
			r.abort(q)
			return result{}, ctx.Err()
		}
		o.mu.Lock()
		words := o.words[sent:]
		res := o.result()
		done, err := o.done, o.err
		o.mu.Unlock()
		if len(words) > 0 && emit != nil {
			if eerr := emit(words, res); eerr != nil {
				r.abort(q)
				return res, eerr
			}
		}
		sent += len(words)
		if done {
			return res, err
		}
	}
}

// appendWords returns a follow callback that appends the generated text.
func appendWords(b *strings.Builder) func([]uint8, result) error {
	return func(words []uint8, _ result) error {
		for _, w := range words {
			b.WriteByte(' ')
			b.WriteString(outputWords[w])
		}
		return nil
	}
}
