package discovery

import (
	"context"
	"testing"
	"time"
)

func TestStaticSendsSortedTargetsOnce(t *testing.T) {
	s := Static{{Host: "127.0.0.1", Port: 2}, {Host: "127.0.0.1", Port: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan Update)
	done := make(chan struct{})
	go func() { s.Run(ctx, up); close(done) }()
	select {
	case got := <-up:
		if got.Err != nil || len(got.Targets) != 2 || got.Targets[0].Port != 1 {
			t.Fatalf("got %+v, want ports 1, 2 in order", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no update sent")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if s[0].Port != 2 {
		t.Fatal("Run reordered its receiver")
	}
}
