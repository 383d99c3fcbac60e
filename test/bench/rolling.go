package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/kube"
	"github.com/kvxds/kvxds/test/netns"
	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/test/workload"
)

// RollingName is the rolling workload: chat traffic while the fleet is
// replaced one replica at a time (see Rolling).
const RollingName = "rolling"

// WorkloadNames lists every workload the benchmark knows:
// workload.Names(), then RollingName.
func WorkloadNames() []string { return append(workload.Names(), RollingName) }

// RollingUsable says why the rolling workload cannot run here, or nil. Its
// replicas are pods listed by a real API server, which refuses loopback
// addresses, so they serve in a network namespace (root and iproute2),
// and the API server's binaries must have been built (make kube-deps).
func RollingUsable() error {
	var why []string
	if err := netns.Usable(); err != nil {
		why = append(why, err.Error())
	}
	if err := kube.Available(); err != nil {
		why = append(why, err.Error())
	}
	if len(why) > 0 {
		return fmt.Errorf("the %s workload cannot run here: %s", RollingName, strings.Join(why, "; "))
	}
	return nil
}

// RollVariant is how a rollout replaces a pod.
type RollVariant string

const (
	// StatefulSet replaces pod vllm-i by a new pod of the same name, as a
	// StatefulSet's RollingUpdate does, highest ordinal first: the old pod
	// terminates (drains) and is gone before the new one is created.
	StatefulSet RollVariant = "statefulset"
	// Deployment adds a pod with a new random name, waits until it is
	// ready, then retires an old one (maxSurge 1, maxUnavailable 0), oldest
	// first.
	Deployment RollVariant = "deployment"
)

// RollVariants lists the variants in report order.
func RollVariants() []RollVariant { return []RollVariant{StatefulSet, Deployment} }

// rollingMaxTimeScale caps the rolling workload's automatic time scale.
const rollingMaxTimeScale = 5

// rollingModes are the modes the rolling workload runs: the baseline and
// session affinity, the comparison the rollout is about.
func rollingModes(modes []Mode) []Mode {
	var out []Mode
	for _, m := range modes {
		if m == RoundRobin || m == KVXDS {
			out = append(out, m)
		}
	}
	return out
}

// Rolling configures the rolling workload. Durations are simulated. The
// stream is Workload (chat) at the Config's load on Config.Replicas
// replicas, lasting Warmup + Steady + Replicas × Step + After.
type Rolling struct {
	// Variants to run, each under round_robin and kvxds (those of
	// Config.Modes). Default both.
	Variants []RollVariant
	// Workload is the traffic. Default "chat".
	Workload string
	// Warmup fills the caches and is not measured; Steady is the steady
	// state measured before the roll. Defaults 40s and 50s.
	Warmup, Steady time.Duration
	// Step is the time from one replacement's start to the next one's
	// (later if the previous step overran). Default 15s.
	Step time.Duration
	// Drain is how long a terminating pod at least keeps serving: clients
	// see it DRAINING and stop sending it requests; it then goes once its
	// engine is idle, or after Grace in all. Defaults 4s and 60s.
	Drain, Grace time.Duration
	// Startup is a new pod's time from creation to ready. Default 2s.
	Startup time.Duration
	// After is measured after the roll. Default 30s.
	After time.Duration
	// Bucket is the resolution of the hit rate over time. Default 10s.
	Bucket time.Duration
	// Subnet numbers the network namespace (test/netns). Default 240.
	Subnet int
}

func (r Rolling) defaults() Rolling {
	if len(r.Variants) == 0 {
		r.Variants = RollVariants()
	}
	if r.Workload == "" {
		r.Workload = "chat"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&r.Warmup, 40*time.Second)
	def(&r.Steady, 50*time.Second)
	def(&r.Step, 15*time.Second)
	def(&r.Drain, 4*time.Second)
	def(&r.Grace, 60*time.Second)
	def(&r.Startup, 2*time.Second)
	def(&r.After, 30*time.Second)
	def(&r.Bucket, 10*time.Second)
	if r.Subnet == 0 {
		r.Subnet = 240
	}
	return r
}

