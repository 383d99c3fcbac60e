package adsload

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/kvxds/kvxds/controller"
	"github.com/kvxds/kvxds/xds/translate"
)

const testStreams = 50

func protocols() []bool { return []bool{false, true} }

// checkEvent fails unless every stream received want exactly once and
// nothing else.
func checkEvent(t *testing.T, e Event, want string) {
	t.Helper()
	t.Logf("%v", e)
	if e.Version != want {
		t.Errorf("streams ended with version %q, want %q", e.Version, want)
	}
	if e.Missed != 0 || e.Extra != 0 {
		t.Errorf("%d streams missed the update and %d other responses arrived", e.Missed, e.Extra)
	}
	if e.FanoutMax < e.FanoutP99 || e.FanoutP99 < e.FanoutP50 || e.FanoutP50 < 0 {
		t.Errorf("fan-out percentiles out of order: %v", e)
	}
}

func TestRefServerEveryStreamGetsEveryVersion(t *testing.T) {
	for _, delta := range protocols() {
		t.Run(protocol(delta), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ref, err := NewRefServer(ctx, RefOptions{})
			if err != nil {
				t.Fatal(err)
			}
			addr := serveGRPC(t, ref.Register)
			l, err := Start(ctx, Options{Target: addr, Streams: testStreams, Delta: delta, Conns: 5})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for round := 2; round <= 4; round++ {
				m := l.Mark()
				set, err := ref.Bump(ctx)
				if err != nil {
					t.Fatal(err)
				}
				e, err := l.Wait(ctx, m, set, WaitOptions{Quiet: 100 * time.Millisecond, Timeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				checkEvent(t, e, strconv.Itoa(round))
			}
		})
	}
}

func TestKVXDSEveryStreamGetsEveryVersion(t *testing.T) {
	for _, delta := range protocols() {
		t.Run(protocol(delta), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
			defer cancel()
			c, path, po := startKVXDS(t, ctx)
			l, err := Start(ctx, Options{Target: c.XDSAddr(), Streams: testStreams, Delta: delta})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			seen := map[string]bool{c.Server().Versions(translate.Envoy)[resourcev3.EndpointType]: true}
			for i := range 3 {
				po.Weight = 2 + i
				m := l.Mark()
				changed := time.Now()
				if err := WritePolicy(path, po); err != nil {
					t.Fatal(err)
				}
				e, err := l.Wait(ctx, m, changed, WaitOptions{Quiet: 100 * time.Millisecond, Timeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				served := c.Server().Versions(translate.Envoy)[resourcev3.EndpointType]
				if seen[served] {
					t.Fatalf("weight %d: the served EDS version %q did not change", po.Weight, served)
				}
				seen[served] = true
				checkEvent(t, e, served)
				if e.Detection <= 0 {
					t.Errorf("detection %v: the first stream received the version before the policy changed", e.Detection)
				}
			}
		})
	}
}

// A stream that rejects every assignment still receives every new one.
func TestKVXDSRejectingStreamsGetEveryVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, path, po := startKVXDS(t, ctx)
	l, err := Start(ctx, Options{Target: c.XDSAddr(), Streams: 10, NACK: true, Conns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 2 {
		po.Weight = 2 + i
		m := l.Mark()
		if err := WritePolicy(path, po); err != nil {
			t.Fatal(err)
		}
		e, err := l.Wait(ctx, m, time.Now(), WaitOptions{Quiet: 200 * time.Millisecond, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		checkEvent(t, e, c.Server().Versions(translate.Envoy)[resourcev3.EndpointType])
	}
}

func TestMeasure(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	after := [][]Receipt{
		{{"b", at(10)}},
		{{"x", at(12)}, {"b", at(20)}},
		{{"b", at(30)}},
		{}, // missed
		{{"a", at(5)}},
	}
	before := []string{"a", "a", "a", "a", "z"}
	e := measure(after, before, t0)
	want := Event{Version: "b", Detection: 10 * time.Millisecond, FanoutP50: 10 * time.Millisecond,
		FanoutP99: 20 * time.Millisecond, FanoutMax: 20 * time.Millisecond, Missed: 2, Extra: 2}
	if e != want {
		t.Errorf("measure = %+v, want %+v", e, want)
	}
}

// startKVXDS runs a kvxds controller in this process on a policy of 100
// static endpoints, and returns it, the policy file and its options.
func startKVXDS(t *testing.T, ctx context.Context) (*controller.Controller, string, PolicyOptions) {
	t.Helper()
	eps := make([]string, 100)
	for i := range eps {
		eps[i] = fmt.Sprintf("127.0.%d.%d:8000", 1+i/250, 1+i%250)
	}
	xdsAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	adminAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	po := PolicyOptions{XDS: xdsAddr, Admin: adminAddr, Endpoints: eps, Weight: 1}
	path := filepath.Join(t.TempDir(), "policy.hcl")
	if err := WritePolicy(path, po); err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.Options{PolicyFile: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("kvxds: %v", err)
		}
	})
	for !c.Server().Ready() {
		select {
		case err := <-done:
			t.Fatalf("kvxds stopped: %v", err)
		case <-ctx.Done():
			t.Fatal("kvxds never served a configuration")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return c, path, po
}

// serveGRPC serves register's services on a loopback port until the test
// ends.
func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}
