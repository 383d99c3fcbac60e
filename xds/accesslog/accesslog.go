// Package accesslog serves Envoy's access log service
// (envoy.service.accesslog.v3.AccessLogService, the
// envoy.access_loggers.http_grpc logger) on the xDS server: the requests
// each Envoy routed, with the key headers kvxds asked it to log, so that
// kvxds learns which key values are hot across every Envoy, and which
// requests left their key's replica.
//
// A stream must name an Envoy node in its first message (the node check
// ADS data planes pass, see Check); otherwise it is refused with a gRPC
// status and counted. Each HTTP entry becomes a Request handed to a
// Sink: its pool (from the logger's name "kvxds/<pool>", else its upstream
// cluster), the first key of the pool's chain present in its logged
// headers, its spread sub-key and its upstream host. Entries that cannot
// be read are counted by reason and dropped; nothing an Envoy sends can
// fail the server.
//
// A pool whose pick filters bound on the fleet's load also has its
// router's upstream log ("kvxds-load/<pool>"): an entry when each
// request's upstream stream starts and another when it ends, handed to a
// LoadSink, which counts every replica's bytes in flight and, in a pool
// placing LoRA adapters, the adapters in flight there.
//
// Logging is best effort and off the request path: Envoy buffers entries
// and drops them when kvxds is away, and each Envoy streams to the one
// kvxds instance it is connected to, so an instance sees a sample of the
// fleet's traffic (all of it when there is one instance).
package accesslog

import (
	"errors"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/hotkeys"
	"github.com/kvxds/kvxds/inflight"
	"github.com/kvxds/kvxds/xds/server"
	"github.com/kvxds/kvxds/xds/translate"
)

// SpreadHeader is the request header of the spread sub-key.
const SpreadHeader = fleet.DefaultSpreadHeader

// Request is one logged request of a pool.
type Request struct {
	Pool string
	// Key is the index in the pool's key chain of the first key whose
	// header the request carried, Value that header's value.
	Key   int
	Value string
	// Spread is the request's spread sub-key header, "" if none.
	Spread string
	// Cluster is the upstream cluster, Upstream the upstream host's
	// address as Envoy prints it ("10.0.0.1:8000"), "" if none.
	Cluster, Upstream string
	// Start is when the request started (the time it was received if
	// the entry has none), Duration how long it took.
	Start    time.Time
	Duration time.Duration
	// Adapter is the request's LoRA adapter header, AdapterRejected the
	// reason the Lua filter named none from a body that had the field
	// (fleet.AdapterRejectedHeader); both "" if absent or the pool
	// places no adapters. A request of such a pool is handed to the sink
	// with or without a key (Key -1 without).
	Adapter, AdapterRejected string
	// Prefill is the prefill replica the decode pool's Lua filter named
	// (host:port), "" if none or the pool is no decode pool. A decode
	// pool's request is handed to the sink with or without a key.
	Prefill string
	// Followed is whether the pick or prefill filter sent the request
	// where its key's last request went rather than to its slot's
	// replica (bodykey.WentHeader).
	Followed bool
	// PrefillValue is the value of the first of the prefill pool's keys
	// the decode pool's request carried, PrefillKey its index in that
	// chain; "" and 0 if none (or the pool is no decode pool).
	PrefillKey   int
	PrefillValue string
}

// PrefillSink is a Sink that also counts the requests of decode pools
// (prefill/decode disaggregation).
type PrefillSink interface {
	Sink
	// PrefillHeader is the prefill header of a pool (as KeyHeaders
	// names it), "" when it is no decode pool.
	PrefillHeader(pool string) string
	// PrefillKeys is a decode pool's prefill pool and the request headers
	// of its key chain as the decode listener logs them (as KeyHeaders
	// says them): a decode pool's logged request is also a request of its
	// prefill pool, whose hot keys are learned from it.
	PrefillKeys(pool string) (prefill string, headers []string)
}