func (r Rolling) validate() error {
	for _, v := range r.Variants {
		if !slices.Contains(RollVariants(), v) {
			return fmt.Errorf("rolling: unknown variant %q; known: %s, %s", v, StatefulSet, Deployment)
		}
	}
	if _, ok := workload.ByName(r.Workload); !ok {
		return fmt.Errorf("rolling: unknown workload %q", r.Workload)
	}
	for _, d := range []time.Duration{r.Warmup, r.Steady, r.Step, r.Drain, r.Grace, r.Startup, r.After, r.Bucket} {
		if d <= 0 {
			return fmt.Errorf("rolling: durations must be positive, not %v", d)
		}
	}
	if r.Subnet < 0 || r.Subnet > 255 {
		return fmt.Errorf("rolling: subnet must be in [0, 255], not %d", r.Subnet)
	}
	return nil
}

// planRolling generates the rolling workload's stream: Rolling.Workload
// over the whole timeline, with everything before Rolling.Warmup left out
// of the statistics.
func planRolling(c Config) (*workloadPlan, error) {
	r := c.Rolling
	c.Duration = r.Warmup + r.Steady + time.Duration(c.Replicas)*r.Step + r.After
	// The API server, etcd and the namespace's traffic share the machine
	// too; a slower clock leaves them room.
	c.MaxTimeScale = min(c.MaxTimeScale, rollingMaxTimeScale)
	p, err := planWorkload(c, r.Workload)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RollingName, err)
	}
	p.Warmup, _ = slices.BinarySearchFunc(p.Requests, r.Warmup, func(q Request, at time.Duration) int {
		return cmpDuration(q.At, at)
	})
	return p, nil
}

func cmpDuration(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// runRollingWorkload runs every variant under round_robin and kvxds, on one
// API server and one network namespace.
func runRollingWorkload(ctx context.Context, c Config) (*WorkloadReport, error) {
	if err := RollingUsable(); err != nil {
		return nil, err
	}
	modes := rollingModes(c.Modes)
	if len(modes) == 0 {
		return nil, fmt.Errorf("the %s workload runs under %s and %s; neither is among the selected modes", RollingName, RoundRobin, KVXDS)
	}
	p, err := planRolling(c)
	if err != nil {
		return nil, err
	}
	r := c.Rolling
	wall := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) / p.TimeScale).Round(time.Second)
	}
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "%s: %s, %d requests (%d sessions) over %v simulated at %.2f req/s on %d replicas, replaced one at a time "+
			"from %v every %v; time scale %g (≈%v wall per run; %d runs)\n",
			RollingName, r.Workload, len(p.Requests), p.Sessions, p.Duration, p.Rate, c.Replicas, r.Warmup+r.Steady, r.Step,
			p.TimeScale, wall(p.Duration), len(r.Variants)*len(modes))
	}
	env, err := newRollEnv(ctx, c)
	if err != nil {
		return nil, err
	}
	defer env.close()
	wr := &WorkloadReport{Name: RollingName, Replicas: c.Replicas, Load: p.Load, Rate: p.Rate, Capacity: p.Capacity,
		KVBlocks: p.KVBlocks, KVWhy: p.KVWhy, TimeScale: p.TimeScale, Duration: p.Duration,
		Requests: len(p.Requests), Warmup: p.Warmup, Sessions: p.Sessions,
		MeanPrompt: p.MeanPrompt, MeanOutput: p.MeanOutput,
		Rolling: &RollingReport{Config: r}}
	for _, v := range r.Variants {
		for _, m := range modes {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			run, err := runRoll(ctx, c, p, env, v, m)
			if err != nil {
				return nil, fmt.Errorf("%s, %s, %s: %w", RollingName, v, m, err)
			}
			wr.Rolling.Results = append(wr.Rolling.Results, summarizeRoll(v, m, p, run, r.Bucket))
		}
	}
	wr.Targets = Targets(wr)
	return wr, nil
}

