package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	luav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvxds/kvxds/test/adsenvoy"
	"github.com/kvxds/kvxds/test/sim"
	"github.com/kvxds/kvxds/xds/bootstrap"
	"github.com/kvxds/kvxds/xds/envoylb"
)

// DataPlane is what carries the load generator's requests to the
// replicas.
type DataPlane string

const (
	// GRPCGo is grpc-go's own xDS client (proxyless gRPC).
	GRPCGo DataPlane = "grpc-go"
	// Envoy routes as an Envoy does with what kvxds serves it over ADS:
	// an ADS client speaking as an Envoy node, Envoy's tables and hash
	// policies from xds/envoylb, bounded load on the requests in flight,
	// the pool's generated Lua filter run by LuaJIT for body keys, and
	// the request sent over HTTP/1.1 to the chosen replica's OpenAI API.
	Envoy DataPlane = "envoy"
)

// ParseDataPlanes parses a comma-separated list of data planes.
func ParseDataPlanes(s string) ([]DataPlane, error) {
	var out []DataPlane
	for _, f := range strings.Split(s, ",") {
		d := DataPlane(strings.TrimSpace(f))
		if d != GRPCGo && d != Envoy {
			return nil, fmt.Errorf("unknown data plane %q; known: %s, %s", d, GRPCGo, Envoy)
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// LuaJIT is where the Envoy data plane finds LuaJIT, which runs the
// pool's generated body-key filter as Envoy's Lua filter would (Envoy
// embeds LuaJIT too).
func LuaJIT() (string, error) {
	p, err := exec.LookPath("luajit")
	if err != nil {
		return "", fmt.Errorf("the envoy data plane runs body keys in LuaJIT, which is not installed (Debian: apt-get install luajit): %w", err)
	}
	return p, nil
}

// envoyClient is one simulated Envoy: an ADS stream as an Envoy node, the
// tables built from what it received, its requests in flight per
// cluster and host (what bounded load and least request read), and its
// HTTP connections to the replicas.
type envoyClient struct {
	ads     *adsenvoy.Subscriber
	hc      *http.Client
	node    *corev3.Node
	xdsAddr string

	mu    sync.Mutex
	state *envoyState // built from the newest resources; nil until complete
	err   error
	lua   *luaFilter
	// active counts requests in flight by cluster and host address;
	// Envoy keeps them per host object, which is per cluster.
	active map[string]map[string]uint32
	total  map[string]uint32
	rr     map[string]uint64 // round-robin position per cluster
	rng    *rand.Rand
	// ids draws the x-request-id the connection manager gives a request
	// that has none; apart from rng, so that the routing draws do not
	// depend on it.
	ids *rand.Rand
	// loggers are the access loggers of the pool's listener, the
	// connection manager's and the router's upstream ones, by their config
	// (Envoy keeps one per distinct config); logging lists the connection
	// manager's in the listener's order, upstreamLogging the router's, and
	// flushUpstreamLog is the router's flush_upstream_log_on_upstream_stream.
	loggers          map[string]*adsenvoy.AccessLogger
	logging          []*adsenvoy.AccessLogger
	upstreamLogging  []*adsenvoy.AccessLogger
	flushUpstreamLog bool
}

// envoyState is what one set of resources gives: the router, the route
// configuration of the pool's listener, its Lua filters in chain order,
// and every cluster's hosts and balancer kind.
type envoyState struct {
	router    *envoylb.Router
	routeName string
	lua       []luaSpec
	clusters  map[string]*envoyCluster
	// accessLogs are the listener's gRPC access loggers; upstreamLogs the
	// router filter's gRPC upstream loggers, and flushUpstreamLog whether
	// they also log when an upstream stream is associated with a request
	// (flush_upstream_log_on_upstream_stream).
	accessLogs       []*grpcalsv3.HttpGrpcAccessLogConfig
	upstreamLogs     []*grpcalsv3.HttpGrpcAccessLogConfig
	flushUpstreamLog bool
}

type envoyCluster struct {
	kind  string // "hash", "round_robin", "least_request", "random"
	hosts []envoylb.Host
	// healthy indexes the hosts the balancer picks from.
	healthy []int
}

// startEnvoy connects an Envoy node to kvxds's ADS server and waits
// until its resources route a request.
func startEnvoy(ctx context.Context, xdsAddr, node string) (*envoyClient, error) {
	e := &envoyClient{hc: &http.Client{Transport: envoyTransport()},
		node:    &corev3.Node{Id: node, Cluster: "kvxds-bench", UserAgentName: "envoy"},
		xdsAddr: xdsAddr,
		active:  map[string]map[string]uint32{}, total: map[string]uint32{}, rr: map[string]uint64{},
		rng: rand.New(rand.NewPCG(nodeSeed(node), 1)), ids: rand.New(rand.NewPCG(nodeSeed(node), 2)),
		loggers: map[string]*adsenvoy.AccessLogger{}}
	ads, err := adsenvoy.Subscribe(xdsAddr, e.node, e.update)
	if err != nil {
		return nil, err
	}
	e.ads = ads
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	for {
		e.mu.Lock()
		ready, err := e.state != nil, e.err
		e.mu.Unlock()
		if ready {
			return e, nil
		}
		select {
		case <-wctx.Done():
			e.close()
			return nil, fmt.Errorf("envoy %s: no complete configuration from kvxds (last error: %v)", node, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// nodeSeed seeds an Envoy's random choices (least request's two hosts,
// keyless hashes) from its node name, so that each Envoy of a run draws
// its own sequence, as separate processes do.
func nodeSeed(node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	return h.Sum64()
}

// envoyTransport is an upstream connection pool: HTTP/1.1, one request
// per connection at a time and connections kept for reuse, as Envoy's
// HTTP/1.1 pool does.
func envoyTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     time.Hour,
		DisableCompression:  true,
	}
}

// update rebuilds the state after each response; the last complete one
// stays while a cluster waits for its assignment, or a response or the
// stream fails.
//
// The tables are built while requests keep routing on the last state, and
// a cluster whose resources did not change keeps its table: Envoy builds a
// cluster's load balancer on its main thread when the cluster's hosts
// change and hands it to the workers, which never wait for it.
func (e *envoyClient) update(r adsenvoy.Resources, err error) {
	if err != nil {
		e.mu.Lock()
		e.err = err
		e.mu.Unlock()
		return
	}
	// Updates come one at a time, from the ADS stream's goroutine.
	e.mu.Lock()
	prev := e.state
	e.mu.Unlock()
	var prevRouter *envoylb.Router
	if prev != nil {
		prevRouter = prev.router
	}
	st, err := buildEnvoyState(r, prevRouter)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.err = err
		return
	}
	e.state, e.err = st, nil
	if err := e.startLoggers(st.accessLogs, st.upstreamLogs); err != nil {
		e.err = fmt.Errorf("access log: %w", err)
	}
	e.flushUpstreamLog = st.flushUpstreamLog
}

// startLoggers keeps one access logger per distinct config of the
// listener, the connection manager's (cfgs) and the router's upstream ones
// (upstream) alike, as Envoy's logger cache does (keyed by config: equal
// configs share a logger), starting new ones and closing those the
// listener no longer has. Every logger goes to kvxds's xDS address
// (buildEnvoyState checked that it names the xDS cluster).
func (e *envoyClient) startLoggers(cfgs, upstream []*grpcalsv3.HttpGrpcAccessLogConfig) error {
	keep := map[string]*adsenvoy.AccessLogger{}
	var err error
	// start lists the loggers of cs, each once.
	start := func(cs []*grpcalsv3.HttpGrpcAccessLogConfig) []*adsenvoy.AccessLogger {
		var out []*adsenvoy.AccessLogger
		for _, c := range cs {
			b, merr := proto.MarshalOptions{Deterministic: true}.Marshal(c)
			if merr != nil {
				err = merr
				return out
			}
			key := string(b)
			l := keep[key]
			if l == nil {
				if l = e.loggers[key]; l == nil {
					if l, err = adsenvoy.NewAccessLogger(e.xdsAddr, e.node, c); err != nil {
						return out
					}
				}
				keep[key] = l
			}
			if !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
		return out
	}
	logging := start(cfgs)
	var upstreamLogging []*adsenvoy.AccessLogger
	if err == nil {
		upstreamLogging = start(upstream)
	}
	for key, l := range e.loggers {
		if keep[key] == nil {
			go l.Close() // flushes, off the ADS goroutine
		}
	}
	e.loggers, e.logging, e.upstreamLogging = keep, logging, upstreamLogging
	return err
}

// buildEnvoyState builds the tables of a complete resource set: the pool's
// listener (PoolName), its route configuration, and every cluster with its
// assignment, keeping prev's tables of unchanged clusters (prev may be
// nil).
func buildEnvoyState(r adsenvoy.Resources, prev *envoylb.Router) (*envoyState, error) {
	st := &envoyState{clusters: map[string]*envoyCluster{}}
	for _, l := range r.Listeners {
		if l.GetName() != PoolName {
			continue
		}
		hcm := adsenvoy.HTTPConnectionManager(l)
		if hcm == nil {
			return nil, errors.New("the pool's listener has no HTTP connection manager")
		}
		st.routeName = hcm.GetRds().GetRouteConfigName()
		als, err := adsenvoy.HTTPGrpcAccessLogs(hcm)
		if err != nil {
			return nil, err
		}
		upstream, flush, err := adsenvoy.RouterUpstreamLogs(hcm)
		if err != nil {
			return nil, err
		}
		for _, c := range slices.Concat(als, upstream) {
			// The simulated Envoy's one static cluster is the bootstrap's
			// xDS cluster; Envoy rejects a listener whose logger names a
			// cluster it does not have.
			if name := c.GetCommonConfig().GetGrpcService().GetEnvoyGrpc().GetClusterName(); name != bootstrap.XDSClusterName {
				return nil, fmt.Errorf("access log %q: cluster %q is not the xDS cluster %q", c.GetCommonConfig().GetLogName(), name, bootstrap.XDSClusterName)
			}
		}
		st.accessLogs, st.upstreamLogs, st.flushUpstreamLog = als, upstream, flush
		for _, f := range hcm.GetHttpFilters() {
			m, err := f.GetTypedConfig().UnmarshalNew()
			if err != nil {
				return nil, err
			}
			if lf, ok := m.(*luav3.Lua); ok {
				st.lua = append(st.lua, luaSpec{name: f.GetName(), source: lf.GetDefaultSourceCode().GetInlineString()})
			}
		}
	}
	if st.routeName == "" {
		return nil, errors.New("no listener for the pool yet")
	}
	i := slices.IndexFunc(r.Routes, func(rc *routev3.RouteConfiguration) bool { return rc.GetName() == st.routeName })
	if i < 0 {
		return nil, fmt.Errorf("no route configuration %s yet", st.routeName)
	}
	for j := range st.lua {
		md, err := routeFilterMetadata(r.Routes[i], st.lua[j].name)
		if err != nil {
			return nil, err
		}
		st.lua[j].metadata = md
	}
	byName := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, cla := range r.Assignments {
		byName[cla.GetClusterName()] = cla
	}
	for _, c := range r.Clusters {
		cla := byName[cmp.Or(c.GetEdsClusterConfig().GetServiceName(), c.GetName())]
		if cla == nil {
			return nil, fmt.Errorf("cluster %s has no assignment yet", c.GetName())
		}
		hosts, _, err := envoylb.Hosts(cla)
		if err != nil {
			return nil, err
		}
		ec := &envoyCluster{kind: clusterKind(c), hosts: hosts}
		for i, h := range hosts {
			if h.Health == envoylb.Healthy {
				ec.healthy = append(ec.healthy, i)
			}
		}
		if len(ec.healthy) == 0 { // Envoy's panic mode: every host
			for i, h := range hosts {
				if h.Health != envoylb.Excluded {
					ec.healthy = append(ec.healthy, i)
				}
			}
		}
		st.clusters[c.GetName()] = ec
	}
	rt, err := envoylb.NewRouterFrom(prev, r.Routes, r.Clusters, r.Assignments)
	if err != nil {
		return nil, err
	}
	st.router = rt
	return st, nil
}

// clusterKind is the load balancer of a cluster as Envoy takes it: the
// first policy of load_balancing_policy it knows, else lb_policy.
func clusterKind(c *clusterv3.Cluster) string {
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		switch u := p.GetTypedExtensionConfig().GetTypedConfig().GetTypeUrl(); {
		case strings.HasSuffix(u, ".RoundRobin"):
			return "round_robin"
		case strings.HasSuffix(u, ".LeastRequest"):
			return "least_request"
		case strings.HasSuffix(u, ".Random"):
			return "random"
		case strings.HasSuffix(u, ".Maglev"), strings.HasSuffix(u, ".RingHash"):
			return "hash"
		}
	}
	switch c.GetLbPolicy() {
	case clusterv3.Cluster_LEAST_REQUEST:
		return "least_request"
	case clusterv3.Cluster_RANDOM:
		return "random"
	case clusterv3.Cluster_MAGLEV, clusterv3.Cluster_RING_HASH:
		return "hash"
	}
	return "round_robin"
}

// close ends the ADS stream, the Lua VM, the access loggers (flushing
// them) and the connections.
func (e *envoyClient) close() {
	e.ads.Close()
	e.mu.Lock()
	if e.lua != nil {
		e.lua.close()
		e.lua = nil
	}
	loggers := e.loggers
	e.loggers, e.logging, e.upstreamLogging = nil, nil, nil
	e.mu.Unlock()
	for _, l := range loggers {
		l.Close()
	}
	e.hc.CloseIdleConnections()
}

// accessLogStats sums the access loggers' counts.
func (e *envoyClient) accessLogStats() adsenvoy.AccessLogStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	var sum adsenvoy.AccessLogStats
	for _, l := range e.loggers {
		s := l.Stats()
		sum.Written += s.Written
		sum.Dropped += s.Dropped
		sum.Messages += s.Messages
		sum.Entries += s.Entries
		sum.Lost += s.Lost
		sum.Streams += s.Streams
	}
	return sum
}

// routing is where the router sent a request: the host and its cluster,
// the headers it routed with (the client's, the connection manager's
// x-request-id and the filters'), the access loggers of the configuration
// that routed it, and its upstream attempt.
type routing struct {
	addr, cluster string
	// override is the upstream host a filter named (not strict), "" for
	// none; addr is it where the cluster took it.
	override string
	headers  [][2]string
	loggers  []*adsenvoy.AccessLogger
	// attempt is the router's upstream request, which the router's
	// upstream loggers log; nil when the configuration has none.
	attempt *upstreamAttempt
	// release ends the request: it writes the attempt's end entry if
	// send has not, and stops counting the host's request in flight.
	release func()
	// respond runs the Lua filters' envoy_on_response, once, when the
	// response starts (or the request fails without one); finish ends
	// the response, after respond.
	respond, finish func()
	// chunk passes the response's first body chunk (its first token) to
	// the filters waiting on its body.
	chunk func()
}

// route runs the pool's filters and router on a request: the Lua filter's
// headers (body keys), the route, and the host, counted in flight until
// release is called.
func (e *envoyClient) route(hdrs [][2]string, body []byte) (addr string, release func(), err error) {
	r, err := e.routeRequest(hdrs, body)
	if err != nil {
		return "", nil, err
	}
	return r.addr, func() { r.respond(); r.finish(); r.release() }, nil
}

// upstreamAttempt is one upstream request of the router, for its upstream
// log: the entry its loggers write (the request headers the router sent,
// content-length among them; the host, cluster, start and attempt number),
// at the attempt's end once.
type upstreamAttempt struct {
	loggers []*adsenvoy.AccessLogger
	entry   adsenvoy.Logged
	once    sync.Once
}

// end writes the attempt's UpstreamEnd entry, once, with the response's
// code and the time to its first byte (zero: none).
func (a *upstreamAttempt) end(code int, firstByte time.Duration) {
	if a == nil {
		return
	}
	a.once.Do(func() {
		e := a.entry
		e.Type, e.Code, e.FirstUpstreamByte = accesslogdatav3.AccessLogType_UpstreamEnd, code, firstByte
		for _, l := range a.loggers {
			l.Log(e)
		}
	})
}

// withRequestID is hdrs with an x-request-id, a random UUID (version 4)
// drawn from rng, when they carry none, as Envoy's connection manager
// sets one (generate_request_id defaults to true) on each request before
// its filters run; hdrs itself is not changed.
func withRequestID(hdrs [][2]string, rng *rand.Rand) [][2]string {
	if slices.ContainsFunc(hdrs, func(h [2]string) bool { return strings.EqualFold(h[0], "x-request-id") }) {
		return hdrs
	}
	hi, lo := rng.Uint64(), rng.Uint64()
	hi = hi&^0xf000 | 0x4000     // version 4
	lo = lo&^(0xc<<60) | 0x8<<60 // RFC 4122 variant
	id := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, hi>>16&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
	return append(slices.Clip(hdrs), [2]string{"x-request-id", id})
}

// withContentLength is hdrs with a content-length of n when they carry
// none: the router's request headers declare the body's length (the Lua
// filters see it, but the simulated filters leave it out of the headers
// they return, and a client's header list need not carry it).
func withContentLength(hdrs [][2]string, n int) [][2]string {
	if slices.ContainsFunc(hdrs, func(h [2]string) bool { return strings.EqualFold(h[0], "content-length") }) {
		return hdrs
	}
	return append(slices.Clip(hdrs), [2]string{"content-length", strconv.Itoa(n)})
}

func (e *envoyClient) routeRequest(hdrs [][2]string, body []byte) (r routing, err error) {
	var addr string
	e.mu.Lock()
	st := e.state
	if st != nil {
		// The connection manager's request id, before the filters.
		hdrs = withRequestID(hdrs, e.ids)
	}
	var lua *luaFilter
	if st != nil && len(st.lua) > 0 {
		if e.lua == nil || !e.lua.runs(st.lua) {
			if e.lua != nil {
				e.lua.close()
			}
			if e.lua, err = startLua(st.lua); err != nil {
				e.mu.Unlock()
				return r, err
			}
		}
		lua = e.lua
	}
	e.mu.Unlock()
	if st == nil {
		return r, errors.New("envoy has no configuration")
	}
	respond, finish, chunk := func() {}, func() {}, func() {}
	if lua != nil {
		// The filters see the client's headers and the body, and leave
		// the headers the router and the upstream see.
		var id uint64
		if hdrs, id, err = lua.run(st.lua, hdrs, body); err != nil {
			return r, err
		}
		var once sync.Once
		respond = func() { once.Do(func() { lua.respond(id) }) }
		finish = func() { lua.finish(id) }
		chunk = func() { lua.response('C', id) }
	}
	// A filter's upstream override host (setUpstreamOverrideHost) is no
	// header: the router takes it, not the upstream.
	var override string
	if i := slices.IndexFunc(hdrs, func(h [2]string) bool { return h[0] == ":override" }); i >= 0 {
		override = hdrs[i][1]
		hdrs = slices.Delete(slices.Clone(hdrs), i, i+1)
	}
	req := &envoylb.Request{Path: "/v1/completions", Headers: hdrs}

	e.mu.Lock()
	defer e.mu.Unlock()
	active := func(cluster string) map[string]uint32 {
		m := e.active[cluster]
		if m == nil {
			m = map[string]uint32{}
			e.active[cluster] = m
		}
		return m
	}
	// Bounded load reads the cluster's requests in flight; the decision
	// needs the cluster first, so route once without load to learn it.
	d, err := st.router.Pick(st.routeName, req, nil)
	if err != nil {
		return r, err
	}
	ec := st.clusters[d.Cluster]
	if ec == nil {
		return r, fmt.Errorf("no cluster %s", d.Cluster)
	}
	act := active(d.Cluster)
	host := -1
	switch {
	case override != "" && ec.overridable(override):
		// Envoy takes an override host the cluster has in a status of
		// override_host_status (by default unknown, healthy or degraded)
		// over its balancer's choice; not strict, it ignores one it has
		// not (HostUtility::selectOverrideHost).
		addr = strings.TrimSuffix(override, " strict")
	case ec.kind == "hash":
		b := st.router.Balancer(d.Cluster)
		load := &envoylb.Load{Active: make([]uint32, len(b.Hosts)), Total: e.total[d.Cluster]}
		for i := range b.Hosts {
			load.Active[i] = act[b.Hosts[i].Address]
		}
		h := d.Hash
		if !d.Hashed { // Envoy hashes a random value
			h = e.rng.Uint64()
		}
		if i := b.Choose(h, load); i >= 0 {
			addr = b.Hosts[i].Address
		}
	case len(ec.healthy) == 0:
	case ec.kind == "least_request":
		// Envoy's default: the fewer in flight of two random hosts (all
		// weights equal here).
		a := ec.healthy[e.rng.IntN(len(ec.healthy))]
		b := ec.healthy[e.rng.IntN(len(ec.healthy))]
		host = a
		if act[ec.hosts[b].Address] < act[ec.hosts[a].Address] {
			host = b
		}
	case ec.kind == "random":
		host = ec.healthy[e.rng.IntN(len(ec.healthy))]
	default:
		if _, ok := e.rr[d.Cluster]; !ok {
			// Envoy starts each round-robin balancer at a random host
			// (EdfLoadBalancerBase: seed_ % hosts), so Envoys do not
			// rotate in step.
			e.rr[d.Cluster] = e.rng.Uint64() >> 1
		}
		host = ec.weightedRR(e.rr[d.Cluster])
		e.rr[d.Cluster]++
	}
	if host >= 0 {
		addr = ec.hosts[host].Address
	}
	if addr == "" {
		return r, fmt.Errorf("cluster %s has no host", d.Cluster)
	}
	act[addr]++
	e.total[d.Cluster]++
	cluster := d.Cluster
	var attempt *upstreamAttempt
	if len(e.upstreamLogging) > 0 {
		// The router's upstream request, its first attempt (the simulated
		// router does not retry). With flush_upstream_log_on_upstream_stream
		// Envoy logs once the connection pool hands the attempt its stream
		// (UpstreamPoolReady); the simulated Envoy's pool is ready once the
		// host is chosen.
		attempt = &upstreamAttempt{loggers: e.upstreamLogging, entry: adsenvoy.Logged{
			Headers: withContentLength(hdrs, len(body)), Method: http.MethodPost, Path: req.Path,
			Upstream: addr, Cluster: cluster, Start: time.Now(), Attempt: 1}}
		if e.flushUpstreamLog {
			ready := attempt.entry
			ready.Type = accesslogdatav3.AccessLogType_UpstreamPoolReady
			for _, l := range attempt.loggers {
				l.Log(ready)
			}
		}
	}
	return routing{addr: addr, cluster: cluster, override: override, headers: hdrs, loggers: e.logging, attempt: attempt,
		respond: respond, finish: finish, chunk: chunk, release: func() {
			attempt.end(0, 0)
			e.mu.Lock()
			e.active[cluster][addr]--
			e.total[cluster]--
			e.mu.Unlock()
		}}, nil
}

// overridable reports whether the cluster takes override host h (a
// filter's setUpstreamOverrideHost, " strict" after it if strict): a host
// of its set, healthy or degraded.
func (ec *envoyCluster) overridable(h string) bool {
	h = strings.TrimSuffix(h, " strict")
	for _, x := range ec.hosts {
		if x.Address == h {
			return x.Health == envoylb.Healthy || x.Health == envoylb.Degraded
		}
	}
	return false
}

// weightedRR is the n-th pick of a weighted rotation over the healthy
// hosts: each host appears weight times per round, interleaved (Envoy's
// EDF scheduler gives the same shares).
func (ec *envoyCluster) weightedRR(n uint64) int {
	var sum uint64
	for _, i := range ec.healthy {
		sum += max(uint64(ec.hosts[i].Weight), 1)
	}
	pos := n % sum
	maxW := uint64(0)
	for _, i := range ec.healthy {
		maxW = max(maxW, max(uint64(ec.hosts[i].Weight), 1))
	}
	// Rounds of the rotation: in round k, hosts of weight > k take a turn.
	for k := uint64(0); k < maxW; k++ {
		for _, i := range ec.healthy {
			if max(uint64(ec.hosts[i].Weight), 1) > k {
				if pos == 0 {
					return i
				}
				pos--
			}
		}
	}
	return ec.healthy[0]
}

// completionsBody is the OpenAI completions request the Envoy data plane
// sends: the same prompt as the gRPC payload, so the engines see the same
// tokens under both data planes; the prompt comes first. A request under
// an adapter names it as the model, which the engine runs under (without
// one, the engine's own base model).
func completionsBody(r *Request) []byte {
	b := make([]byte, 0, len(r.Prompt)+len(r.Adapter)+80)
	b = append(b, `{"prompt":`...)
	b = strconv.AppendQuote(b, r.Prompt) // workload text is printable ASCII
	if r.Adapter != "" {
		b = append(b, `,"model":`...)
		b = strconv.AppendQuote(b, r.Adapter)
	}
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(r.MaxTokens), 10)
	b = append(b, `,"stream":true}`...)
	return b
}

// send sends one request through Envoy e and streams its reply. Envoy's
// filters read the chat body a client sends (KeyBody); with bodyKeyed
// they key on it and no x-session-id goes out. The engine is sent the
// completions body either way, so that it sees the same tokens in every
// mode. extra are more headers the client sends.
func (e *envoyClient) send(ctx context.Context, r *Request, start time.Time, bodyKeyed bool, extra ...[2]string) reqResult {
	res := reqResult{Sent: time.Since(start), First: -1, EngineTTFT: nan()}
	var hdrs [][2]string
	// The filters read the chat body a chat client sends, which carries
	// the body keys and the spread sub-key.
	routed := KeyBody(r)
	if !bodyKeyed && r.Session != "" {
		hdrs = append(hdrs, [2]string{SessionHeader, r.Session})
	}
	hdrs = append(hdrs, extra...)
	rt, err := e.routeRequest(hdrs, routed)
	if err != nil {
		res.Err, res.Done = err, time.Since(start)
		return res
	}
	defer rt.release()
	began := time.Now()
	entry := adsenvoy.Logged{Headers: rt.headers, Method: http.MethodPost, Path: "/v1/completions",
		Upstream: rt.addr, Cluster: rt.cluster, Start: began}
	// Envoy logs each request once it completes, whatever its outcome:
	// the router's upstream attempt as it ends, then the connection
	// manager's entry.
	defer func() {
		rt.attempt.end(entry.Code, entry.FirstUpstreamByte)
		entry.LastDownstreamByte = time.Since(began)
		for _, l := range rt.loggers {
			l.Log(entry)
		}
	}()
	// Envoy forwards the headers its filters left, the prefill header
	// among them.
	var headersAt time.Time
	// Envoy's encoders run on the response's headers, or on the local
	// reply of a request that got none.
	defer rt.finish()
	defer rt.respond()
	entry.Code = streamCompletion(ctx, e.hc, rt.addr, rt.headers, r, start, &res, func() { headersAt = time.Now(); rt.respond() }, func() { rt.chunk() })
	if !headersAt.IsZero() {
		entry.FirstUpstreamByte = headersAt.Sub(began)
	}
	return res
}

// streamCompletion posts r's completions body with headers hdrs to the
// replica at addr and streams the reply into res, whose Sent is set; it
// returns the response's status (0 without one). onHeaders, if set, is
// called when the response's headers arrive, onFirst at its first token.
// A decode replica's prefill accounting (sim.HeaderPrefillPrompt and the
// rest) goes into res.PD.
func streamCompletion(ctx context.Context, hc *http.Client, addr string, hdrs [][2]string, r *Request, start time.Time,
	res *reqResult, onHeaders, onFirst func()) int {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/completions", bytes.NewReader(completionsBody(r)))
	if err != nil {
		res.Err, res.Done = err, time.Since(start)
		return 0
	}
	hreq.Header.Set("Content-Type", "application/json")
	for _, h := range hdrs {
		hreq.Header.Set(h[0], h[1])
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		res.Err, res.Done = err, time.Since(start)
		return 0
	}
	defer resp.Body.Close()
	if onHeaders != nil {
		onHeaders()
	}
	res.Replica = resp.Header.Get(sim.HeaderReplicaID)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.Err, res.Done = fmt.Errorf("%s from %s: %s", resp.Status, addr, bytes.TrimSpace(msg)), time.Since(start)
		return resp.StatusCode
	}
	res.PromptTokens, _ = strconv.Atoi(resp.Header.Get(sim.HeaderPromptTokens))
	res.CachedTokens, _ = strconv.Atoi(resp.Header.Get(sim.HeaderCachedTokens))
	if f, err := strconv.ParseFloat(resp.Header.Get(sim.HeaderTTFT), 64); err == nil {
		res.EngineTTFT = f
	}
	if v := resp.Header.Get(sim.HeaderPrefillPrompt); v != "" {
		pd := &pdAccount{Replica: resp.Header.Get(sim.HeaderPrefillReplica)}
		pd.Prompt, _ = strconv.Atoi(v)
		pd.Cached, _ = strconv.Atoi(resp.Header.Get(sim.HeaderPrefillCached))
		pd.Transferred, _ = strconv.Atoi(resp.Header.Get(sim.HeaderTransferred))
		pd.TTFT = nan()
		if f, err := strconv.ParseFloat(resp.Header.Get(sim.HeaderPrefillTTFT), 64); err == nil {
			pd.TTFT = f
		}
		res.PD = pd
	}
	// Server-sent events, one chunk per token: count them without
	// decoding; an error chunk ends the stream.
	br := bufio.NewReaderSize(resp.Body, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data: {")) {
			if bytes.HasPrefix(line, []byte(`data: {"error"`)) {
				res.Err = fmt.Errorf("stream error from %s: %s", addr, bytes.TrimSpace(line))
				break
			}
			if res.Tokens == 0 {
				res.First = time.Since(start)
				if onFirst != nil {
					onFirst()
				}
			}
			res.Tokens++
		}
		if err != nil {
			if err != io.EOF {
				res.Err = err
			}
			break
		}
	}
	res.Done = time.Since(start)
	if res.Err == nil && res.Tokens != r.MaxTokens {
		res.Err = fmt.Errorf("request %d: %d tokens streamed, want %d", r.Seq, res.Tokens, r.MaxTokens)
	}
	return resp.StatusCode
}

// warm opens a connection to every replica (a GET /health each, which no
// engine counter sees), so the first requests pay no connection setup.
func (e *envoyClient) warm(ctx context.Context, addrs []string) error {
	for _, a := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := e.hc.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return nil
}

// luaSpec is one Lua filter of the pool's listener: its name (the route
// metadata namespace handle:metadata() reads), its source, and its
// metadata on the pool's routes as a Lua table constructor ("{}" when
// the routes carry none).
type luaSpec struct {
	name, source string
	metadata     string
}

// routeFilterMetadata is the filter metadata of namespace name on the
// routes of rc, as a Lua table constructor. Envoy's handle:metadata()
// reads the metadata of the route the request matches when the filter
// asks, on the headers the filters before it left (a Lua filter's header
// changes clear the route cache). The simulated Envoy runs its filters
// before it routes: where every route carries the same metadata it
// sends that; otherwise a table whose __routes lists each route's header
// matchers (exact values, or presence; nothing else is supported) and
// metadata, in order, which the driver matches at the filter's first
// read (kvxds puts an adapter's own pick table on its route).
func routeFilterMetadata(rc *routev3.RouteConfiguration, name string) (string, error) {
	var out *structpb.Struct
	first, same := true, true
	var routes []*routev3.Route
	for _, vh := range rc.GetVirtualHosts() {
		for _, rt := range vh.GetRoutes() {
			routes = append(routes, rt)
			md := rt.GetMetadata().GetFilterMetadata()[name]
			if first {
				out, first = md, false
				continue
			}
			same = same && proto.Equal(md, out)
		}
	}
	var b strings.Builder
	if same {
		luaValue(&b, structpb.NewStructValue(out))
		return b.String(), nil
	}
	b.WriteString("{__routes = {")
	for _, rt := range routes {
		if rt.GetMatch().GetPrefix() != "/" || len(rt.GetMatch().GetQueryParameters()) > 0 {
			return "", fmt.Errorf("route configuration %s: the routes carry different %s metadata and a route matches other than headers", rc.GetName(), name)
		}
		b.WriteString("{m = {")
		for _, h := range rt.GetMatch().GetHeaders() {
			b.WriteString("{")
			luaQuote(&b, strings.ToLower(h.GetName()))
			switch {
			case h.GetPresentMatch():
			case h.GetStringMatch().GetExact() != "":
				b.WriteString(", ")
				luaQuote(&b, h.GetStringMatch().GetExact())
			default:
				return "", fmt.Errorf("route configuration %s: the routes carry different %s metadata and header %s is matched other than by presence or value", rc.GetName(), name, h.GetName())
			}
			b.WriteString("}, ")
		}
		b.WriteString("}, md = ")
		md := rt.GetMetadata().GetFilterMetadata()[name]
		if md == nil {
			md = &structpb.Struct{}
		}
		luaValue(&b, structpb.NewStructValue(md))
		b.WriteString("}, ")
	}
	b.WriteString("}}")
	return b.String(), nil
}

// luaValue writes v as a Lua expression, as Envoy hands metadata to a Lua
// filter: structs as tables keyed by field (sorted, so equal metadata
// writes equal text), lists as sequences, null as nil.
func luaValue(b *strings.Builder, v *structpb.Value) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		luaQuote(b, k.StringValue)
	case *structpb.Value_NumberValue:
		b.WriteString(strconv.FormatFloat(k.NumberValue, 'g', -1, 64))
	case *structpb.Value_BoolValue:
		b.WriteString(strconv.FormatBool(k.BoolValue))
	case *structpb.Value_ListValue:
		b.WriteByte('{')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				b.WriteByte(',')
			}
			luaValue(b, e)
		}
		b.WriteByte('}')
	case *structpb.Value_StructValue:
		fields := k.StructValue.GetFields()
		names := slices.Sorted(maps.Keys(fields))
		b.WriteByte('{')
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('[')
			luaQuote(b, n)
			b.WriteString("]=")
			luaValue(b, fields[n])
		}
		b.WriteByte('}')
	default:
		b.WriteString("nil")
	}
}

