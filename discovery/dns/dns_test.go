package dns

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/dnstest"
)

func TestLookups(t *testing.T) {
	srv := dnstest.Start(t)
	for _, tc := range []struct {
		name    string
		cfg     Config
		records []string
		want    []fleet.Endpoint
	}{
		{"A", Config{Name: "vllm.test", Type: A, Port: 8000}, []string{
			"vllm.test. 30 IN A 10.0.0.2", "vllm.test. 30 IN A 10.0.0.1", "vllm.test. 30 IN A 10.0.0.1",
		}, []fleet.Endpoint{{Host: "10.0.0.1", Port: 8000}, {Host: "10.0.0.2", Port: 8000}}},
		{"AAAA", Config{Name: "vllm.test", Type: AAAA, Port: 8000}, []string{
			"vllm.test. 30 IN AAAA fd00::1",
		}, []fleet.Endpoint{{Host: "fd00::1", Port: 8000}}},
		{"SRV with additional addresses and weights", Config{Name: "_vllm._tcp.test", Type: SRV}, []string{
			"_vllm._tcp.test. 10 IN SRV 1 3 8001 node-a.test.",
			"_vllm._tcp.test. 10 IN SRV 1 0 8002 node-b.test.",
			"_vllm._tcp.test. 10 IN SRV 1 500 8003 node-c.test.",
			"node-a.test. 10 IN A 10.0.0.1", "node-b.test. 10 IN A 10.0.0.2", "node-c.test. 10 IN A 10.0.0.3",
		}, []fleet.Endpoint{{Host: "10.0.0.1", Port: 8001, Weight: 3}, {Host: "10.0.0.2", Port: 8002, Weight: 1}, {Host: "10.0.0.3", Port: 8003, Weight: MaxWeight}}},
		{"SRV with a port override", Config{Name: "_vllm._tcp.test", Type: SRV, Port: 9000}, []string{
			"_vllm._tcp.test. 10 IN SRV 1 1 8001 node-a.test.", "node-a.test. 10 IN A 10.0.0.1",
		}, []fleet.Endpoint{{Host: "10.0.0.1", Port: 9000, Weight: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Set(t, dnstest.Answer, tc.records...)
			tc.cfg.Resolver, tc.cfg.Refresh = srv.Addr, time.Second
			s, err := New(tc.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, ttl, err := s.lookup(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("targets %+v, want %+v", got, tc.want)
			}
			if ttl <= 0 {
				t.Errorf("TTL %v", ttl)
			}
		})
	}
}

// A failing or empty lookup keeps the last good answer for KeepFor, then
// empties the pool; the TTL stretches the refresh interval.
func TestFailStatic(t *testing.T) {
	srv := dnstest.Start(t)
	s, err := New(Config{Name: "vllm.test", Type: A, Port: 8000, Resolver: srv.Addr, Refresh: time.Second,
		KeepFor: time.Minute, Timeout: 200 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	ctx := context.Background()

	srv.Set(t, dnstest.Answer, "vllm.test. 120 IN A 10.0.0.1")
	u, ttl := s.refresh(ctx)
	if u.Err != nil || len(u.Targets) != 1 || ttl != 2*time.Minute {
		t.Fatalf("good answer: %+v, TTL %v", u, ttl)
	}
	for _, mode := range []string{dnstest.NXDomain, dnstest.ServFail, dnstest.Timeout, "empty"} {
		now = now.Add(10 * time.Second)
		if mode == "empty" {
			srv.Set(t, dnstest.Answer)
		} else {
			srv.Set(t, mode, "vllm.test. 120 IN A 10.0.0.1")
		}
		if u, _ := s.refresh(ctx); u.Err == nil {
			t.Errorf("%s: got targets %+v, want an error (keep the last good answer)", mode, u.Targets)
		} else {
			t.Logf("%s: %v", mode, u.Err)
		}
	}
	now = now.Add(time.Minute)
	if u, _ := s.refresh(ctx); u.Err != nil || u.Targets == nil || len(u.Targets) != 0 {
		t.Errorf("after KeepFor: %+v, want no targets", u)
	}
	srv.Set(t, dnstest.Answer, "vllm.test. 5 IN A 10.0.0.2")
	if u, ttl := s.refresh(ctx); u.Err != nil || len(u.Targets) != 1 || u.Targets[0].Host != "10.0.0.2" || ttl != 5*time.Second {
		t.Errorf("recovered: %+v, TTL %v", u, ttl)
	}
}

func TestRunSendsUpdates(t *testing.T) {
	srv := dnstest.Start(t)
	srv.Set(t, dnstest.Answer, "vllm.test. 0 IN A 10.0.0.1")
	s, err := New(Config{Name: "vllm.test", Type: A, Port: 8000, Resolver: srv.Addr, Refresh: 20 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := make(chan discovery.Update)
	go s.Run(ctx, up)
	if u := <-up; len(u.Targets) != 1 {
		t.Fatalf("first update %+v", u)
	}
	srv.Set(t, dnstest.Answer, "vllm.test. 0 IN A 10.0.0.1", "vllm.test. 0 IN A 10.0.0.2")
	deadline := time.After(5 * time.Second)
	for {
		select {
		case u := <-up:
			if len(u.Targets) == 2 {
				return
			}
		case <-deadline:
			t.Fatal("the new record was never reported")
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "x", Type: A, Refresh: time.Second},             // no port
		{Name: "x", Type: "MX", Port: 1, Refresh: time.Second}, // type
		{Name: "x", Type: SRV, Resolver: "127.0.0.1:53"},       // no refresh
	} {
		if _, err := New(cfg, nil); err == nil {
			t.Errorf("%+v: want error", cfg)
		}
	}
}