// AdapterSink is a Sink that also counts the requests of pools placing
// LoRA adapters.
type AdapterSink interface {
	Sink
	// AdapterHeader is the adapter header of a pool (as KeyHeaders
	// names it), "" when the pool places no adapters.
	AdapterHeader(pool string) string
}

// LoadSink receives the load log's entries (translate.LoadLogPrefix):
// the start and end of each request's upstream attempt, by stream (one
// per Envoy worker's logger) and request key (its x-request-id, attempt
// and upstream host, the same in both entries).
type LoadSink interface {
	// LoadPool resolves a load log's pool name to how its entries
	// count; false for a pool kvxds does not serve.
	LoadPool(name string) (LoadLog, bool)
	Start(stream uint64, pool, key string, a inflight.Attempt)
	End(stream uint64, pool, key string)
	// Computed is told the request ids a start entry names as computed
	// (translate.LoadLogComputed): their prompts no longer count.
	Computed(stream uint64, pool string, ids []string)
	// CloseStream is told that a stream ended: its open requests' ends
	// will not come.
	CloseStream(stream uint64)
}

// LoadLog is how a load log's entries count (LoadSink.LoadPool).
type LoadLog struct {
	// Pool is the pool whose replicas the requests load: the log's own,
	// or a decode pool's prefill pool.
	Pool string
	// AdapterHeader names each request's LoRA adapter ("" if the pool
	// places none).
	AdapterHeader string
	// HostHeader, in a decode pool's log, names the prefill replica each
	// request loads (a request without one, prefilled on its decode
	// replica, loads none); "" counts the upstream host.
	HostHeader string
}

// Sink receives the logged requests.
type Sink interface {
	// KeyHeaders resolves a pool, named by its name or by one of its
	// clusters, to its name and the request headers of its key chain as
	// Envoy logs them, in chain order ("" for a key no header carries).
	// False for a name that is no pool.
	KeyHeaders(name string) (pool string, headers []string, ok bool)
	// Observe receives a request with a key.
	Observe(Request)
}

// Results of an entry, as kvxds_access_log_entries_total labels them.
const (
	ResultObserved    = "observed"     // a keyed request, handed to the sink
	ResultNoKey       = "no_key"       // a request of the pool without a key
	ResultUnknownPool = "unknown_pool" // names a pool kvxds does not serve
	// Malformed entries, dropped.
	ResultNoPool    = "malformed_no_pool"    // neither log name nor upstream cluster
	ResultNoRequest = "malformed_no_request" // no request properties
	ResultBadValue  = "malformed_value"      // a key value too long or not printable
	ResultTCP       = "malformed_tcp"        // TCP entries: kvxds asks only for HTTP ones
	// Load log entries (LoadSink).
	ResultLoad       = "load"             // a start or end, handed to the load sink
	ResultLoadOther  = "load_other"       // another type of entry (a periodic one), ignored
	ResultBadLoad    = "malformed_load"   // no request id or upstream host, or a bad length
	ResultNoLoadSink = "load_not_tracked" // a load log, and this instance counts no load
)

var results = []string{ResultObserved, ResultNoKey, ResultUnknownPool, ResultNoPool, ResultNoRequest, ResultBadValue, ResultTCP,
	ResultLoad, ResultLoadOther, ResultBadLoad, ResultNoLoadSink}

// Reasons a stream is refused, as kvxds_access_log_streams_refused_total
// labels them.
const (
	RefusedNoNode   = "no_node"   // the first message names no node
	RefusedNotEnvoy = "not_envoy" // the node is a proxyless gRPC client
)

// Check is the node check of the access log service: the node ADS would
// serve as an Envoy, with an id. Proxyless gRPC clients log no requests;
// a stream without a node cannot be told apart from any other caller.
func Check(n *core.Node) (reason string, err error) {
	if n.GetId() == "" {
		return RefusedNoNode, status.Error(codes.Unauthenticated, "kvxds: the first access log message must name its node (identifier.node.id)")
	}
	if k := server.Classify(n); k != translate.Envoy {
		return RefusedNotEnvoy, status.Errorf(codes.PermissionDenied, "kvxds: node %q is a %s client: only Envoys stream access logs", n.GetId(), k)
	}
	return "", nil
}