// luaQuote writes s as a Lua 5.1 string literal: printable ASCII as it
// is, every other byte, quote and backslash as a three-digit decimal
// escape.
func luaQuote(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(b, "\\%03d", c)
	}
	b.WriteByte('"')
}

// luaFilter is a LuaJIT process running a listener's Lua filters, each
// in an environment of its own as Envoy gives each filter config its own
// Lua state, with a stand-in for Envoy's request handle: it is fed each
// request's headers and body, runs the filters' envoy_on_request in chain
// order, and answers the headers they leave. One request at a time.
type luaFilter struct {
	sources []string // the filters' sources, in chain order
	dir     string
	cmd     *exec.Cmd
	in      *bufio.Writer
	stdin   io.Closer
	out     *bufio.Reader
	mu      sync.Mutex
	// metadata is the route metadata each filter was last sent.
	metadata []string
	// requests counts the requests run, which number them.
	requests uint64
	broken   atomic.Bool
}

// luaDriver loads each filter named on its command line (a file per
// filter) into an environment of its own. It then reads commands from
// stdin:
//
//	M <filter> <bytes>\n<Lua expression>   the filter's route metadata
//	R <headers> <bytes>\n<name\tvalue\n>...<body>   a request
//	E <request> 0\n   the response of a request starts
//	F <request> 0\n   the response of a request ends
//
// For a request it runs every filter's envoy_on_request as Envoy's Lua
// filter would (content-length declared, body buffered, the route's
// metadata under the filter's name, of the route the headers match when
// the filter first reads it, the stream's dynamic metadata), and
// prints the headers left, but pseudo-headers and content-length, as
// name=value, tab-separated, sorted, on one line; an upstream override
// host a filter set (setUpstreamOverrideHost) as ":override=host", and
// " strict" after it if strict. Requests are numbered from 1 in order.
// For a response it runs the envoy_on_response of every filter that has
// one, in reverse order as Envoy's encoders run, each as a coroutine
// whose handle:bodyChunks() iterator yields a chunk when the response's
// first token comes (C) and ends when the response ends (F), and prints
// nothing.
const luaDriver = `
local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } kvxds_timespec;
  int clock_gettime(int clk, kvxds_timespec *ts);
]]
local ts = ffi.new("kvxds_timespec")
-- Envoy's handle:timestamp(): milliseconds since the epoch.
local function now_ms()
  ffi.C.clock_gettime(0, ts)
  return tonumber(ts.tv_sec) * 1000 + math.floor(tonumber(ts.tv_nsec) / 1e6)
end
local filters = {}
for i = 1, #arg do
  local chunk = assert(loadfile(arg[i]))
  local env = setmetatable({}, {__index = _G})
  setfenv(chunk, env)
  chunk()
  filters[i] = {env = env, md = {}}
end
local out = io.stdout
out:setvbuf("full")
local streams, ending, nreq = {}, {}, 0
while true do
  local line = io.read("*l")
  if line == nil then break end
  local cmd, a, b = string.match(line, "^(%a) (%d+) (%d+)$")
  a, b = tonumber(a), tonumber(b)
  if cmd == "M" then
    local s = io.read(b)
    filters[a + 1].md = assert(loadstring("return " .. s))() or {}
  elseif cmd == "R" then
    local t = {}
    for _ = 1, a do
      local h = io.read("*l")
      local k, v = string.match(h, "^([^\t]*)\t(.*)$")
      t[string.lower(k)] = v
    end
    local s = ""
    if b > 0 then s = io.read(b) end
    t[":method"] = "POST"
    t["content-length"] = tostring(b)
    local headers = {}
    function headers:get(name) return t[name] end
    function headers:replace(name, value) t[name] = tostring(value) end
    function headers:add(name, value) if t[name] == nil then t[name] = tostring(value) end end
    function headers:remove(name) t[name] = nil end
    local body = {}
    function body:length() return #s end
    function body:getBytes(i, k)
      if i < 0 or k < 0 or i + k > #s then error("index/length out of range") end
      return string.sub(s, i + 1, i + k)
    end
    local ns = {}
    local dm = {}
    function dm:set(filter, key, value) ns[filter] = ns[filter] or {}; ns[filter][key] = value end
    function dm:get(filter) return ns[filter] end
    local si = {}
    function si:dynamicMetadata() return dm end
    nreq = nreq + 1
    streams[nreq] = si
    for _, f in ipairs(filters) do
      local md, routed = {}, nil
      function md:get(key)
        local rs = f.md.__routes
        if rs == nil then return f.md[key] end
        if routed == nil then
          routed = {}
          for _, r in ipairs(rs) do
            local ok = true
            for _, c in ipairs(r.m) do
              local v = t[c[1]]
              if v == nil or (c[2] ~= nil and v ~= c[2]) then ok = false; break end
            end
            if ok then routed = r.md; break end
          end
        end
        return routed[key]
      end
      local handle = {}
      function handle:headers() return headers end
      function handle:body() if #s == 0 then return nil end return body end
      function handle:metadata() return md end
      function handle:streamInfo() return si end
      function handle:logWarn(msg) end
      function handle:timestamp() return now_ms() end
      function handle:setUpstreamOverrideHost(host, strict)
        t[":override"] = host .. (strict and " strict" or "")
      end
      f.env.envoy_on_request(handle)
    end
    local set = {}
    for k, v in pairs(t) do
      if (string.sub(k, 1, 1) ~= ":" or k == ":override") and k ~= "content-length" then set[#set + 1] = k .. "=" .. v end
    end
    table.sort(set)
    out:write(table.concat(set, "\t"), "\n")
    out:flush()
  elseif cmd == "E" then
    local si = streams[a]
    streams[a] = nil
    if si ~= nil then
      local waiting = {}
      for k = #filters, 1, -1 do
        local f = filters[k]
        if f.env.envoy_on_response ~= nil then
          local handle = {}
          function handle:streamInfo() return si end
          function handle:logWarn(msg) end
          function handle:bodyChunks()
            return function() return coroutine.yield() end
          end
          local co = coroutine.create(f.env.envoy_on_response)
          assert(coroutine.resume(co, handle))
          if coroutine.status(co) == "suspended" then waiting[#waiting + 1] = co end
        end
      end
      if #waiting > 0 then ending[a] = waiting end
    end
  elseif cmd == "C" then
    for _, co in ipairs(ending[a] or {}) do
      if coroutine.status(co) == "suspended" then assert(coroutine.resume(co, {})) end
    end
  elseif cmd == "F" then
    local waiting = ending[a]
    ending[a] = nil
    for _, co in ipairs(waiting or {}) do
      if coroutine.status(co) == "suspended" then assert(coroutine.resume(co)) end
    end
  else
    error("bad command: " .. line)
  end
end
`

