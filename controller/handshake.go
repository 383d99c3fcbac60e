package controller

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"
)

// handshakeLogEvery spaces the warnings about failed TLS handshakes: a
// data plane with a bad certificate retries with backoff, for as long as
// nobody fixes it.
const handshakeLogEvery = 10 * time.Second

// countingCreds counts and logs the xDS server's failed TLS handshakes
// (an expired or unknown client certificate, a client that does not speak
// TLS), which gRPC itself only logs at its own verbose levels.
type countingCreds struct {
	credentials.TransportCredentials
	failures prometheus.Counter
	log      hclog.Logger
	lastLog  *atomic.Int64 // unix nanoseconds of the last warning
}

func newCountingCreds(c credentials.TransportCredentials, log hclog.Logger) *countingCreds {
	return &countingCreds{
		TransportCredentials: c,
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvxds_xds_tls_handshake_errors_total",
			Help: "xDS connections refused because their TLS handshake failed (bad, expired or missing client certificate, or no TLS).",
		}),
		log:     log,
		lastLog: new(atomic.Int64),
	}
}

func (c *countingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.failures.Inc()
		now, last := time.Now().UnixNano(), c.lastLog.Load()
		if now-last >= int64(handshakeLogEvery) && c.lastLog.CompareAndSwap(last, now) {
			c.log.Warn("xDS TLS handshake failed", "peer", conn.RemoteAddr().String(), "error", err)
		}
	}
	return out, info, err
}

func (c *countingCreds) Clone() credentials.TransportCredentials {
	return &countingCreds{TransportCredentials: c.TransportCredentials.Clone(), failures: c.failures, log: c.log, lastLog: c.lastLog}
}