// rollNamespace holds every run's Service.
const rollNamespace = "llm"

// rollEnv is what every rolling run shares: an API server, a network
// namespace with an address for each replica a run starts, and a
// kubeconfig for kvxds.
type rollEnv struct {
	dir        string
	cluster    *kube.Cluster
	net        *netns.Net
	kubeconfig string
}

func newRollEnv(ctx context.Context, c Config) (_ *rollEnv, err error) {
	dir, err := os.MkdirTemp("", "kvxds-bench-kube-")
	if err != nil {
		return nil, fmt.Errorf("rolling: %w", err)
	}
	e := &rollEnv{dir: dir}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	logf := func(format string, args ...any) {
		if c.Progress != nil {
			fmt.Fprintf(c.Progress, format+"\n", args...)
		}
	}
	if e.cluster, err = kube.StartCluster(dir, logf); err != nil {
		return nil, fmt.Errorf("rolling: %w", err)
	}
	// Each run starts Replicas pods and replaces every one.
	if e.net, err = netns.New(c.Rolling.Subnet, 2*c.Replicas); err != nil {
		return nil, fmt.Errorf("rolling: %w", err)
	}
	e.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(e.cluster, e.kubeconfig); err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rollNamespace}}
	if _, err := e.cluster.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("rolling: creating namespace %s: %w", rollNamespace, err)
	}
	return e, nil
}

func (e *rollEnv) close() {
	if e.net != nil {
		e.net.Close()
	}
	if e.cluster != nil {
		_ = e.cluster.Close()
	}
	os.RemoveAll(e.dir)
}

// writeKubeconfig writes the cluster's admin credentials as a kubeconfig
// file, kvxds's way into the API server.
func writeKubeconfig(c *kube.Cluster, path string) error {
	rc := c.Config()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.TLSClientConfig.CAData}
	cfg.AuthInfos["bench"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	cfg.CurrentContext = "bench"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("rolling: writing a kubeconfig: %w", err)
	}
	return nil
}

// rollRun is the raw outcome of one rolling run, before statistics.
type rollRun struct {
	liveRun
	// Pods are every replica of the run, in creation order.
	Pods []*rollPod
	// RollStart and RollEnd are the wall offsets of the first step's start
	// and of the last step's end; Steps every step's start.
	RollStart, RollEnd time.Duration
	Steps              []time.Duration
}

// runRoll runs one variant under one mode: a fresh fleet of pods and a
// fresh kvxds discovering them, the stream replayed while the roller
// replaces the pods.
func runRoll(ctx context.Context, c Config, p *workloadPlan, env *rollEnv, v RollVariant, mode Mode) (*rollRun, error) {
	name := RollingName + "-" + string(v)
	// A Service name is a DNS label.
	service := "vllm-" + string(v) + "-" + strings.NewReplacer("_", "-", "+", "-").Replace(string(mode))
	ro := &roller{
		r: c.Rolling, variant: v, scale: p.TimeScale, client: env.cluster.Client(), net: env.net,
		sim: simConfig(p.KVBlocks, p.TimeScale), rng: rand.New(rand.NewPCG(c.Seed, 0x70d5)),
		slice: &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: rollNamespace,
				Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(rollPort))}},
		},
		gen: map[string]int{},
	}
	defer ro.close()
	if err := ro.startFleet(ctx, c.Replicas); err != nil {
		return nil, err
	}
	// Bare: the roll measures what membership changes alone move; the
	// escape hatch's moves would mix in.
	pol, err := Policy(PolicyOptions{Mode: mode, TimeScale: p.TimeScale, Scrape: c.ScrapeInterval, Escape: p.Escape, Bare: true,
		Kubernetes: &KubernetesSource{Namespace: rollNamespace, Service: service,
			Port: "http", Kubeconfig: env.kubeconfig}})
	if err != nil {
		return nil, err
	}
	k, err := startKVXDS(ctx, c, pol, name, mode)
	if err != nil {
		return nil, err
	}
	defer k.stop()
	ro.served = k.ctrl.Fleet
	clients, err := k.connect(ctx, c, name, mode, PoolName, c.Replicas)
	if err != nil {
		return nil, err
	}

	pv := *p
	pv.Name = name
	run := &rollRun{liveRun: liveRun{Policy: pol, Results: make([]reqResult, len(p.Requests))}}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	rolled := make(chan error, 1)
	g := &dispatcher{cfg: c, plan: &pv, mode: mode, clients: clients, http: k.http, ctrl: k.ctrl, run: &run.liveRun,
		onStart: func(start time.Time) {
			go func() { rolled <- ro.roll(rctx, start, p.Requests[len(p.Requests)-1].At) }()
		}}
	if err := g.dispatch(ctx); err != nil {
		return nil, err
	}
	// The roll ends before the stream does, unless a drain overran.
	if err := <-rolled; err != nil {
		return nil, fmt.Errorf("the rollout: %w", err)
	}
	run.Pods, run.RollStart, run.RollEnd, run.Steps = ro.pods, ro.rollStart, ro.rollEnd, ro.steps
	return run, nil
}

