package kubernetes

import (
	"testing"
	"time"

	"github.com/kvxds/kvxds/test/kube"
)

// TestAPIServerRestart stops the API server for 10s: the source keeps its
// targets (one error update says it cannot tell, once the watch has been
// gone for downFor), reports them again when the server is back, and
// sees a change made after the restart, so its watch resumed.
func TestAPIServerRestart(t *testing.T) {
	t.Parallel()
	const outage = 10 * time.Second
	c := kube.Start(t)
	f := newFixture(t, c, "restart")
	f.apply(f.slice("llm-a", podEndpoints(5, 0, 4)...))
	r := start(t, newSource(t, c, f.config()))
	r.waitTargets(podTargets(5, 0, 4), waitFor)

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	errs := 0
	deadline := time.After(outage)
down:
	for {
		select {
		case u := <-r.up:
			if u.Err == nil {
				t.Fatalf("targets changed while the API server was down: %v", u.Targets)
			}
			errs++
			t.Logf("%s after the stop: %v", time.Since(stopped).Round(time.Millisecond), u.Err)
		case <-deadline:
			break down
		}
	}
	if errs != 1 {
		t.Errorf("%d error updates during a %s outage, want 1", errs, outage)
	}

	if err := c.StartAgain(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// client-go's backoff, grown during the outage, paces the recovery: the
	// next watch attempt, then (410 Gone: the new server's cache starts
	// later) a relist, each after up to 30s and jitter.
	r.waitTargets(podTargets(5, 0, 4), 3*waitFor)
	t.Logf("targets reported again %s after the API server was ready", time.Since(back).Round(time.Millisecond))

	f.apply(f.slice("llm-a", podEndpoints(5, 0, 5)...))
	r.waitTargets(podTargets(5, 0, 5), waitFor)
}
