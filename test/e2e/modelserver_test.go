package e2e

import (
	"context"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/server"
)

// modelServer is an ADS server whose model a test sets: one pool over the
// test's backends, prepared as the reconciler prepares it, for tests of
// what real clients do with a decision made elsewhere (an adapter
// placement, a hot-key table).
type modelServer struct {
	srv  *server.Server
	addr string
	pool fleet.Pool
}

// startModelServer serves p over bs; identity gives each backend's hash
// key.
func startModelServer(t *testing.T, p fleet.Pool, bs []*backend, identity func(*backend) string) *modelServer {
	t.Helper()
	for _, b := range bs {
		host, port, err := net.SplitHostPort(b.addr)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseUint(port, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		p.Endpoints = append(p.Endpoints, fleet.Endpoint{Host: host, Port: uint32(n), HashKey: identity(b)})
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &modelServer{srv: server.New(server.Options{}), addr: lis.Addr().String(), pool: p}
	g := grpc.NewServer(s.srv.GRPCOptions()...)
	s.srv.Register(g)
	go g.Serve(s.srv.Listener(lis))
	t.Cleanup(g.Stop)
	return s
}

// push serves the pool as edit changes it and returns the model served.
// A model that drops an entry of the test's decision fails the test.
func (s *modelServer) push(t *testing.T, edit func(*fleet.Pool)) fleet.Model {
	t.Helper()
	p := s.pool
	edit(&p)
	m, err := fleet.Prepare(fleet.Fleet{Pools: []fleet.Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.HotKeyDrops(); len(d) > 0 {
		t.Fatalf("hot-key entries dropped: %+v", d)
	}
	if d := m.AdapterDrops(); len(d) > 0 {
		t.Fatalf("adapters dropped: %+v", d)
	}
	if err := s.srv.Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m
}
