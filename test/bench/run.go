package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"

	"github.com/kvxds/kvxds/controller"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/adsenvoy"
	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/xds/bootstrap"
)

// reqResult is what the load generator saw of one request. Times are wall
// offsets from the start of the dispatch.
type reqResult struct {
	Sent, First, Done time.Duration // First < 0: no token arrived
	Replica           string
	PromptTokens      int
	CachedTokens      int
	EngineTTFT        float64 // simulated seconds, from the trailer; NaN if absent
	Tokens            int     // streamed messages
	// PD is a decode replica's account of the request's prefill; nil
	// from a replica without the decode role.
	PD  *pdAccount
	Err error
}

// pdAccount is what a decode replica reports of a request's prefill
// (sim.HeaderPrefillReplica and the rest): the prefill replica's id ("" when
// the decode replica prefilled it itself), its prompt and cached tokens,
// and the prompt tokens whose KV was transferred.
type pdAccount struct {
	Replica                     string
	Prompt, Cached, Transferred int
	// TTFT is the prefill replica's own TTFT (simulated seconds: its
	// queue and prefill), NaN where not reported.
	TTFT float64
}

// Sample is one reading of every replica's state.
type Sample struct {
	At    time.Duration // wall offset from the start of the dispatch
	Depth []int         // Waiting + Running per replica
	KV    []float64     // kv_cache_usage_perc per replica
}

// liveRun is the raw outcome of one live mode, before statistics.
type liveRun struct {
	Results     []reqResult
	Samples     []Sample
	Boundary    time.Duration // wall offset of the first measured request's arrival
	LastArrival time.Duration
	Wall        time.Duration // dispatch start to the last completion
	CPU         time.Duration // process CPU time over Wall
	MachineCPU  time.Duration // every process's CPU time over Wall; -1 unknown
	Before      EngineCounters
	After       EngineCounters
	PerReplica  []EngineCounters // final scrape, whole run
	Escapes     int              // transitions of a replica out of the hash table
	WeightMoves int              // changes of a replica's weight
	Policy      string
	// AdapterNote says how kvxds placed the adapters (KVXDSAdapters).
	AdapterNote string
}

