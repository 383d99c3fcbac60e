package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"

	"github.com/kvxds/kvxds/controller"
	"github.com/kvxds/kvxds/xds/bootstrap"
)

// kvxdsBinary is built once by TestMain.
var kvxdsBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvxds-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kvxdsBinary = filepath.Join(dir, "kvxds")
	build := exec.Command("go", "build", "-o", kvxdsBinary, "github.com/kvxds/kvxds/cmd/kvxds")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kvxds:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// backend is one real replica on loopback: like an inference engine, it
// serves its API (here a gRPC test service that answers with the
// replica's id) and its Prometheus metrics page (vLLM V1 names) on one
// port.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	id    string
	addr  string
	calls atomic.Int64

	mu          sync.Mutex
	queue       float64 // vllm:num_requests_waiting
	kv          float64 // vllm:kv_cache_usage_perc
	preemptions float64 // vllm:num_preemptions_total
	metricsDown bool    // /metrics answers 503
	adapters    string  // vllm:lora_requests_info's running adapters ("": no series)
}

func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.calls.Add(1)
	return &testgrpc.SimpleResponse{ServerId: b.id}, nil
}

// setLoad changes what the metrics page reports.
func (b *backend) setLoad(queue, kv float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue, b.kv = queue, kv
}

// setAdapters makes the metrics page report adapters (comma-separated)
// running, as vLLM does for a multi-LoRA engine with four slots.
func (b *backend) setAdapters(adapters string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.adapters = adapters
}

func (b *backend) setMetricsDown(down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.metricsDown = down
}