// rollPort is every pod's port, named "http" in the EndpointSlice.
const rollPort = 8000

// never is the time of an event that did not happen.
const never = time.Duration(math.MaxInt64)

// podState is a pod's condition as its EndpointSlice lists it.
type podState int

const (
	podStarting    podState = iota // listed, not ready
	podReady                       // ready and serving
	podTerminating                 // serving and terminating: kvxds drains it
	podGone                        // no longer listed
)

// rollPod is one pod of a run: a simulated replica with an empty cache.
// Its times are when kvxds's model first showed the pod ready, draining
// and gone, as wall offsets from the dispatch's start (0 for the pods
// ready before it), never if that did not happen; the clients receive a
// change milliseconds later.
type rollPod struct {
	Name     string // the pod's name: its identity on kvxds's ring
	Instance string // the replica's id (x-replica-id): Name#generation
	Addr     string // host:port, a new address for every pod

	Ready, Terminating, Removed time.Duration

	state podState
	uid   types.UID
	rep   *sim.Replica
}

// stable reports whether the pod was ready and not terminating throughout
// [from, to], and had been ready for clientLag before from.
func (p *rollPod) stable(from, to time.Duration) bool {
	return p.Ready+clientLag <= from && p.Terminating > to
}

// clientLag is how long after kvxds's model shows a pod ready a client may
// still route without it: the push and the client's own update take
// milliseconds on an idle machine and hundreds of them on a loaded one. A
// turn sent in that window to another pod, and its next turn to the new
// one, is a move to a pod that changed, not a stray.
const clientLag = time.Second

// roller plays the rollout on the API server: it starts and stops the
// pods' replicas and keeps the Service's one EndpointSlice as the
// EndpointSlice controller would.
type roller struct {
	r       Rolling
	variant RollVariant
	scale   float64
	client  kubernetes.Interface
	net     *netns.Net
	sim     sim.Config
	rng     *rand.Rand
	slice   *discoveryv1.EndpointSlice
	gen     map[string]int // pods created per name
	// served is kvxds's model, once kvxds runs.
	served func() fleet.Fleet

	pods     []*rollPod
	nextAddr int

	start              time.Time
	rollStart, rollEnd time.Duration
	steps              []time.Duration
}

// Pod-template hashes of the Deployment's old and new ReplicaSets.
const (
	oldTemplate = "6b8f9d7c4"
	newTemplate = "7d5c8b6f9"
)

// podName is the name of the Deployment's next pod of a template, with a
// random suffix as the ReplicaSet controller makes, or the StatefulSet's
// pod i.
func (ro *roller) podName(template string, i int) string {
	if ro.variant == StatefulSet {
		return fmt.Sprintf("vllm-%d", i)
	}
	const alphabet = "bcdfghjklmnpqrstvwxz2456789" // the API's random-suffix alphabet
	b := make([]byte, 5)
	for j := range b {
		b[j] = alphabet[ro.rng.IntN(len(alphabet))]
	}
	return "vllm-" + template + "-" + string(b)
}

