package adsenvoy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	accesslogcfgv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// HTTPGrpcAccessLogName is the extension name of Envoy's gRPC HTTP access
// logger.
const HTTPGrpcAccessLogName = "envoy.access_loggers.http_grpc"

// Envoy's defaults for a logger's buffer (PROTOBUF_GET_MS_OR_DEFAULT(config,
// buffer_flush_interval, 1000) and buffer_size_bytes 16384 in
// source/extensions/access_loggers/common/grpc_access_logger.h).
const (
	DefaultAccessLogFlushInterval = time.Second
	DefaultAccessLogBufferBytes   = 16384
)

// accessLogWriteBuffer is how many flushed messages a logger's stream holds
// before it reports itself above its write buffer's high watermark: Envoy
// then keeps the buffer (and drops new entries once it is full) instead of
// queueing more on a stream that does not drain.
const accessLogWriteBuffer = 64

// HTTPGrpcAccessLogs returns the gRPC HTTP access loggers of an HTTP
// connection manager, in its order. A logger whose config does not decode
// is an error: Envoy would reject the listener.
func HTTPGrpcAccessLogs(hcm *hcmv3.HttpConnectionManager) ([]*grpcalsv3.HttpGrpcAccessLogConfig, error) {
	return grpcAccessLogs(hcm.GetAccessLog())
}

// routerTypeURL is the type of the router filter's typed config, by which
// Envoy finds the filter (its name is only a fallback).
const routerTypeURL = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"

// RouterUpstreamLogs returns the gRPC HTTP access loggers of the router
// filter's upstream_log (envoy.filters.http.router, found by its typed
// config's type), in their order, and whether its upstream_log_options
// set flush_upstream_log_on_upstream_stream: Envoy then also writes an
// entry when an upstream attempt's stream is associated with the request
// (UpstreamPoolReady), besides the one at the attempt's end
// (UpstreamEnd). An HTTP connection manager without a router, or whose
// router has no upstream log, has none. A router or logger whose config
// does not decode is an error: Envoy would reject the listener.
func RouterUpstreamLogs(hcm *hcmv3.HttpConnectionManager) (loggers []*grpcalsv3.HttpGrpcAccessLogConfig, flushOnStream bool, err error) {
	for _, f := range hcm.GetHttpFilters() {
		if f.GetTypedConfig().GetTypeUrl() != routerTypeURL {
			continue
		}
		var rt routerv3.Router
		if err := f.GetTypedConfig().UnmarshalTo(&rt); err != nil {
			return nil, false, fmt.Errorf("router filter %s: %w", f.GetName(), err)
		}
		if loggers, err = grpcAccessLogs(rt.GetUpstreamLog()); err != nil {
			return nil, false, fmt.Errorf("router filter %s: upstream %w", f.GetName(), err)
		}
		return loggers, rt.GetUpstreamLogOptions().GetFlushUpstreamLogOnUpstreamStream(), nil
	}
	return nil, false, nil
}

// grpcAccessLogs returns the gRPC HTTP access loggers of als, in order.
func grpcAccessLogs(als []*accesslogcfgv3.AccessLog) ([]*grpcalsv3.HttpGrpcAccessLogConfig, error) {
	var out []*grpcalsv3.HttpGrpcAccessLogConfig
	for _, al := range als {
		if !isHTTPGrpcAccessLog(al) {
			continue
		}
		m, err := al.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return nil, fmt.Errorf("access log %s: %w", al.GetName(), err)
		}
		c, ok := m.(*grpcalsv3.HttpGrpcAccessLogConfig)
		if !ok {
			return nil, fmt.Errorf("access log %s: %T, not an HttpGrpcAccessLogConfig", al.GetName(), m)
		}
		out = append(out, c)
	}
	return out, nil
}

