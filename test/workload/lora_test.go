package workload

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMultiLoRAShares(t *testing.T) {
	m := MultiLoRA()
	shares := m.Shares()
	if len(shares) != m.Adapters+1 {
		t.Fatalf("%d shares for %d adapters and the base model", len(shares), m.Adapters)
	}
	sum := 0.0
	for k, s := range shares {
		sum += s
		if k > 0 && k < m.Adapters && s > shares[k-1] {
			t.Fatalf("adapter shares not decreasing at %d", k)
		}
	}
	if math.Abs(sum-1) > 1e-9 || shares[m.Adapters] != m.BaseShare {
		t.Fatalf("shares sum to %v, base %v", sum, shares[m.Adapters])
	}
	// What the type's documentation promises of the defaults.
	tail := 0.0
	for _, s := range shares[50:m.Adapters] {
		tail += s
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"adapter 0", shares[0], 0.187},
		{"adapter 1", shares[1], 0.087},
		{"adapter 2", shares[2], 0.056},
		{"last fifty", tail, 0.084},
	} {
		if math.Abs(c.got-c.want) > 0.0005 {
			t.Errorf("%s: share %.4f, want %.3f", c.what, c.got, c.want)
		}
	}
	// A few adapters need more than one replica of a fleet of 16.
	hot := 0
	for _, s := range shares[:m.Adapters] {
		if s*16 > 1 {
			hot++
		}
	}
	if hot != 2 || shares[0]*8 <= 1 {
		t.Errorf("%d adapters above one replica's share of 16; adapter 0 is %.2f of 8", hot, shares[0]*8)
	}

	none := &MultiLoRAWorkload{}
	if s := none.Shares(); len(s) != 1 || s[0] != 1 {
		t.Errorf("no adapters: shares %v", s)
	}
}

func TestMultiLoRA(t *testing.T) {
	m := MultiLoRA()
	const d = 10 * time.Minute
	reqs := m.Generate(7, 20, d)
	checkStream(t, m.Name(), reqs, d)
	if !reflect.DeepEqual(reqs, m.Generate(7, 20, d)) {
		t.Fatal("same seed, different streams")
	}
	if reflect.DeepEqual(reqs, m.Generate(8, 20, d)) {
		t.Fatal("different seeds, same stream")
	}
	short := m.Generate(7, 20, d/2)
	if !reflect.DeepEqual(short, reqs[:len(short)]) {
		t.Fatal("a shorter horizon is not a prefix")
	}

	conv := map[string]Request{} // the first request of each conversation
	system := map[string]string{}
	turns, base, adapters := 0, 0, map[string]bool{}
	for _, r := range reqs {
		if r.Session == "" || r.Session != r.Conversation {
			t.Fatalf("request %d: session %q, conversation %q", r.Seq, r.Session, r.Conversation)
		}
		switch {
		case r.Adapter == "":
			base++
			if r.Tenant != "base" || r.System != 0 || r.Model("llama") != "llama" {
				t.Fatalf("base request %d: tenant %q, system %d", r.Seq, r.Tenant, r.System)
			}
		default:
			adapters[r.Adapter] = true
			if r.Tenant != r.Adapter || r.System == 0 || r.Model("llama") != r.Adapter {
				t.Fatalf("request %d under %q: tenant %q, system %d", r.Seq, r.Adapter, r.Tenant, r.System)
			}
			// Every conversation of an adapter starts with its system prompt.
			if s, ok := system[r.Adapter]; !ok {
				system[r.Adapter] = r.Prompt[:r.System]
			} else if s != r.Prompt[:r.System] {
				t.Fatalf("request %d: adapter %s with another system prompt", r.Seq, r.Adapter)
			}
		}
		first, ok := conv[r.Conversation]
		if !ok {
			conv[r.Conversation] = r
			continue
		}
		// A conversation keeps its adapter, and each turn extends the last.
		turns++
		if r.Adapter != first.Adapter {
			t.Fatalf("conversation %s switched from %q to %q", r.Conversation, first.Adapter, r.Adapter)
		}
		if dep := reqs[r.DependsOn]; !strings.HasPrefix(r.Prompt, dep.Prompt+" ") || r.DependsOn < 0 {
			t.Fatalf("request %d does not extend request %d", r.Seq, r.DependsOn)
		}
	}
	if turns == 0 || len(adapters) < 50 {
		t.Fatalf("%d later turns, %d adapters used", turns, len(adapters))
	}
	// Conversations pick the base model and the hottest adapters at their
	// shares.
	counts := map[string]int{}
	for _, r := range conv {
		counts[r.Adapter]++
	}
	shares := m.Shares()
	for _, c := range []struct {
		adapter string
		share   float64
	}{{"", shares[m.Adapters]}, {AdapterName(0), shares[0]}, {AdapterName(1), shares[1]}} {
		got := float64(counts[c.adapter]) / float64(len(conv))
		sd := math.Sqrt(c.share * (1 - c.share) / float64(len(conv)))
		if math.Abs(got-c.share) > 4*sd {
			t.Errorf("%q: %.4f of conversations, want %.4f ± %.4f", c.adapter, got, c.share, 4*sd)
		}
	}
	if base == 0 {
		t.Error("no base-model request")
	}
	if m.Generate(7, 0, d) != nil || m.Generate(7, 20, 0) != nil {
		t.Error("bad arguments give requests")
	}
}
