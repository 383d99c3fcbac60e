package sim

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// h2Preface starts every HTTP/2 connection with prior knowledge.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ListenGRPC opens a second port (e.g. "127.0.0.1:0") and returns its
// address. There, HTTP/2 connections with prior knowledge are served by
// gRPC's own transport, which writes the messages of many streams in one
// system call where the main port's HTTP/2 handler writes and flushes each
// message alone (a write per streamed token); HTTP/1.x connections get the
// OpenAI API and /metrics, as on the main port. h2c requests that are
// not gRPC belong on the main port. Close closes it.
func (r *Replica) ListenGRPC(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	g, h := newChanListener(ln.Addr()), newChanListener(ln.Addr())
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ln.Close()
		return "", errClosed
	}
	r.extra = append(r.extra, ln, g, h)
	r.mu.Unlock()
	go r.grpc.Serve(g)
	go r.srv.Serve(h)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sortConn(c, g, h)
		}
	}()
	return ln.Addr().String(), nil
}

// sortConn reads as much of a connection's first bytes as tells HTTP/2's
// preface from anything else, and hands the connection, those bytes
// replayed, to g or h.
func sortConn(c net.Conn, g, h *chanListener) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 0, len(h2Preface))
	for len(buf) < len(h2Preface) && bytes.HasPrefix([]byte(h2Preface), buf) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			c.Close()
			return
		}
	}
	c.SetReadDeadline(time.Time{})
	pc := &peekedConn{Conn: c, head: buf}
	if string(buf) == h2Preface {
		g.put(pc)
	} else {
		h.put(pc)
	}
}

// peekedConn replays head before reading on from the connection.
type peekedConn struct {
	net.Conn
	head []byte
}

func (p *peekedConn) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// chanListener is a listener whose connections another accept loop hands
// over.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newChanListener(a net.Addr) *chanListener {
	return &chanListener{addr: a, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) put(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
