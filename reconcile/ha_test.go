package reconcile

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/inflight"
	"github.com/kvxds/kvxds/xds/server"
)

// scripted is peers whose events the test sends.
type scripted struct{ h chan ha.Handler }

func (s scripted) Run(ctx context.Context, h ha.Handler) {
	s.h <- h
	<-ctx.Done()
}
func (scripted) Publish(context.Context, ha.Document) error { return nil }
func (scripted) Describe() string                           { return "scripted" }

// Leadership changes never move a replica's weight: a follower serves
// the leader's decisions, a new leader starts from them, and one that
// loses the lead before it published keeps serving them.
func TestLeadershipKeepsDecisions(t *testing.T) {
	p := mustParse(t, `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = ["127.0.0.1:1", "127.0.0.1:2"] }
  metrics {
    interval    = "1s"
    stale_after = "1m"
  }
}
`)
	peers := scripted{h: make(chan ha.Handler, 1)}
	r := New(Options{Sink: server.New(server.Options{}), Logger: hclog.NewNullLogger(), ID: "b", Peers: peers})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	h := <-peers.h
	weight := func() uint32 {
		for _, e := range r.Fleet().Pools[0].Endpoints {
			if e.HashKey == "127.0.0.1:1" {
				return e.Weight
			}
		}
		return 0
	}
	if weight() != 1 {
		t.Fatalf("before any decision: weight %d", weight())
	}
	doc := ha.Document{Leader: "a", Term: 1, Time: time.Now(), Pools: ha.Decisions{"chat": {
		"127.0.0.1:1": {Weight: 3}, "127.0.0.1:2": {Weight: 1, Saturated: true},
	}}}
	h.Published(doc)
	waitFor(t, "the leader's decisions", func() bool { return weight() == 3 })

	h.Leading(true, 2)
	waitFor(t, "leading", func() bool { return r.HA().Leading && r.HA().Term == 2 })
	time.Sleep(100 * time.Millisecond)
	if weight() != 3 {
		t.Fatalf("a new leader moved a weight: %d", weight())
	}
	h.Leading(false, 2)
	waitFor(t, "following", func() bool { return !r.HA().Leading })
	time.Sleep(100 * time.Millisecond)
	if weight() != 3 {
		t.Fatalf("losing the lead moved a weight: %d", weight())
	}
	// A deposed leader's late document (an older term) is ignored.
	newer := doc
	newer.Term, newer.Time, newer.Pools = 3, time.Now(), ha.Decisions{"chat": {"127.0.0.1:1": {Weight: 2}}}
	h.Published(newer)
	waitFor(t, "the new leader's decisions", func() bool { return weight() == 2 })
	h.Published(doc)
	time.Sleep(100 * time.Millisecond)
	if weight() != 2 {
		t.Fatalf("an older term's document was applied: weight %d", weight())
	}
}

// With an elected leader, a follower reports its Envoys' requests in
// flight to the admin address the leader's decisions name, and adds the
// answer to its own; while it leads, it reports to nobody, and the
// answer it had goes.
func TestLoadReportsFollowTheLeader(t *testing.T) {
	p := mustParse(t, `
pool "docs" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    balance_factor = 150
    balance_on     = "prompt_bytes"
    load_interval  = "20ms"
    hot_keys { enabled = false }
  }
  static { endpoints = ["10.0.0.1:8000", "10.0.0.2:8000"] }
}
`)
	leader := ha.NewLoadExchange("a", nil)
	leader.SetPools(map[string]time.Duration{"docs": 20 * time.Millisecond})
	leader.SetOwn("docs", inflight.Load{Bytes: map[string]uint64{"10.0.0.2:8000": 900}}, true)
	srv := httptest.NewServer(leader)
	defer srv.Close()

	peers := scripted{h: make(chan ha.Handler, 1)}
	r := New(Options{Sink: server.New(server.Options{}), Logger: hclog.NewNullLogger(), ID: "b", Peers: peers})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.Close()
	if err := r.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	h := <-peers.h
	r.LoadSink().Start(1, "docs", "r1", inflight.Attempt{Host: "10.0.0.1:8000", Bytes: 40, At: time.Now()})
	bytes := func() string {
		var out []string
		for _, e := range r.Fleet().Pools[0].Endpoints {
			out = append(out, fmt.Sprintf("%s=%d", e.Address(), e.InFlightBytes))
		}
		return strings.Join(out, " ")
	}
	own := "10.0.0.1:8000=40 10.0.0.2:8000=0"
	waitFor(t, "its own figures", func() bool { return bytes() == own })

	h.Published(ha.Document{Leader: "a", Term: 1, Time: time.Now(), Admin: srv.URL})
	waitFor(t, "the leader's answer added", func() bool { return bytes() == "10.0.0.1:8000=40 10.0.0.2:8000=900" })
	waitFor(t, "the leader to count b's", func() bool {
		l, ok := leader.Peers("docs")
		return ok && l.Bytes["10.0.0.1:8000"] == 40
	})

	h.Leading(true, 2)
	waitFor(t, "its own figures alone while it leads", func() bool { return bytes() == own })
}