// isHTTPGrpcAccessLog reports whether al is Envoy's gRPC HTTP logger,
// which Envoy finds by the typed config's type (the name is only a
// fallback).
func isHTTPGrpcAccessLog(al *accesslogcfgv3.AccessLog) bool {
	if u := al.GetTypedConfig().GetTypeUrl(); u != "" {
		return strings.HasSuffix(u, "/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig")
	}
	return al.GetName() == HTTPGrpcAccessLogName
}

// Logged is one request as an Envoy's router saw it, for its access log.
type Logged struct {
	// Headers are the request headers the router routed with: the
	// client's and those the filters set (names lowercase, as Envoy keeps
	// them).
	Headers [][2]string
	Method  string
	Path    string
	// Upstream is the chosen host's address (ip:port); Cluster its
	// cluster.
	Upstream string
	Cluster  string
	// Start is when the request began; FirstUpstreamByte and
	// LastDownstreamByte are offsets from it (zero: not reached).
	Start              time.Time
	FirstUpstreamByte  time.Duration
	LastDownstreamByte time.Duration
	// Code is the response's status code (0: no response).
	Code int
	// Type is the entry's access_log_type: NotSet for the HTTP
	// connection manager's entry at the request's end as the simulated
	// Envoys write it, UpstreamPoolReady and UpstreamEnd for the router's
	// upstream log (an upstream attempt's stream associated with the
	// request, and its end).
	Type accesslogdatav3.AccessLogType
	// Attempt is the upstream attempt's number, from 1
	// (upstream_request_attempt_count; 0: not set).
	Attempt uint32
}

// AccessLogStats counts what a logger did with its entries, as Envoy's
// access_logs.grpc_access_log.logs_written and logs_dropped do, and what
// reached a stream.
type AccessLogStats struct {
	Written, Dropped int64
	// Messages and Entries were handed to a stream; Lost of those entries
	// were on a stream that failed (Envoy does not resend them); Streams
	// were opened.
	Messages, Entries, Lost, Streams int64
}

// AccessLogger sends what Envoy's gRPC access logger
// (GrpcAccessLoggerImpl, source/extensions/access_loggers/grpc/ and
// common/grpc_access_logger.h) would send for one
// HttpGrpcAccessLogConfig: entries are buffered and flushed as one
// StreamAccessLogsMessage every buffer_flush_interval, or as soon as the
// buffer's approximate size (the entries' encoded sizes) reaches
// buffer_size_bytes; the first message of each stream carries the
// identifier (node and log_name). A stream that fails is dropped with
// what was sent on it, and the next flush opens a new one; while the
// server is unreachable the buffer is kept, and entries arriving once it
// is full are dropped.
type AccessLogger struct {
	cc       *grpc.ClientConn
	node     *corev3.Node
	logName  string
	headers  []string // additional_request_headers_to_log, lowercase
	maxBytes int
	interval time.Duration

	mu    sync.Mutex
	buf   []*accesslogdatav3.HTTPAccessLogEntry
	bytes int
	shut  bool // pending is closed

	pending chan []*accesslogdatav3.HTTPAccessLogEntry
	stop    chan struct{}
	wg      sync.WaitGroup

	written, dropped, messages, entries, lost, streams atomic.Int64
}

// NewAccessLogger starts the logger of cfg on behalf of node, sending to
// the gRPC server at addr (the address of cfg's grpc_service cluster:
// for kvxds, its xDS address).
func NewAccessLogger(addr string, node *corev3.Node, cfg *grpcalsv3.HttpGrpcAccessLogConfig) (*AccessLogger, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	common := cfg.GetCommonConfig()
	l := &AccessLogger{cc: cc, node: node, logName: common.GetLogName(),
		maxBytes: DefaultAccessLogBufferBytes, interval: DefaultAccessLogFlushInterval,
		pending: make(chan []*accesslogdatav3.HTTPAccessLogEntry, accessLogWriteBuffer),
		stop:    make(chan struct{})}
	if v := common.GetBufferSizeBytes(); v != nil {
		l.maxBytes = int(v.GetValue())
	}
	if d := common.GetBufferFlushInterval(); d != nil && d.AsDuration() > 0 {
		l.interval = d.AsDuration()
	}
	for _, h := range cfg.GetAdditionalRequestHeadersToLog() {
		l.headers = append(l.headers, strings.ToLower(h))
	}
	l.wg.Add(2)
	go l.flushLoop()
	go l.sendLoop()
	return l, nil
}