// create starts a pod's replica on the next free address; it is not
// ready yet.
func (ro *roller) create(name string) (*rollPod, error) {
	if ro.nextAddr >= 240 {
		return nil, errors.New("out of pod addresses")
	}
	addr := fmt.Sprintf("%s:%d", ro.net.Addr(ro.nextAddr), rollPort)
	ro.nextAddr++
	ln, err := ro.net.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	cfg := ro.sim
	cfg.ID = fmt.Sprintf("%s#%d", name, ro.gen[name])
	ro.gen[name]++
	rep, err := sim.Serve(cfg, ln)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	p := &rollPod{Name: name, Instance: cfg.ID, Addr: addr, Ready: never, Terminating: never, Removed: never,
		uid: uuid.NewUUID(), rep: rep}
	ro.pods = append(ro.pods, p)
	return p, nil
}

// startFleet starts n ready pods and publishes them before kvxds starts.
func (ro *roller) startFleet(ctx context.Context, n int) error {
	for i := range n {
		p, err := ro.create(ro.podName(oldTemplate, i))
		if err != nil {
			return err
		}
		p.state, p.Ready = podReady, 0
	}
	_, err := ro.publish(ctx)
	return err
}

// publish writes the slice: every pod not gone, ready, terminating
// (still serving) or starting (not ready), sorted by name. Once kvxds
// serves (ro.served is set), it waits until kvxds's model shows exactly
// the ready pods as healthy and the terminating ones as draining, each by
// its name and address, and returns that moment.
func (ro *roller) publish(ctx context.Context) (time.Duration, error) {
	var eps []discoveryv1.Endpoint
	want := map[string]fleet.Endpoint{} // by address
	for _, p := range ro.pods {
		if p.state == podGone {
			continue
		}
		host := p.Addr[:strings.LastIndexByte(p.Addr, ':')]
		terminating := p.state == podTerminating
		ready := p.state == podReady
		serving := ready || terminating
		eps = append(eps, discoveryv1.Endpoint{
			Addresses:  []string{host},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: rollNamespace, Name: p.Name, UID: p.uid},
		})
		switch p.state {
		case podReady:
			want[host] = fleet.Endpoint{HashKey: p.Name, Health: fleet.Healthy}
		case podTerminating:
			want[host] = fleet.Endpoint{HashKey: p.Name, Health: fleet.Draining}
		}
	}
	slices.SortFunc(eps, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.TargetRef.Name, b.TargetRef.Name) })
	ro.slice.Endpoints = eps
	api := ro.client.DiscoveryV1().EndpointSlices(rollNamespace)
	var next *discoveryv1.EndpointSlice
	var err error
	if ro.slice.ResourceVersion == "" {
		next, err = api.Create(ctx, ro.slice, metav1.CreateOptions{})
	} else {
		next, err = api.Update(ctx, ro.slice, metav1.UpdateOptions{})
	}
	if err != nil {
		return 0, fmt.Errorf("publishing EndpointSlice %s: %w", ro.slice.Name, err)
	}
	ro.slice = next
	if ro.served == nil {
		return 0, nil
	}
	deadline := time.Now().Add(servedTimeout)
	for !servedAs(ro.served(), want) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("kvxds did not serve the pods of EndpointSlice %s within %v", ro.slice.Name, servedTimeout)
		}
		if err := sleepCtx(ctx, 2*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return ro.now(), nil
}

// servedTimeout bounds the time from an EndpointSlice update to kvxds's
// model (an informer event and a reconcile: milliseconds).
const servedTimeout = 10 * time.Second

