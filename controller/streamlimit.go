package controller

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// rejectPerAddress is the reason label of a stream refused by the
// per-address cap.
const rejectPerAddress = "per_address_limit"

// streamLimiter caps the concurrent xDS streams of each source address
// (the xds block's max_streams_per_address), so that one client that leaks
// channels, or loops reconnecting, cannot take the server's memory from
// every other data plane. The cap can change while streams are open: a
// lower cap refuses new streams until enough end, and never cuts one.
type streamLimiter struct {
	max      atomic.Int64 // 0: no cap
	mu       sync.Mutex
	open     map[string]int // source address -> open xDS streams
	rejected *prometheus.CounterVec
}

func newStreamLimiter(max int) *streamLimiter {
	l := &streamLimiter{
		open: map[string]int{},
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_xds_streams_rejected_total",
			Help: "xDS streams refused, by reason (per_address_limit: the source address had max_streams_per_address open).",
		}, []string{"reason"}),
	}
	l.rejected.WithLabelValues(rejectPerAddress)
	l.setMax(max)
	return l
}

func (l *streamLimiter) setMax(n int) { l.max.Store(int64(n)) }

// isXDS says whether a gRPC method is one of the discovery services (ADS,
// CDS, EDS, LDS, RDS); health checks are not counted.
func isXDS(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/envoy.service.")
}

// intercept is a grpc.StreamServerInterceptor.
func (l *streamLimiter) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !isXDS(info.FullMethod) {
		return handler(srv, ss)
	}
	addr := sourceAddress(ss)
	if !l.acquire(addr) {
		l.rejected.WithLabelValues(rejectPerAddress).Inc()
		return status.Errorf(codes.ResourceExhausted, "kvxds: %s already has %d xDS streams open, the most one address may (max_streams_per_address)", addr, l.max.Load())
	}
	defer l.release(addr)
	return handler(srv, ss)
}

func (l *streamLimiter) acquire(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if max := l.max.Load(); max > 0 && int64(l.open[addr]) >= max {
		return false
	}
	l.open[addr]++
	return true
}

func (l *streamLimiter) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
	}
}

// sourceAddress is the IP a stream comes from (its port differs for each
// connection), or the peer's whole address if it has no IP.
func sourceAddress(ss grpc.ServerStream) string {
	p, ok := peer.FromContext(ss.Context())
	if !ok || p.Addr == nil {
		return "unknown"
	}
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(tcp.IP); ok {
			return ip.Unmap().String()
		}
	}
	if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
		return ap.Addr().Unmap().String()
	}
	return p.Addr.String()
}