// LogName is the logger's common_config.log_name.
func (l *AccessLogger) LogName() string { return l.logName }

// Stats is what the logger did so far.
func (l *AccessLogger) Stats() AccessLogStats {
	return AccessLogStats{Written: l.written.Load(), Dropped: l.dropped.Load(), Messages: l.messages.Load(),
		Entries: l.entries.Load(), Lost: l.lost.Load(), Streams: l.streams.Load()}
}

// Entry is the HTTPAccessLogEntry Envoy writes for r: the request headers
// named in additional_request_headers_to_log that r carries (the first
// value of a repeated one), the upstream host and cluster, the timings,
// the response code, and, when r has them, the access log type (an
// entry written before its stream completes, UpstreamPoolReady or a
// periodic one, is marked intermediate, as Envoy marks entries of
// streams not yet complete) and the attempt count.
func (l *AccessLogger) Entry(r Logged) *accesslogdatav3.HTTPAccessLogEntry {
	req := &accesslogdatav3.HTTPRequestProperties{Path: r.Path}
	if m, ok := corev3.RequestMethod_value[strings.ToUpper(r.Method)]; ok {
		req.RequestMethod = corev3.RequestMethod(m)
	}
	for _, name := range l.headers {
		for _, h := range r.Headers {
			if strings.EqualFold(h[0], name) {
				if req.RequestHeaders == nil {
					req.RequestHeaders = map[string]string{}
				}
				req.RequestHeaders[name] = h[1]
				break
			}
		}
	}
	common := &accesslogdatav3.AccessLogCommon{UpstreamCluster: r.Cluster}
	if !r.Start.IsZero() {
		common.StartTime = timestamppb.New(r.Start)
	}
	if r.FirstUpstreamByte > 0 {
		common.TimeToFirstUpstreamRxByte = durationpb.New(r.FirstUpstreamByte)
	}
	if r.LastDownstreamByte > 0 {
		common.TimeToLastDownstreamTxByte = durationpb.New(r.LastDownstreamByte)
	}
	if a := socketAddress(r.Upstream); a != nil {
		common.UpstreamRemoteAddress = a
	}
	if r.Type != accesslogdatav3.AccessLogType_NotSet {
		common.AccessLogType = r.Type
		common.IntermediateLogEntry = intermediate(r.Type)
	}
	common.UpstreamRequestAttemptCount = r.Attempt
	e := &accesslogdatav3.HTTPAccessLogEntry{CommonProperties: common, Request: req,
		ProtocolVersion: accesslogdatav3.HTTPAccessLogEntry_HTTP11}
	if r.Code > 0 {
		e.Response = &accesslogdatav3.HTTPResponseProperties{ResponseCode: wrapperspb.UInt32(uint32(r.Code))}
	}
	return e
}

// intermediate reports whether Envoy writes entries of type t before
// their stream completes (StreamInfo::requestComplete unset), which it
// marks intermediate_log_entry.
func intermediate(t accesslogdatav3.AccessLogType) bool {
	switch t {
	case accesslogdatav3.AccessLogType_UpstreamPoolReady, accesslogdatav3.AccessLogType_UpstreamPeriodic,
		accesslogdatav3.AccessLogType_DownstreamStart, accesslogdatav3.AccessLogType_DownstreamPeriodic,
		accesslogdatav3.AccessLogType_DownstreamTunnelSuccessfullyEstablished:
		return true
	}
	return false
}

