package server

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// DefaultSendTimeout is how long one response may stay unsent to a
// client before its connection is dropped.
const DefaultSendTimeout = 30 * time.Second

// A client that stops reading its stream never delays the others: every
// stream sends from its own goroutine, and the cache hands a stream the
// next response of a type only after the client's next request (its ACK),
// so a client that stops reading holds at most one response per type in
// gRPC's buffers. A client that subscribes to more types without reading
// blocks its stream's goroutine on gRPC's per-stream write quota with a response
// in hand, forever. The guard bounds that in time: when a
// single send stays blocked longer than the send timeout, it closes the
// client's connection, which ends the blocked send and frees everything
// the stream held. gRPC has no way
// to reset one stream from its handler, and an Envoy or a gRPC client
// holds its ADS stream alone on its connection, so the connection is the
// unit that is dropped. The client reconnects and starts over with the
// current versions.
type guard struct {
	timeout time.Duration
	dropped func()

	mu        sync.Mutex
	conns     map[string]*trackedConn // remote address → connection
	lastSweep time.Time
}

type trackedConn struct {
	c        net.Conn
	accepted time.Time
	serving  bool // gRPC began serving it (after any TLS handshake)
}

func newGuard(timeout time.Duration, dropped func()) *guard {
	if timeout <= 0 {
		timeout = DefaultSendTimeout
	}
	return &guard{timeout: timeout, dropped: dropped, conns: map[string]*trackedConn{}}
}

// Listener returns l with its connections tracked so that a client that
// stops reading can be dropped. Serve the xDS gRPC server on it, with
// GRPCOptions.
func (s *Server) Listener(l net.Listener) net.Listener {
	return &guardListener{Listener: l, g: s.guard}
}

// GRPCOptions are the options the xDS gRPC server needs: they drop the
// connection of a stream whose send stays blocked past the send timeout,
// and return each connection's write buffer to a shared pool between
// writes (a data plane's stream is idle almost all the time).
func (s *Server) GRPCOptions() []grpc.ServerOption {
	g := s.guard
	return []grpc.ServerOption{
		grpc.SharedWriteBuffer(true),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return handler(srv, &guardedStream{ServerStream: ss, g: g, ctx: ss.Context()})
		}),
		grpc.StatsHandler(connEvents{g}),
	}
}

type guardedStream struct {
	grpc.ServerStream
	g   *guard
	ctx context.Context
}

func (s *guardedStream) SendMsg(m any) error {
	t := time.AfterFunc(s.g.timeout, func() { s.g.drop(s.ctx) })
	defer t.Stop()
	return s.ServerStream.SendMsg(m)
}

func (g *guard) drop(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return
	}
	g.mu.Lock()
	tc := g.conns[p.Addr.String()]
	g.mu.Unlock()
	if tc == nil {
		return
	}
	g.dropped()
	tc.c.Close()
}

// track remembers an accepted connection. Connections are handed to gRPC
// as they are, not wrapped: gRPC pools its read buffers only for a plain
// TCP connection, which saves some 30 KiB a client. gRPC's connection
// events say when it is gone (connEvents); one that never got that far
// (a failed TLS handshake) is forgotten after a minute.
func (g *guard) track(c net.Conn) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.conns[c.RemoteAddr().String()] = &trackedConn{c: c, accepted: now}
	if now.Sub(g.lastSweep) < 10*time.Second {
		return
	}
	g.lastSweep = now
	for k, tc := range g.conns {
		if !tc.serving && now.Sub(tc.accepted) > time.Minute {
			delete(g.conns, k)
		}
	}
}

func (g *guard) serving(addr string) {
	g.mu.Lock()
	if tc := g.conns[addr]; tc != nil {
		tc.serving = true
	}
	g.mu.Unlock()
}

func (g *guard) forget(addr string) {
	g.mu.Lock()
	delete(g.conns, addr)
	g.mu.Unlock()
}

type guardListener struct {
	net.Listener
	g *guard
}

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.g.track(c)
	return c, nil
}

// connEvents is a gRPC stats handler that follows connections' lives.
type connEvents struct{ g *guard }

type remoteKey struct{}

func (e connEvents) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if info.RemoteAddr == nil {
		return ctx
	}
	return context.WithValue(ctx, remoteKey{}, info.RemoteAddr.String())
}

func (e connEvents) HandleConn(ctx context.Context, s stats.ConnStats) {
	addr, ok := ctx.Value(remoteKey{}).(string)
	if !ok {
		return
	}
	switch s.(type) {
	case *stats.ConnBegin:
		e.g.serving(addr)
	case *stats.ConnEnd:
		e.g.forget(addr)
	}
}

func (connEvents) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connEvents) HandleRPC(context.Context, stats.RPCStats)                       {}