// runLive runs one live mode on a fresh fleet and a fresh kvxds, through
// data plane dp.
func runLive(ctx context.Context, c Config, w *workloadPlan, mode Mode, dp DataPlane) (*liveRun, error) {
	scfg := simConfig(w.KVBlocks, w.TimeScale)
	scfg.MaxLoRA, scfg.AdapterLoad = c.MaxLoRA, c.AdapterLoad
	reps, err := sim.StartFleet(c.Replicas, scfg)
	if err != nil {
		return nil, fmt.Errorf("starting the simulated fleet: %w", err)
	}
	defer func() {
		for _, r := range reps {
			r.Close()
		}
	}()
	addrs := make([]string, len(reps))
	for i, r := range reps {
		addrs[i] = r.Addr()
		if dp == GRPCGo || mode.Routed() {
			// gRPC's own server transport: the main port's HTTP/2
			// handler costs a write and a goroutine hand-off per
			// streamed token, which crowded the simulator's CPU and
			// stretched client TTFT.
			if addrs[i], err = r.ListenGRPC("127.0.0.1:0"); err != nil {
				return nil, err
			}
		}
	}
	pol, err := Policy(PolicyOptions{Mode: mode, Endpoints: addrs, TimeScale: w.TimeScale, Scrape: c.ScrapeInterval, Escape: w.Escape,
		GroupKey: w.HotSession, GroupReplicas: c.GroupReplicas, GroupShared: c.GroupShared,
		BalanceFactor: c.BalanceFactor, BalanceOn: c.BalanceOn, LoadInterval: c.LoadInterval, BodyKey: bodyKeyHCL(w, dp), Bare: c.Bare, NoHotKeys: c.NoHotKeys, HotValues: c.HotValues, EscapeSet: c.EscapeSet, WeightsSet: c.WeightsSet,
		MaxLoRA: c.MaxLoRA})
	if err != nil {
		return nil, err
	}
	k, err := startKVXDS(ctx, c, pol, w.Name, mode)
	if err != nil {
		return nil, err
	}
	defer k.stop()
	if mode == KVXDSGroups {
		k.groupKey = w.HotSession
	}
	run := &liveRun{Policy: pol, Results: make([]reqResult, len(w.Requests))}
	g := &dispatcher{cfg: c, plan: w, mode: mode, reps: reps, http: k.http, ctrl: k.ctrl, run: run}
	if mode.Routed() {
		if g.clients, err = k.dialDirect(ctx, addrs); err != nil {
			return nil, err
		}
		switch mode {
		case IndexLLMD, IndexLLMDLoRA:
			cfg := DefaultLLMDConfig()
			if mode == IndexLLMDLoRA {
				cfg.LoRAWeight = DefaultLLMDLoRAWeight
			}
			x := NewLLMDRouter(len(reps), cfg, func(i int) (int, float64) {
				st := reps[i].Stats()
				return st.Waiting, st.KVUsage
			})
			if mode == IndexLLMDLoRA {
				// Read live, as the other signals are: the stand-in
				// for llm-d's 50 ms scrape.
				x.WithLoRA(func(i int) LoRAState {
					st := reps[i].Stats()
					return LoRAState{Running: st.LoRAInFlight, Waiting: st.LoRAInFlight, MaxLoRA: st.MaxLoRA}
				})
			}
			g.index = x
		default:
			g.index = NewIndexRouter(len(reps), DefaultIndexConfig())
		}
	} else if dp == Envoy {
		if g.envoys, err = k.connectEnvoys(ctx, c, w.Name, mode, addrs); err != nil {
			return nil, err
		}
		// A body-keyed pool reads its key from the body; the client
		// sends no session header.
		g.bodyKeyed = w.BodyKey.HCL != ""
	} else {
		if g.clients, err = k.connect(ctx, c, w.Name, mode, PoolName, c.Replicas); err != nil {
			return nil, err
		}
		if mode.Hashed() && !c.NoHotKeys {
			// The pool spreads its hot keys by the conversation key (the
			// default spread_by): a gRPC client sends the sub-key itself.
			g.plan = withSpreads(w, ConversationKey())
		}
	}
	if err := g.dispatch(ctx); err != nil {
		return nil, err
	}
	if mode == KVXDSAdapters {
		if run.AdapterNote, err = adapterPlacement(ctx, k.http, k.ctrl.AdminAddr(), c.Replicas, c.MaxLoRA); err != nil {
			return nil, err
		}
	}
	if c.Progress != nil && g.envoys != nil {
		var sum adsenvoy.AccessLogStats
		for _, e := range g.envoys {
			st := e.accessLogStats()
			sum.Written, sum.Dropped, sum.Entries, sum.Lost = sum.Written+st.Written, sum.Dropped+st.Dropped,
				sum.Entries+st.Entries, sum.Lost+st.Lost
		}
		if sum.Written+sum.Dropped > 0 {
			fmt.Fprintf(c.Progress, "%s, %s: the Envoys' access logs: %d entries written, %d dropped; %d sent, %d of them on failed streams\n",
				w.Name, mode, sum.Written, sum.Dropped, sum.Entries, sum.Lost)
		}
	}
	return run, nil
}

// bodyKeyHCL is the key block a live run's policy carries for plan w on
// data plane dp: w's body key for Envoy, which runs the served filter on
// the body; "" (x-session-id) for grpc-go, whose clients send the key
// computed ahead.
func bodyKeyHCL(w *workloadPlan, dp DataPlane) string {
	if dp == Envoy {
		return w.BodyKey.HCL
	}
	return ""
}

// kvxdsRun is an in-process kvxds serving one generated policy, and the
// grpc-go clients connected to it.
type kvxdsRun struct {
	ctrl *controller.Controller
	// followers are the other instances (Config.Instances), following
	// ctrl; stopFollowers ends them.
	followers     []*controller.Controller
	stopFollowers []func()
	http          *http.Client
	cancel        context.CancelFunc
	done          chan struct{}
	conns         []*grpc.ClientConn
	envoys        []*envoyClient
	// groupKey is the session key of the policy's tenant group, if any:
	// connect warms the group's replicas with it.
	groupKey string
}

