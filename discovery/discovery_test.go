package discovery

import (
	"context"
	"testing"
	"time"
)

func TestStaticSendsSortedGroupsOnce(t *testing.T) {
	s := Static{
		{Pool: "b", Targets: []Target{{Host: "127.0.0.1", Port: 2}}},
		{Pool: "a", Targets: []Target{{Host: "127.0.0.1", Port: 1}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan []Group)
	done := make(chan struct{})
	go func() { s.Run(ctx, up); close(done) }()
	select {
	case got := <-up:
		if len(got) != 2 || got[0].Pool != "a" || got[1].Pool != "b" {
			t.Fatalf("got %+v, want pools a, b in order", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no groups sent")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if s[0].Pool != "b" {
		t.Fatal("Run reordered its receiver")
	}
}
