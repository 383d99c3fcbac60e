package kubernetes

import (
	"context"
	"net"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kvxds/kvxds/discovery"
)

// TestUnreachable points the source at a port nothing listens on: it
// reports the error at once, and once, not once per retry; and it returns
// when ctx is done.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	src, err := NewForConfig(Config{Namespace: "ns", Service: "svc", Port: "http"},
		&rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan discovery.Update)
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, up)
	}()
	defer cancel()

	select {
	case u := <-up:
		if u.Err == nil {
			t.Fatalf("first update = %+v, want an error", u)
		}
		t.Logf("error after %s: %v", time.Since(began).Round(time.Millisecond), u.Err)
	case <-time.After(10 * time.Second):
		t.Fatal("no error reported")
	}
	// The informer retries after 0.8s, then backs off: each retry fails
	// the same way and must not send another update.
	select {
	case u := <-up:
		t.Fatalf("second update %+v while still unreachable", u)
	case <-time.After(2 * time.Second):
	}

	// client-go sleeps out its backoff before it looks at ctx again; Run
	// must not wait for it.
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run still running a second after ctx was done")
	}
}