// startKVXDS starts kvxds on policy pol and waits until it serves a
// configuration. stop ends it.
func startKVXDS(ctx context.Context, c Config, pol, name string, mode Mode) (*kvxdsRun, error) {
	ctrl, err := controller.New(controller.Options{
		PolicySource: []byte(pol),
		XDSAddress:   "127.0.0.1:0",
		AdminAddress: c.AdminAddress,
		Logger:       c.Logger.With("workload", name, "mode", string(mode)),
		Version:      "bench",
	})
	if err != nil {
		return nil, fmt.Errorf("kvxds policy for %s: %w", mode, err)
	}
	if err := ctrl.Listen(); err != nil {
		return nil, fmt.Errorf("kvxds: %w", err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	k := &kvxdsRun{ctrl: ctrl, http: httpClient(), cancel: kcancel, done: make(chan struct{})}
	var kerr error // set before k.done closes
	go func() {
		defer close(k.done)
		kerr = ctrl.Run(kctx)
	}()
	if err := waitReady(ctx, k.http, ctrl.AdminAddr(), k.done, &kerr); err != nil {
		k.stop()
		return nil, err
	}
	for range c.Instances - 1 {
		if err := k.startFollower(ctx, c, pol, name, mode); err != nil {
			k.stop()
			return nil, err
		}
	}
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "%s, %s: status page at http://%s/\n", name, mode, ctrl.AdminAddr())
	}
	return k, nil
}

