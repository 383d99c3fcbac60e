package discovery

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/fleet"
)

// fake is a source whose updates the test sends.
type fake chan Update

func (f fake) Run(ctx context.Context, up chan<- Update) {
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-f:
			select {
			case up <- u:
			case <-ctx.Done():
				return
			}
		}
	}
}

func tgt(host string, port uint32) fleet.Endpoint { return fleet.Endpoint{Host: host, Port: port} }

// waitTargets polls m until its targets equal want, and their sources
// too when want names them.
func waitTargets(t *testing.T, m *Manager, want []PoolTargets) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := m.Targets()
		if slices.EqualFunc(got, want, func(a, b PoolTargets) bool {
			return a.Pool == b.Pool && slices.Equal(a.Targets, b.Targets) && (b.Sources == nil || maps.Equal(a.Sources, b.Sources))
		}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("groups %+v, want %+v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestManagerMergesAndFailsStatic(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	m := NewManager(nil, reg)
	a, b, c := make(fake), make(fake), make(fake)
	m.Apply(ctx, []Spec{{"chat", "dns-1", a}, {"chat", "static", b}, {"code", "k8s-1", c}})

	for _, step := range []struct {
		name string
		src  fake
		u    Update
		want []PoolTargets
	}{
		{"first source", a, Update{Targets: []fleet.Endpoint{tgt("10.0.0.2", 80), tgt("10.0.0.1", 80)}},
			[]PoolTargets{{Pool: "chat", Targets: []fleet.Endpoint{tgt("10.0.0.1", 80), tgt("10.0.0.2", 80)}}, {Pool: "code"}}},
		{"second source merged, duplicate kept once", b, Update{Targets: []fleet.Endpoint{tgt("10.0.0.3", 80), {Host: "10.0.0.1", Port: 80, Weight: 9}}},
			[]PoolTargets{{Pool: "chat", Targets: []fleet.Endpoint{tgt("10.0.0.1", 80), tgt("10.0.0.2", 80), tgt("10.0.0.3", 80)}}, {Pool: "code"}}},
		{"other pool", c, Update{Targets: []fleet.Endpoint{tgt("10.1.0.1", 8000)}},
			[]PoolTargets{{Pool: "chat", Targets: []fleet.Endpoint{tgt("10.0.0.1", 80), tgt("10.0.0.2", 80), tgt("10.0.0.3", 80)}}, {Pool: "code", Targets: []fleet.Endpoint{tgt("10.1.0.1", 8000)}}}},
		{"a failing source keeps its last good targets", a, Update{Err: errors.New("SERVFAIL")},
			[]PoolTargets{{Pool: "chat", Targets: []fleet.Endpoint{tgt("10.0.0.1", 80), tgt("10.0.0.2", 80), tgt("10.0.0.3", 80)}}, {Pool: "code", Targets: []fleet.Endpoint{tgt("10.1.0.1", 8000)}}}},
		{"an empty answer is an answer", c, Update{Targets: []fleet.Endpoint{}},
			[]PoolTargets{{Pool: "chat", Targets: []fleet.Endpoint{tgt("10.0.0.1", 80), tgt("10.0.0.2", 80), tgt("10.0.0.3", 80)}}, {Pool: "code"}}},
	} {
		step.src <- step.u
		waitTargets(t, m, step.want)
	}
	if got := testutil.ToFloat64(m.metrics.errors.WithLabelValues("chat", "dns-1")); got != 1 {
		t.Errorf("errors counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.metrics.up.WithLabelValues("chat", "dns-1")); got != 0 {
		t.Errorf("failing source up = %v, want 0", got)
	}

	// Removing a source drops its targets, and only its.
	m.Apply(ctx, []Spec{{"chat", "static", b}, {"code", "k8s-1", c}})
	waitTargets(t, m, []PoolTargets{{Pool: "chat", Targets: []fleet.Endpoint{{Host: "10.0.0.1", Port: 80, Weight: 9}, tgt("10.0.0.3", 80)}}, {Pool: "code"}})
	select {
	case <-m.Changed():
	default:
		t.Error("no change signalled")
	}
	m.Stop()
	if len(m.Targets()) != 0 {
		t.Errorf("targets after Stop: %+v", m.Targets())
	}
}

func TestManagerSignalsOnlyChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(nil, nil)
	a := make(fake)
	m.Apply(ctx, []Spec{{"chat", "a", a}})
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := m.WaitSynced(wctx); err == nil {
		t.Fatal("synced before the source reported")
	}
	wcancel()
	a <- Update{Targets: []fleet.Endpoint{tgt("10.0.0.1", 80)}}
	wctx, wcancel = context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := m.WaitSynced(wctx); err != nil {
		t.Fatal(err)
	}
	<-m.Changed()
	// The same targets again (a resync) signal nothing.
	a <- Update{Targets: []fleet.Endpoint{tgt("10.0.0.1", 80)}}
	a <- Update{Targets: []fleet.Endpoint{tgt("10.0.0.1", 80)}} // the first was consumed
	select {
	case <-m.Changed():
		t.Fatal("an unchanged update signalled a change")
	case <-time.After(50 * time.Millisecond):
	}
}

// Each merged target names the source that reported it; an address two
// sources report is kept from the first in ID order.
func TestManagerNamesSources(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(nil, nil)
	defer m.Stop()
	m.Apply(ctx, []Spec{
		{"chat", "static 1", Static{tgt("10.0.0.1", 80), tgt("10.0.0.2", 80)}},
		{"chat", "dns A vllm.test", Static{tgt("10.0.0.2", 80), tgt("10.0.0.3", 80)}},
	})
	if err := m.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	waitTargets(t, m, []PoolTargets{{
		Pool:    "chat",
		Targets: []fleet.Endpoint{tgt("10.0.0.1", 80), tgt("10.0.0.2", 80), tgt("10.0.0.3", 80)},
		Sources: map[string]string{"10.0.0.1:80": "static 1", "10.0.0.2:80": "dns A vllm.test", "10.0.0.3:80": "dns A vllm.test"},
	}})
}
