package bench

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestInstances: --instances K starts K kvxds instances, the others
// following the first, which serve the same fleet; client i attaches to
// instance i mod K.
func TestInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, addrs := startTestFleet(t, 2)
	pol, err := Policy(PolicyOptions{Mode: KVXDS, Endpoints: addrs, TimeScale: 10, Scrape: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Clients: 3, Instances: 3}.Defaults()
	k, err := startKVXDS(ctx, c, pol, "instances-test", KVXDS)
	if err != nil {
		t.Fatal(err)
	}
	defer k.stop()
	if len(k.followers) != 2 {
		t.Fatalf("%d followers, want 2", len(k.followers))
	}
	for i, f := range k.followers {
		if st := f.Status(); st.HA.Mode != "following http://"+k.ctrl.AdminAddr() {
			t.Errorf("follower %d: %q", i, st.HA.Mode)
		}
	}
	want := []string{k.ctrl.XDSAddr(), k.followers[0].XDSAddr(), k.followers[1].XDSAddr(), k.ctrl.XDSAddr()}
	for i, w := range want {
		if got := k.xdsAddr(i); got != w {
			t.Errorf("client %d attaches to %s, want %s", i, got, w)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		lead := k.ctrl.Fleet()
		same := true
		for _, f := range k.followers {
			same = same && reflect.DeepEqual(f.Fleet(), lead)
		}
		if same && len(lead.Pools) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the followers do not serve the first instance's fleet")
		}
	}
}