// startFollower starts one more instance, following k's first.
func (k *kvxdsRun) startFollower(ctx context.Context, c Config, pol, name string, mode Mode) error {
	ctrl, err := controller.New(controller.Options{
		PolicySource:  []byte(fmt.Sprintf("ha { follow = %q }\n", "http://"+k.ctrl.AdminAddr()) + pol),
		XDSAddress:    "127.0.0.1:0",
		AdminAddress:  "127.0.0.1:0",
		Logger:        c.Logger.With("workload", name, "mode", string(mode), "instance", len(k.followers)+1),
		Version:       "bench",
		ID:            fmt.Sprintf("kvxds-%d", len(k.followers)+1),
		NoLoadReports: c.IsolatedInstances,
	})
	if err != nil {
		return fmt.Errorf("kvxds follower: %w", err)
	}
	if err := ctrl.Listen(); err != nil {
		return fmt.Errorf("kvxds follower: %w", err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var ferr error
	go func() {
		defer close(done)
		ferr = ctrl.Run(fctx)
	}()
	k.followers = append(k.followers, ctrl)
	k.stopFollowers = append(k.stopFollowers, func() { cancel(); <-done })
	return waitReady(ctx, k.http, ctrl.AdminAddr(), done, &ferr)
}

// xdsAddr is the xDS address of the instance client i attaches to.
func (k *kvxdsRun) xdsAddr(i int) string {
	if n := len(k.followers) + 1; i%n > 0 {
		return k.followers[i%n-1].XDSAddr()
	}
	return k.ctrl.XDSAddr()
}

// connect dials c.Clients grpc-go xDS clients of xds:///target, each its
// own node, and warms their connections to all n replicas. Client i is
// the same node whatever the target, as one process's channels are.
func (k *kvxdsRun) connect(ctx context.Context, c Config, name string, mode Mode, target string, n int) ([]testgrpc.TestServiceClient, error) {
	clients := make([]testgrpc.TestServiceClient, c.Clients)
	for i := range clients {
		cc, err := dialXDS(k.xdsAddr(i), fmt.Sprintf("kvxds-bench-%s-%s-%d", name, mode, i), target)
		if err != nil {
			return nil, err
		}
		k.conns = append(k.conns, cc)
		clients[i] = testgrpc.NewTestServiceClient(cc)
	}
	for i, cl := range clients {
		if err := warmConnections(ctx, cl, n, k.groupKey); err != nil {
			return nil, fmt.Errorf("client %d: %w", i, err)
		}
	}
	return clients, nil
}

// dialDirect dials every replica's gRPC port without xDS: the index
// router picks the replica itself, so it gets one client per replica.
func (k *kvxdsRun) dialDirect(ctx context.Context, addrs []string) ([]testgrpc.TestServiceClient, error) {
	clients := make([]testgrpc.TestServiceClient, len(addrs))
	for i, addr := range addrs {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		k.conns = append(k.conns, cc)
		clients[i] = testgrpc.NewTestServiceClient(cc)
		if err := warmConnections(ctx, clients[i], 1, ""); err != nil {
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
	}
	return clients, nil
}

// connectEnvoys starts c.Clients Envoy nodes on kvxds's ADS server and
// opens a connection from each to every replica.
func (k *kvxdsRun) connectEnvoys(ctx context.Context, c Config, name string, mode Mode, addrs []string) ([]*envoyClient, error) {
	for i := range c.Clients {
		e, err := startEnvoy(ctx, k.xdsAddr(i), fmt.Sprintf("kvxds-bench-envoy-%s-%s-%d", name, mode, i))
		if err != nil {
			return nil, err
		}
		k.envoys = append(k.envoys, e)
		if err := e.warm(ctx, addrs); err != nil {
			return nil, fmt.Errorf("envoy %d: %w", i, err)
		}
	}
	return k.envoys, nil
}

// stop closes the clients and stops kvxds.
func (k *kvxdsRun) stop() {
	for _, cc := range k.conns {
		cc.Close()
	}
	for _, e := range k.envoys {
		e.close()
	}
	for _, stop := range k.stopFollowers {
		stop()
	}
	k.cancel()
	<-k.done
}

// waitReady polls kvxds's /readyz until it answers 200, kvxds stops (done
// closes; *runErr is then its error) or 20 seconds pass.
func waitReady(ctx context.Context, hc *http.Client, admin string, done <-chan struct{}, runErr *error) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("kvxds stopped before it was ready: %w", *runErr)
		case <-ctx.Done():
			return fmt.Errorf("kvxds on %s never became ready: %w", admin, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dialXDS is a proxyless gRPC client of pool target, bootstrapped as
// `kvxds bootstrap --grpc` would.
func dialXDS(xdsAddr, node, target string) (*grpc.ClientConn, error) {
	cfg, err := bootstrap.GRPCJSON(bootstrap.Options{NodeID: node, XDSAddress: xdsAddr})
	if err != nil {
		return nil, fmt.Errorf("gRPC bootstrap: %w", err)
	}
	r, err := xds.NewXDSResolverWithConfigForTesting(cfg)
	if err != nil {
		return nil, fmt.Errorf("xDS resolver: %w", err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing xds:///%s: %w", target, err)
	}
	return cc, nil
}

// warmConnections sends EmptyCalls (which no engine counter sees) until
// every replica has answered, first with fresh session keys, then without
// a key (a hash pool's keyless fallback is a cluster of its own, with its
// own connections), so that no measured request pays for a connection
// setup. With a groupKey, every other probe carries it: the replicas of
// an exclusive group answer only the group's requests.
func warmConnections(ctx context.Context, cl testgrpc.TestServiceClient, n int, groupKey string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, keyed := range []bool{true, false} {
		seen := map[string]bool{}
		for i := 0; len(seen) < n; i++ {
			if i > 200*n {
				return fmt.Errorf("only %d of %d replicas answered %d probes (keyed %v)", len(seen), n, i, keyed)
			}
			var hdr metadata.MD
			cctx := ctx
			switch {
			case groupKey != "" && i%2 == 1:
				cctx = metadata.AppendToOutgoingContext(ctx, SessionHeader, groupKey)
			case keyed:
				cctx = metadata.AppendToOutgoingContext(ctx, SessionHeader, "probe-"+strconv.Itoa(i))
			}
			if _, err := cl.EmptyCall(cctx, &testgrpc.Empty{}, grpc.WaitForReady(true), grpc.Header(&hdr)); err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			if id := hdr.Get(sim.MDReplicaID); len(id) > 0 {
				seen[id[0]] = true
			}
		}
	}
	return nil
}

// Router is a per-request router in the load generator (the index
// modes): Pick chooses the replica of a prompt and counts it in flight,
// Done ends it.
type Router interface {
	Pick(prompt string) int
	Done(replica int)
}

// modelRouter is a Router that also reads the model a request names.
type modelRouter interface {
	PickModel(prompt, model string) int
}

// dispatcher replays one workload plan open-loop through the clients.
type dispatcher struct {
	cfg     Config
	plan    *workloadPlan
	mode    Mode
	clients []testgrpc.TestServiceClient
	// envoys, if set, carry the requests instead of clients; bodyKeyed
	// says whether their filter keys on the body (else they send
	// x-session-id).
	envoys    []*envoyClient
	bodyKeyed bool
	// index, if set, picks each request's replica; clients are then one
	// per replica.
	index Router
	// pd, if set, sends every request (a prefill/decode fleet).
	pd   *pdRouter
	reps []*sim.Replica
	http *http.Client
	ctrl *controller.Controller
	run  *liveRun
	// onStart, if set, is called with the dispatch's time zero before the
	// first request (the rolling workload starts its rollout from it).
	onStart func(start time.Time)

	done, failed atomic.Int64
}

// clientFor picks the client of a request: by its session, so that a
// session always uses the same one (by its conversation where the session
// names the tenant), or by Seq for a request without one.
func (g *dispatcher) clientFor(r *Request) testgrpc.TestServiceClient {
	return g.clients[clientIndex(r, len(g.clients), g.cfg.ClientsInTurn)]
}

// clientIndex is the client of n that sends r; inTurn: by Seq alone.
func clientIndex(r *Request, n int, inTurn bool) int {
	if r.Session == "" || inTurn {
		return r.Seq % n
	}
	key := r.Session
	if key == r.Tenant && r.Conversation != "" {
		// A client keyed on its application (system-prompt) still keeps
		// a conversation on one connection, as a user's client does; the
		// whole application on one would leave the other clients idle.
		key = r.Conversation
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

func (g *dispatcher) scrapeAll(ctx context.Context) (sum EngineCounters, each []EngineCounters, err error) {
	each = make([]EngineCounters, len(g.reps))
	for i, r := range g.reps {
		c, err := ScrapeEngine(ctx, g.http, r.Addr())
		if err != nil {
			return sum, nil, err
		}
		each[i] = c
		sum = sum.Add(c)
	}
	return sum, each, nil
}

// wallOf is the wall offset of a simulated offset.
func (g *dispatcher) wallOf(d time.Duration) time.Duration {
	return time.Duration(float64(d) / g.plan.TimeScale)
}

func (g *dispatcher) dispatch(ctx context.Context) error {
	reqs := g.plan.Requests
	if len(reqs) == 0 {
		return errors.New("the workload produced no requests")
	}
	res := g.run.Results
	// Give up on a mode that takes far longer than planned (an overloaded
	// fleet); the cancelled requests count as failed.
	limit := 3*g.wallOf(reqs[len(reqs)-1].At) + time.Minute
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	cpu0 := processCPU()
	mcpu0, mok := machineCPU()
	start := time.Now()
	if g.onStart != nil {
		g.onStart(start)
	}

	stopAux := make(chan struct{})
	var aux sync.WaitGroup
	aux.Add(2)
	go func() { defer aux.Done(); g.sampleLoop(start, stopAux) }()
	go func() { defer aux.Done(); g.progressLoop(start, stopAux) }()

	warm := g.plan.Warmup
	boundary := make(chan error, 1)
	doneCh := make([]chan struct{}, len(reqs))
	for i := range doneCh {
		doneCh[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	sent := 0
dispatch:
	for i := range reqs {
		r := &reqs[i]
		if d := time.Until(start.Add(g.wallOf(r.At))); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break dispatch
			}
		}
		if i == warm {
			g.run.Boundary = time.Since(start)
			go func() {
				var err error
				g.run.Before, _, err = g.scrapeAll(ctx)
				boundary <- err
			}()
		}
		sent++
		g.run.LastArrival = time.Since(start)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(doneCh[i])
			if dep := r.DependsOn; dep >= 0 {
				select {
				case <-doneCh[dep]:
				case <-ctx.Done():
					res[i] = reqResult{Sent: time.Since(start), First: -1, Err: ctx.Err()}
					g.failed.Add(1)
					return
				}
			}
			if g.pd != nil {
				res[i] = g.pd.send(ctx, r, start)
			} else if g.index != nil {
				var at int
				if mr, ok := g.index.(modelRouter); ok {
					at = mr.PickModel(r.Prompt, r.Model(chatModel))
				} else {
					at = g.index.Pick(r.Prompt)
				}
				res[i] = g.send(ctx, g.clients[at], r, start)
				g.index.Done(at)
			} else if g.envoys != nil {
				res[i] = g.envoys[clientIndex(r, len(g.envoys), g.cfg.ClientsInTurn)].send(ctx, r, start, g.bodyKeyed)
			} else {
				res[i] = g.send(ctx, g.clientFor(r), r, start)
			}
			if res[i].Err != nil {
				g.failed.Add(1)
			}
			g.done.Add(1)
		}()
	}
	for i := sent; i < len(reqs); i++ {
		res[i] = reqResult{First: -1, Err: fmt.Errorf("not sent: %w", context.Cause(ctx))}
		close(doneCh[i])
	}
	wg.Wait()
	g.run.Wall = time.Since(start)
	g.run.CPU = processCPU() - cpu0
	g.run.MachineCPU = -1
	if mcpu1, ok := machineCPU(); ok && mok {
		g.run.MachineCPU = mcpu1 - mcpu0
	}
	close(stopAux)
	aux.Wait()
	if g.cfg.Progress != nil && g.cfg.ProgressLive {
		fmt.Fprintln(g.cfg.Progress) // end the rewritten line
	}
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
		return ctx.Err()
	}
	if sent > warm {
		if err := <-boundary; err != nil {
			return fmt.Errorf("engine metrics at the warm-up boundary: %w", err)
		}
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer scancel()
	after, each, err := g.scrapeAll(sctx)
	if err != nil {
		return fmt.Errorf("engine metrics at the end: %w", err)
	}
	g.run.After, g.run.PerReplica = after, each
	return nil
}

// send runs one request to completion, with its key headers
// (requestMD).
func (g *dispatcher) send(ctx context.Context, cl testgrpc.TestServiceClient, r *Request, start time.Time) reqResult {
	res := reqResult{Sent: time.Since(start), First: -1, EngineTTFT: nan()}
	streamGRPC(ctx, cl, requestMD(r, true), r.Body, r.MaxTokens, start, &res)
	return res
}

// requestMD is the metadata a gRPC client sends with r: with keyed,
// x-session-id = r.Session and x-kvxds-spread = r.Spread (each only if
// set); x-kvxds-adapter = r.Adapter if set, always, as a gRPC client
// names its adapter in metadata, which its route matches and the engine
// runs under.
func requestMD(r *Request, keyed bool) []string {
	var kv []string
	if keyed && r.Session != "" {
		kv = append(kv, SessionHeader, r.Session)
	}
	if keyed && r.Spread != "" {
		kv = append(kv, SpreadHeader, r.Spread)
	}
	if r.Adapter != "" {
		kv = append(kv, sim.MDAdapter, r.Adapter)
	}
	return kv
}

// streamGRPC runs one StreamingOutputCall of body with metadata md (key,
// value pairs) to completion into res, whose Sent is set, and expects
// want tokens. It returns the call's header and trailer (empty if the
// call never started).
func streamGRPC(ctx context.Context, cl testgrpc.TestServiceClient, md []string, body []byte, want int, start time.Time, res *reqResult) (hdr, tr metadata.MD) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	stream, err := cl.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{
		Payload: &testgrpc.Payload{Body: body},
	}, grpc.WaitForReady(true))
	if err != nil {
		res.Err, res.Done = err, time.Since(start)
		return nil, nil
	}
	var msg testgrpc.StreamingOutputCallResponse
	for {
		err := stream.RecvMsg(&msg)
		if err == io.EOF {
			break
		}
		if err != nil {
			res.Err = err
			break
		}
		if res.Tokens == 0 {
			res.First = time.Since(start)
		}
		res.Tokens++
	}
	res.Done = time.Since(start)
	hdr, _ = stream.Header()
	if v := hdr.Get(sim.MDReplicaID); len(v) > 0 {
		res.Replica = v[0]
	}
	tr = stream.Trailer()
	res.PromptTokens = mdInt(tr, sim.MDPromptTokens)
	res.CachedTokens = mdInt(tr, sim.MDCachedTokens)
	if v := tr.Get(sim.MDTTFT); len(v) > 0 {
		if f, err := strconv.ParseFloat(v[0], 64); err == nil {
			res.EngineTTFT = f
		}
	}
	if res.Err == nil && res.Tokens != want {
		res.Err = fmt.Errorf("%d tokens streamed, want %d", res.Tokens, want)
	}
	return hdr, tr
}

// mdLast is the last value of key in md, "" if none.
func mdLast(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

func mdInt(md metadata.MD, key string) int {
	n, _ := strconv.Atoi(mdLast(md, key))
	return n
}

// sampleLoop records every replica's queue depth and KV usage, and counts
// kvxds's health and weight changes, every SampleEvery.
func (g *dispatcher) sampleLoop(start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(g.cfg.SampleEvery)
	defer t.Stop()
	health := map[string]fleet.Health{}
	weights := map[string][]uint32{} // each pool's previous weights, in endpoint order
	for {
		s := Sample{At: time.Since(start), Depth: make([]int, len(g.reps)), KV: make([]float64, len(g.reps))}
		for i, r := range g.reps {
			st := r.Stats()
			s.Depth[i] = st.Waiting + st.Running
			s.KV[i] = st.KVUsage
		}
		g.run.Samples = append(g.run.Samples, s)
		for _, p := range g.ctrl.Fleet().Pools {
			cur := make([]uint32, len(p.Endpoints))
			for i, e := range p.Endpoints {
				cur[i] = e.Weight
				if prev, ok := health[e.HashKey]; ok && prev == fleet.Healthy && e.Health != fleet.Healthy {
					g.run.Escapes++
				}
				health[e.HashKey] = e.Health
			}
			// Scaling every weight alike moves no key: count the
			// replicas whose weight changed only when the shares did.
			if prev := weights[p.Name]; prev != nil && len(prev) == len(cur) && !proportional(prev, cur) {
				for i := range cur {
					if cur[i] != prev[i] {
						g.run.WeightMoves++
					}
				}
			}
			weights[p.Name] = cur
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// proportional reports whether b is a multiple of a (same shares).
func proportional(a, b []uint32) bool {
	for i := range a {
		if uint64(a[i])*uint64(b[0]) != uint64(b[i])*uint64(a[0]) {
			return false
		}
	}
	return true
}

// progressLoop reports how far the mode has got (see Config.Progress).
func (g *dispatcher) progressLoop(start time.Time, stop <-chan struct{}) {
	if g.cfg.Progress == nil {
		return
	}
	every, format := g.cfg.ProgressEvery, "%-14s %-14s %6.1fs  %6d/%d requests done  %d failed\n"
	if every <= 0 {
		every = 10 * time.Second
	}
	if g.cfg.ProgressLive {
		every, format = 500*time.Millisecond, "\r%-14s %-14s %6.1fs  %6d/%d requests done  %d failed "
	}
	t := time.NewTicker(every)
	defer t.Stop()
	total := len(g.plan.Requests)
	report := func() {
		fmt.Fprintf(g.cfg.Progress, format, g.plan.Name, g.mode, time.Since(start).Seconds(), g.done.Load(), total, g.failed.Load())
	}
	if g.cfg.ProgressLive {
		report()
	}
	for {
		select {
		case <-stop:
			report()
			return
		case <-t.C:
			report()
		}
	}
}