// Options configure a Service.
type Options struct {
	Sink Sink
	// Load receives the load logs; nil drops them (counted).
	Load       LoadSink
	Logger     hclog.Logger
	Registerer prometheus.Registerer
	// Now is the clock for entries without a start time; nil means
	// time.Now.
	Now func() time.Time
}

// Service is the access log service.
type Service struct {
	alsv3.UnimplementedAccessLogServiceServer
	sink    Sink
	load    LoadSink
	nextID  atomic.Uint64
	log     hclog.Logger
	now     func() time.Time
	entries *prometheus.CounterVec
	refused *prometheus.CounterVec
	streams prometheus.Gauge
}

// New returns a service that hands requests to opts.Sink.
func New(opts Options) *Service {
	f := promauto.With(opts.Registerer)
	s := &Service{
		sink: opts.Sink,
		load: opts.Load,
		log:  opts.Logger,
		now:  opts.Now,
		entries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_access_log_entries_total",
			Help: "Access log entries received from Envoys, by result: observed (a keyed request), no_key, unknown_pool, load (a load log start or end), load_other (another load log entry type), load_not_tracked, or malformed_* (dropped: no_pool, no_request, value, tcp, load).",
		}, []string{"result"}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_access_log_streams_refused_total",
			Help: "Access log streams refused, by reason (no_node: the first message names no node; not_envoy: a proxyless gRPC client).",
		}, []string{"reason"}),
		streams: f.NewGauge(prometheus.GaugeOpts{
			Name: "kvxds_access_log_streams",
			Help: "Open access log streams.",
		}),
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, r := range results {
		s.entries.WithLabelValues(r)
	}
	for _, r := range []string{RefusedNoNode, RefusedNotEnvoy} {
		s.refused.WithLabelValues(r)
	}
	return s
}

// Register adds the service to g.
func (s *Service) Register(g *grpc.Server) { alsv3.RegisterAccessLogServiceServer(g, s) }

// StreamAccessLogs reads one Envoy's stream until it ends.
func (s *Service) StreamAccessLogs(stream grpc.ClientStreamingServer[alsv3.StreamAccessLogsMessage, alsv3.StreamAccessLogsResponse]) error {
	msg, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{})
		}
		return err
	}
	id := msg.GetIdentifier()
	if reason, err := Check(id.GetNode()); err != nil {
		s.refused.WithLabelValues(reason).Inc()
		s.log.Warn("access log stream refused", "node", id.GetNode().GetId(), "reason", reason)
		return err
	}
	s.streams.Inc()
	defer s.streams.Dec()
	sid := s.nextID.Add(1)
	// Envoy names its logger once, in the stream's first message.
	logName := id.GetLogName()
	for {
		s.handle(sid, logName, msg)
		if msg, err = stream.Recv(); err != nil {
			// Before the answer: the stream's requests are no longer
			// observed once it ends.
			if s.load != nil {
				s.load.CloseStream(sid)
			}
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&alsv3.StreamAccessLogsResponse{})
			}
			return err
		}
	}
}

func (s *Service) handle(stream uint64, logName string, msg *alsv3.StreamAccessLogsMessage) {
	if n := len(msg.GetTcpLogs().GetLogEntry()); n > 0 {
		s.entries.WithLabelValues(ResultTCP).Add(float64(n))
	}
	loadPool, isLoad := strings.CutPrefix(logName, translate.LoadLogPrefix)
	for _, e := range msg.GetHttpLogs().GetLogEntry() {
		if isLoad {
			s.entries.WithLabelValues(s.loadEntry(stream, loadPool, e)).Inc()
			continue
		}
		s.entries.WithLabelValues(s.entry(logName, e)).Inc()
	}
}