// startLua starts LuaJIT on the filters fs.
func startLua(fs []luaSpec) (*luaFilter, error) {
	bin, err := LuaJIT()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kvxds-bench-lua-")
	if err != nil {
		return nil, err
	}
	driver := filepath.Join(dir, "driver.lua")
	args := []string{driver}
	l := &luaFilter{dir: dir, metadata: make([]string, len(fs))}
	for i, f := range fs {
		script := filepath.Join(dir, fmt.Sprintf("filter-%d.lua", i))
		if err := os.WriteFile(script, []byte(f.source), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, script)
		l.sources = append(l.sources, f.source)
	}
	if err := os.WriteFile(driver, []byte(luaDriver), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	l.cmd, l.stdin = cmd, stdin
	l.in, l.out = bufio.NewWriterSize(stdin, 64<<10), bufio.NewReader(stdout)
	return l, nil
}

// runs reports whether l runs exactly the filters fs (their metadata may
// differ: run sends it).
func (l *luaFilter) runs(fs []luaSpec) bool {
	if len(fs) != len(l.sources) {
		return false
	}
	for i, f := range fs {
		if f.source != l.sources[i] {
			return false
		}
	}
	return true
}

// respond runs the filters' envoy_on_response for request id (from run).
func (l *luaFilter) respond(id uint64) { l.response('E', id) }

// finish ends the response of request id (from run): the filters'
// envoy_on_response coroutines waiting on its body resume.
func (l *luaFilter) finish(id uint64) { l.response('F', id) }

// response sends the driver command cmd (E or F) for request id.
func (l *luaFilter) response(cmd byte, id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken.Load() {
		return
	}
	fmt.Fprintf(l.in, "%c %d 0\n", cmd, id)
	if err := l.in.Flush(); err != nil {
		l.broken.Store(true)
	}
}

// run is the headers the filters fs (those l runs, with the metadata of
// the newest routes) leave on a request with headers hdrs and this body,
// and the request's number for respond.
func (l *luaFilter) run(fs []luaSpec, hdrs [][2]string, body []byte) ([][2]string, uint64, error) {
	for _, h := range hdrs {
		if strings.ContainsAny(h[0], "\t\n\r=") || strings.ContainsAny(h[1], "\t\n\r") {
			return nil, 0, fmt.Errorf("header %q: the simulated Envoy's filters take no tab, newline or '=' in a name", h[0])
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken.Load() {
		return nil, 0, errors.New("the Lua filter's process failed")
	}
	for i, f := range fs {
		// An RDS update changes the metadata, not the filters.
		if f.metadata != l.metadata[i] {
			fmt.Fprintf(l.in, "M %d %d\n%s", i, len(f.metadata), f.metadata)
			l.metadata[i] = f.metadata
		}
	}
	l.requests++
	id := l.requests
	fmt.Fprintf(l.in, "R %d %d\n", len(hdrs), len(body))
	for _, h := range hdrs {
		fmt.Fprintf(l.in, "%s\t%s\n", h[0], h[1])
	}
	l.in.Write(body)
	if err := l.in.Flush(); err != nil {
		l.broken.Store(true)
		return nil, 0, fmt.Errorf("lua: %w", err)
	}
	line, err := l.out.ReadString('\n')
	if err != nil {
		l.broken.Store(true)
		return nil, 0, fmt.Errorf("lua: %w", err)
	}
	var out [][2]string
	for _, kv := range strings.Split(strings.TrimSuffix(line, "\n"), "\t") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out = append(out, [2]string{k, v})
		}
	}
	return out, id, nil
}

func (l *luaFilter) close() {
	l.stdin.Close()
	l.cmd.Wait()
	os.RemoveAll(l.dir)
}
