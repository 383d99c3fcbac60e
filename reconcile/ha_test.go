package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/ha"
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