// loadEntry hands one load log entry to the load sink and returns its
// result.
func (s *Service) loadEntry(stream uint64, pool string, e *datav3.HTTPAccessLogEntry) string {
	if s.load == nil {
		return ResultNoLoadSink
	}
	if pool == "" {
		return ResultUnknownPool
	}
	ll, ok := s.load.LoadPool(pool)
	if !ok {
		return ResultUnknownPool
	}
	c := e.GetCommonProperties()
	typ := c.GetAccessLogType()
	if typ != datav3.AccessLogType_UpstreamPoolReady && typ != datav3.AccessLogType_UpstreamEnd {
		return ResultLoadOther
	}
	logged := e.GetRequest().GetRequestHeaders()
	id, _ := header(logged, translate.LoadLogRequestID)
	sa := c.GetUpstreamRemoteAddress().GetSocketAddress()
	if id == "" || len(id) > maxRequestID || sa == nil {
		return ResultBadLoad
	}
	upstream := address(sa)
	key := id + "\x00" + strconv.FormatUint(uint64(c.GetUpstreamRequestAttemptCount()), 10) + "\x00" + upstream
	host := upstream
	if ll.HostHeader != "" {
		// The prefill replica the filter named; none: prefilled on
		// the decode replica.
		if host, _ = header(logged, ll.HostHeader); len(host) > maxHost {
			host = ""
		}
	}
	if typ == datav3.AccessLogType_UpstreamEnd {
		if host == "" {
			return ResultLoadOther
		}
		s.load.End(stream, ll.Pool, key)
		return ResultLoad
	}
	var n uint64
	if v, ok := header(logged, translate.LoadLogLength); ok {
		var err error
		if n, err = strconv.ParseUint(v, 10, 64); err != nil {
			return ResultBadLoad
		}
	}
	result := ResultLoadOther
	if host != "" {
		a := inflight.Attempt{Host: host, Bytes: n, ID: id, At: s.now()}
		if t := c.GetStartTime(); t != nil {
			a.At = t.AsTime()
		}
		if ll.AdapterHeader != "" {
			// A name the pick filter could not have matched is no adapter.
			if v, _ := header(logged, ll.AdapterHeader); fleet.CheckAdapterName(v) == "" {
				a.Adapter = v
			}
		}
		if v, ok := header(logged, translate.LoadLogWent); ok {
			// Where the key went; a malformed value is none.
			k, away, _ := translate.WentAway(v)
			if inflight.WentKey(k) {
				a.Key, a.Away = k, away
			}
		}
		s.load.Start(stream, ll.Pool, key, a)
		result = ResultLoad
	}
	// The pick filter names, on a request, the earlier requests of its
	// Lua state whose response body started.
	if v, ok := header(logged, translate.LoadLogComputed); ok {
		var ids []string
		for id := range strings.SplitSeq(v, ",") {
			if id != "" && len(id) <= maxRequestID && len(ids) < translate.LoadLogMaxComputed {
				ids = append(ids, id)
			}
		}
		s.load.Computed(stream, ll.Pool, ids)
		result = ResultLoad
	}
	return result
}

// maxRequestID bounds the request ids kept: Envoy's are 36-byte UUIDs; a
// client's own x-request-id passes through, and may be anything.
const maxRequestID = 128

// maxHost bounds a prefill replica's address read from a decode pool's
// load log.
const maxHost = 300