// socketAddress is ip:port as an Envoy address, or nil if addr is not one.
func socketAddress(addr string) *corev3.Address {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	p, err := strconv.ParseUint(port, 10, 32)
	if err != nil {
		return nil
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}
}

// Log buffers r's entry, as Envoy's GrpcAccessLogger::log does: a full
// buffer is flushed first, and the entry is dropped if it stays full.
func (l *AccessLogger) Log(r Logged) { l.LogEntry(l.Entry(r)) }

// LogEntry buffers an entry as it is.
func (l *AccessLogger) LogEntry(e *accesslogdatav3.HTTPAccessLogEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		l.dropped.Add(1)
		return
	}
	if l.maxBytes > 0 && l.bytes >= l.maxBytes {
		l.flushLocked()
		if l.bytes >= l.maxBytes {
			l.dropped.Add(1)
			return
		}
	}
	l.written.Add(1)
	l.bytes += proto.Size(e)
	l.buf = append(l.buf, e)
	if l.bytes >= l.maxBytes {
		l.flushLocked()
	}
}

// flushLocked hands the buffer to the stream, unless the server is
// unreachable (Envoy's stream fails to start) or the stream's write buffer
// is full: the buffer then stays for the next flush.
func (l *AccessLogger) flushLocked() {
	if len(l.buf) == 0 || l.shut {
		return
	}
	if l.cc.GetState() == connectivity.TransientFailure {
		l.cc.Connect()
		return
	}
	select {
	case l.pending <- l.buf:
		l.buf, l.bytes = nil, 0
	default:
	}
}

func (l *AccessLogger) flushLoop() {
	defer l.wg.Done()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.mu.Lock()
			l.flushLocked()
			l.mu.Unlock()
		}
	}
}

// logStream is one StreamAccessLogs stream; done closes when the server
// ends it (Envoy's onRemoteClose).
type logStream struct {
	s      alsv3.AccessLogService_StreamAccessLogsClient
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *logStream) dead() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// sendLoop sends the flushed batches, one message each, opening a stream
// when there is none.
func (l *AccessLogger) sendLoop() {
	defer l.wg.Done()
	var st *logStream
	end := func() {
		if st != nil {
			st.s.CloseSend()
			select { // let the server read what was sent before cancelling
			case <-st.done:
			case <-time.After(time.Second):
			}
			st.cancel()
			st = nil
		}
	}
	defer end()
	for batch := range l.pending {
		if st != nil && st.dead() {
			st.cancel()
			st = nil
		}
		msg := &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
			HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: batch}}}
		if st == nil {
			var err error
			if st, err = l.open(); err != nil {
				l.lost.Add(int64(len(batch)))
				continue
			}
			msg.Identifier = &alsv3.StreamAccessLogsMessage_Identifier{Node: l.node, LogName: l.logName}
		}
		l.messages.Add(1)
		l.entries.Add(int64(len(batch)))
		if err := st.s.Send(msg); err != nil {
			l.lost.Add(int64(len(batch)))
			st.cancel()
			st = nil
		}
	}
}

func (l *AccessLogger) open() (*logStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := alsv3.NewAccessLogServiceClient(l.cc).StreamAccessLogs(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	l.streams.Add(1)
	st := &logStream{s: s, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(st.done)
		s.RecvMsg(new(alsv3.StreamAccessLogsResponse)) // returns when the stream ends
	}()
	return st, nil
}

// Flush hands the buffer to the stream now.
func (l *AccessLogger) Flush() {
	l.mu.Lock()
	l.flushLocked()
	l.mu.Unlock()
}

// Close flushes what is buffered, ends the stream once it is sent and
// closes the connection. Entries logged after Close are dropped.
func (l *AccessLogger) Close() error {
	l.mu.Lock()
	if l.shut {
		l.mu.Unlock()
		return errors.New("access logger already closed")
	}
	l.flushLocked()
	l.shut = true
	close(l.pending)
	l.mu.Unlock()
	close(l.stop)
	l.wg.Wait()
	return l.cc.Close()
}