// servedAs reports whether f's pool holds exactly the endpoints of want,
// by host, with their hash keys and health.
func servedAs(f fleet.Fleet, want map[string]fleet.Endpoint) bool {
	for _, p := range f.Pools {
		if p.Name != PoolName {
			continue
		}
		if len(p.Endpoints) != len(want) {
			return false
		}
		for _, e := range p.Endpoints {
			w, ok := want[e.Host]
			if !ok || e.HashKey != w.HashKey || e.Health != w.Health {
				return false
			}
		}
		return true
	}
	return len(want) == 0
}

func (ro *roller) now() time.Duration { return time.Since(ro.start) }

// wall is the wall duration of a simulated one.
func (ro *roller) wall(d time.Duration) time.Duration { return time.Duration(float64(d) / ro.scale) }

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// roll replaces every pod present at the start, one per Step from Warmup
// + Steady (simulated), start being the stream's time zero. last is the
// stream's last arrival: a roll that would start after it is an error.
func (ro *roller) roll(ctx context.Context, start time.Time, last time.Duration) error {
	ro.start = start
	old := slices.Clone(ro.pods)
	if ro.variant == StatefulSet {
		slices.Reverse(old) // highest ordinal first
	}
	first := ro.r.Warmup + ro.r.Steady
	if first >= last {
		return fmt.Errorf("the roll would start at %v, after the stream's last arrival at %v", first, last)
	}
	for i, o := range old {
		if err := sleepCtx(ctx, time.Until(start.Add(ro.wall(first+time.Duration(i)*ro.r.Step)))); err != nil {
			return err
		}
		t := ro.now()
		if i == 0 {
			ro.rollStart = t
		}
		ro.steps = append(ro.steps, t)
		var err error
		switch ro.variant {
		case StatefulSet:
			if err = ro.retire(ctx, o); err == nil {
				err = ro.bringUp(ctx, o.Name)
			}
		case Deployment:
			if err = ro.bringUp(ctx, ro.podName(newTemplate, i)); err == nil {
				err = ro.retire(ctx, o)
			}
		}
		if err != nil {
			return fmt.Errorf("replacing %s: %w", o.Name, err)
		}
	}
	ro.rollEnd = ro.now()
	return nil
}

// bringUp creates a pod with an empty cache at a new address, lists it
// as not ready, and as ready Startup later.
func (ro *roller) bringUp(ctx context.Context, name string) error {
	p, err := ro.create(name)
	if err != nil {
		return err
	}
	if _, err := ro.publish(ctx); err != nil {
		return err
	}
	if err := sleepCtx(ctx, ro.wall(ro.r.Startup)); err != nil {
		return err
	}
	p.state = podReady
	p.Ready, err = ro.publish(ctx)
	return err
}

// retire marks a pod terminating (kvxds drains it: no new sessions, its
// requests in flight finish), waits Drain (a preStop delay, while the
// clients learn that it drains), then shuts its replica down gracefully,
// as an engine does on SIGTERM, within Grace in all, and removes it from
// the slice once it has exited.
func (ro *roller) retire(ctx context.Context, p *rollPod) error {
	var err error
	p.state = podTerminating
	if p.Terminating, err = ro.publish(ctx); err != nil {
		return err
	}
	if err := sleepCtx(ctx, ro.wall(ro.r.Drain)); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, ro.wall(ro.r.Grace-ro.r.Drain))
	// Past the grace period the replica is closed, failing what is left;
	// those requests count as failed.
	_ = p.rep.Shutdown(sctx)
	cancel()
	if err := ctx.Err(); err != nil {
		return err
	}
	p.state = podGone
	p.Removed, err = ro.publish(ctx)
	return err
}

// close stops every replica still running and deletes the slice.
func (ro *roller) close() {
	for _, p := range ro.pods {
		p.rep.Close()
	}
	if ro.slice.ResourceVersion != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ro.client.DiscoveryV1().EndpointSlices(rollNamespace).Delete(ctx, ro.slice.Name, metav1.DeleteOptions{})
	}
}

func ptr[T any](v T) *T { return &v }