// metricsPage is what vLLM V1 prints, trimmed to the series kvxds reads
// plus some it must ignore.
const metricsPage = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} %g
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} %g
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} %g
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 9000.0
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 18044.0
`

func (b *backend) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	down, q, kv, pre, adapters := b.metricsDown, b.queue, b.kv, b.preemptions, b.adapters
	b.mu.Unlock()
	if down {
		http.Error(w, "metrics unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintf(w, metricsPage, q, kv, pre)
	if adapters != "" {
		// vLLM writes the time of the current lists as the value.
		fmt.Fprintf(w, "# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n"+
			"vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=%q,waiting_lora_adapters=\"\"} %d\n", adapters, time.Now().Unix())
	}
}

func startBackends(t testing.TB, n int) []*backend {
	t.Helper()
	out := make([]*backend, n)
	for i := range out {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out[i] = serveBackend(t, lis, fmt.Sprintf("replica-%d", i))
	}
	return out
}

// serveBackend serves a replica called id on lis until the test ends.
func serveBackend(t testing.TB, lis net.Listener, id string) *backend {
	t.Helper()
	b := &backend{id: id, addr: lis.Addr().String()}
	g := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(g, b)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", b.serveMetrics)
	// gRPC and HTTP/1.1 on one port, as engines serve their API and
	// /metrics together: gRPC clients speak HTTP/2 with prior knowledge.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Protocols: &protocols,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				g.ServeHTTP(w, r)
				return
			}
			mux.ServeHTTP(w, r)
		}),
	}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return b
}

// member is a backend as written in the policy.
type member struct {
	b      *backend
	weight int
}

func freeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// policyText renders the pool "chat" with the given members, as an
// operator would write it.
func policyText(xdsAddr, adminAddr string, members []member) string {
	return policyTextWith(xdsAddr, adminAddr, members, "")
}

// policyTextWith adds extra blocks (metrics, escape, weights) to the pool.
func policyTextWith(xdsAddr, adminAddr string, members []member, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "xds   { address = %q }\nadmin { address = %q }\n\n", xdsAddr, adminAddr)
	b.WriteString(`pool "chat" {
  port = 10000
  hash {
    algorithm      = "maglev"
    table_size     = 65537
    balance_factor = 150
    key { header = "x-session-id" }
    key { header = "x-tenant-id" }
  }
  static {
`)
	// No hash_key: every endpoint's identity is its address, the one
	// identity grpc-js places on its ring (grpc-go reads hash_key too).
	for _, m := range members {
		fmt.Fprintf(&b, "    endpoint %q {\n      weight = %d\n    }\n", m.b.addr, m.weight)
	}
	b.WriteString("  }\n")
	b.WriteString(extra)
	b.WriteString("}\n")
	return b.String()
}

// withHashSetting adds one setting (e.g. `keyless = "random"`) to the
// hash block of a policy from policyText.
func withHashSetting(t *testing.T, text, setting string) string {
	t.Helper()
	const anchor = "    balance_factor = 150\n"
	if !strings.Contains(text, anchor) {
		t.Fatalf("policy has no %q", anchor)
	}
	return strings.Replace(text, anchor, anchor+"    "+setting+"\n", 1)
}

// policyFile returns where a test's policy goes and free addresses for
// kvxds's xDS and admin servers.
func policyFile(t *testing.T) (path, xdsAddr, adminAddr string) {
	t.Helper()
	return filepath.Join(t.TempDir(), "policy.hcl"), freeAddr(t), freeAddr(t)
}

// writeAtomic replaces path the way editors and ConfigMap volumes do.
func writeAtomic(t testing.TB, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// instance is a running kvxds.
type instance interface {
	stop()
}

type mode struct {
	name  string
	start func(t *testing.T, policyPath, xdsAddr, adminAddr string) instance
}

var modes = []mode{
	{"in-process", startInProcess},
	{"binary", startBinary},
}

type inProcess struct {
	cancel context.CancelFunc
	done   chan error
}

func (p *inProcess) stop() {
	p.cancel()
	<-p.done
}

func startInProcess(t *testing.T, policyPath, xdsAddr, adminAddr string) instance {
	t.Helper()
	c, err := controller.New(controller.Options{
		PolicyFile: policyPath,
		XDSAddress: xdsAddr, AdminAddress: adminAddr,
		Logger:  hclog.New(&hclog.LoggerOptions{Name: "kvxds", Level: hclog.Warn, Output: testWriter{t}}),
		Version: "e2e",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- c.Run(ctx) }()
	waitReady(t, c.AdminAddr())
	return p
}

type binary struct{ cmd *exec.Cmd }

func (b *binary) stop() {
	b.cmd.Process.Signal(os.Interrupt)
	b.cmd.Wait()
}

func startBinary(t *testing.T, policyPath, xdsAddr, adminAddr string) instance {
	t.Helper()
	cmd := exec.Command(kvxdsBinary, "serve", "--policy", policyPath, "--xds", xdsAddr, "--admin", adminAddr, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = testWriter{t}, testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &binary{cmd: cmd}
	waitReady(t, adminAddr)
	return b
}

// startBinaryWith runs the kvxds binary with args and environment env
// (nil: this process's) until stopped; it does not wait for it to be
// ready.
func startBinaryWith(t testing.TB, args, env []string) *binary {
	t.Helper()
	cmd := exec.Command(kvxdsBinary, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = testWriter{t}, testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &binary{cmd: cmd}
}

func waitReady(t testing.TB, adminAddr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("kvxds on %s never became ready", adminAddr)
}

// testWriter sends a child's output to the test log while the test runs.
type testWriter struct{ t testing.TB }

var logMu sync.Mutex

func (w testWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	defer func() { recover() }() // the test may have finished
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newClient is a proxyless gRPC client of pool "chat" whose bootstrap is
// what `kvxds bootstrap --grpc` prints.
func newClient(t *testing.T, xdsAddr string) testgrpc.TestServiceClient {
	t.Helper()
	return newClientOf(t, xdsAddr, "chat")
}

// newClientOf is newClient for any pool.
func newClientOf(t testing.TB, xdsAddr, pool string) testgrpc.TestServiceClient {
	t.Helper()
	cfg, err := bootstrap.GRPCJSON(bootstrap.Options{NodeID: "e2e-" + t.Name(), XDSAddress: xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := xds.NewXDSResolverWithConfigForTesting(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+pool, grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// dataPlane is a kind of proxyless gRPC client the tests run against.
type dataPlane struct {
	name string
	new  func(t *testing.T, xdsAddr string) client
	// byAddress: the client places endpoints on its ring by address,
	// ignoring their hash_key (grpc-js does not implement gRFC A76).
	byAddress bool
}

// dataPlanes are the real xDS clients every end-to-end check runs with.
var dataPlanes = []dataPlane{
	{"grpc-go", newGoClient, false},
	{"grpc-js", newJSClient, true},
}

func sessions(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("conversation-%05d", i)
	}
	return out
}

// sessionCalls is one call per session, carrying its session header.
func sessionCalls(ss []string) [][]string {
	out := make([][]string, len(ss))
	for i, s := range ss {
		out[i] = []string{"x-session-id", s}
	}
	return out
}

// route sends one request per session and returns where each landed;
// every failure fails the test.
func route(t *testing.T, cl client, ss []string) map[string]string {
	t.Helper()
	ids, errs := cl.callMany(sessionCalls(ss))
	out := make(map[string]string, len(ss))
	failed := 0
	for i, s := range ss {
		if errs[i] != nil {
			failed++
			if failed <= 3 {
				t.Errorf("%s: session %s: %v", cl.name(), s, errs[i])
			}
			continue
		}
		out[s] = ids[i]
	}
	if failed > 0 {
		t.Fatalf("%s: %d of %d requests failed", cl.name(), failed, len(ss))
	}
	return out
}

// callWith sends one request carrying the given metadata pairs and returns
// the replica that served it.
func callWith(t *testing.T, cl client, kv ...string) string {
	t.Helper()
	ids, errs := cl.callMany([][]string{kv})
	if errs[0] != nil {
		t.Fatalf("%s: %v", cl.name(), errs[0])
	}
	return ids[0]
}

// shares counts sessions per replica.
func shares(m map[string]string) map[string]int {
	out := map[string]int{}
	for _, id := range m {
		out[id]++
	}
	return out
}

// moved counts sessions whose replica differs between two routings.
func moved(before, after map[string]string) (n int, from, to map[string]int) {
	from, to = map[string]int{}, map[string]int{}
	for s, a := range before {
		if b := after[s]; b != a {
			n++
			from[a]++
			to[b]++
		}
	}
	return n, from, to
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