// entry hands one entry to the sink and returns its result.
func (s *Service) entry(logName string, e *datav3.HTTPAccessLogEntry) string {
	c := e.GetCommonProperties()
	name, ok := strings.CutPrefix(logName, translate.HotKeyLogPrefix)
	if !ok || name == "" {
		name = c.GetUpstreamCluster()
	}
	if name == "" {
		return ResultNoPool
	}
	if e.GetRequest() == nil {
		return ResultNoRequest
	}
	pool, headers, ok := s.sink.KeyHeaders(name)
	if !ok {
		return ResultUnknownPool
	}
	logged := e.GetRequest().GetRequestHeaders()
	key, value := -1, ""
	for i, h := range headers {
		if h == "" {
			continue
		}
		if v, ok := header(logged, h); ok && v != "" {
			key, value = i, v
			break
		}
	}
	var r Request
	decode := false
	if ps, ok := s.sink.(PrefillSink); ok {
		if h := ps.PrefillHeader(pool); h != "" {
			decode = true
			r.Prefill, _ = header(logged, h)
			if r.Prefill != "" && !validHostPort(r.Prefill) {
				return ResultBadValue
			}
			r.PrefillKey, r.PrefillValue = s.prefillKeys(ps, pool, logged, c)
		}
	}
	if as, ok := s.sink.(AdapterSink); ok {
		if h := as.AdapterHeader(pool); h != "" {
			r.Adapter, _ = header(logged, h)
			r.AdapterRejected, _ = header(logged, fleet.AdapterRejectedHeader)
			if r.Adapter != "" && fleet.CheckAdapterName(r.Adapter) != "" {
				return ResultBadValue
			}
			// Every request of the pool is demand: its share is of all.
			if key < 0 {
				r.Key = -1
				s.fill(&r, pool, c)
				s.sink.Observe(r)
				return ResultNoKey
			}
		}
	}
	if key < 0 {
		if decode {
			// Every request of a decode pool says where it prefilled.
			r.Key = -1
			s.fill(&r, pool, c)
			s.sink.Observe(r)
		}
		return ResultNoKey
	}
	if !hotkeys.ValidValue(value) {
		return ResultBadValue
	}
	r.Key, r.Value = key, value
	s.fill(&r, pool, c)
	r.Spread, _ = header(logged, SpreadHeader)
	if v, ok := header(logged, translate.LoadLogWent); ok {
		_, _, r.Followed = translate.WentAway(v)
	}
	s.sink.Observe(r)
	return ResultObserved
}

// prefillKeys hands a decode pool's logged request to the sink as a
// request of its prefill pool, with the first of the prefill pool's keys
// it carried; not when it carried none or a malformed value. It returns
// that key's index and value ("" for none).
func (s *Service) prefillKeys(ps PrefillSink, pool string, logged map[string]string, c *datav3.AccessLogCommon) (int, string) {
	prefill, headers := ps.PrefillKeys(pool)
	if prefill == "" {
		return 0, ""
	}
	for i, h := range headers {
		if h == "" {
			continue
		}
		if v, ok := header(logged, h); ok && v != "" {
			if !hotkeys.ValidValue(v) {
				return 0, ""
			}
			r := Request{Key: i, Value: v}
			s.fill(&r, prefill, c)
			// The decode replica served it: where it prefilled is not
			// the prefill pool's upstream.
			r.Cluster, r.Upstream = "", ""
			s.sink.Observe(r)
			return i, v
		}
	}
	return 0, ""
}

// fill sets r's pool and what the entry's common properties say.
func (s *Service) fill(r *Request, pool string, c *datav3.AccessLogCommon) {
	r.Pool, r.Cluster = pool, c.GetUpstreamCluster()
	if sa := c.GetUpstreamRemoteAddress().GetSocketAddress(); sa != nil {
		r.Upstream = address(sa)
	}
	if t := c.GetStartTime(); t != nil {
		r.Start = t.AsTime()
	} else {
		r.Start = s.now()
	}
	r.Duration = c.GetDuration().AsDuration()
}

// validHostPort reports whether v is a host:port as a prefill table holds
// it: an IP address and a port, at most 64 bytes.
func validHostPort(v string) bool {
	if len(v) > 64 {
		return false
	}
	_, err := netip.ParseAddrPort(v)
	return err == nil
}

// address is a socket address as Envoy prints it: "10.0.0.1:8000",
// "[::1]:8000" (the form xds/envoylb and the served assignments use).
func address(sa *core.SocketAddress) string {
	host := sa.GetAddress()
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() && !a.Is4In6() {
		host = "[" + a.String() + "]"
	}
	return host + ":" + strconv.FormatUint(uint64(sa.GetPortValue()), 10)
}

// header is a logged header's value. Envoy logs the names it was given,
// lowercased as HTTP/2 has them.
func header(m map[string]string, name string) (string, bool) {
	if v, ok := m[name]; ok {
		return v, true
	}
	v, ok := m[strings.ToLower(name)]
	return v, ok
}
