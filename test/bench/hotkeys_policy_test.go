package bench

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
)

// The hot_keys block follows the documented shape: nothing at time scale
// 1 (hot keys are on by default), the interval and half-life divided by
// the time scale otherwise, enabled = false for the ablation; it is HCL
// that sits inside a hash block.
func TestHotKeysBlock(t *testing.T) {
	for _, tc := range []struct {
		scale float64
		off   bool
		want  map[string]string // attribute → value
	}{
		{scale: 1},
		{scale: 0},
		{scale: 5, want: map[string]string{"interval": "2s", "half_life": "12s"}},
		{scale: 15, want: map[string]string{"interval": "667ms", "half_life": "4s"}},
		{scale: 1, off: true, want: map[string]string{"enabled": "false"}},
		{scale: 15, off: true, want: map[string]string{"enabled": "false"}},
	} {
		text := HotKeysBlock(tc.scale, tc.off, nil)
		if tc.want == nil {
			if text != "" {
				t.Errorf("scale %g: %q, want nothing", tc.scale, text)
			}
			continue
		}
		src := "hash {\n" + text + "}\n"
		f, diags := hclsyntax.ParseConfig([]byte(src), "hash.hcl", hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("scale %g: %s\n%s", tc.scale, diags, src)
		}
		hash := f.Body.(*hclsyntax.Body).Blocks[0].Body
		if len(hash.Blocks) != 1 || hash.Blocks[0].Type != "hot_keys" {
			t.Fatalf("scale %g: not one hot_keys block:\n%s", tc.scale, src)
		}
		attrs := hash.Blocks[0].Body.Attributes
		if len(attrs) != len(tc.want) {
			t.Errorf("scale %g, off %v: %d attributes, want %v:\n%s", tc.scale, tc.off, len(attrs), tc.want, src)
		}
		for name, want := range tc.want {
			a, ok := attrs[name]
			if !ok {
				t.Errorf("scale %g: no %s in\n%s", tc.scale, name, src)
				continue
			}
			v, diags := a.Expr.Value(nil)
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			got := v.GoString()
			switch {
			case v.Type().FriendlyName() == "string":
				got = v.AsString()
				if _, err := time.ParseDuration(got); err != nil {
					t.Errorf("%s = %q is not a duration", name, got)
				}
			case v.True():
				got = "true"
			default:
				got = "false"
			}
			if got != want {
				t.Errorf("scale %g: %s = %s, want %s", tc.scale, name, got, want)
			}
		}
	}
}

// Every hash mode carries the block, and the policy decodes with hot
// keys off under --no-hot-keys.
func TestPolicyHotKeys(t *testing.T) {
	for _, off := range []bool{false, true} {
		for _, m := range []Mode{RoundRobin, KVXDS, KVXDSWeights, KVXDSPrefix} {
			text, err := Policy(PolicyOptions{Mode: m, Endpoints: []string{"127.0.0.1:8001"}, TimeScale: 5,
				Scrape: 250 * time.Millisecond, Escape: DefaultEscape().Resolve(6), BodyKey: "", NoHotKeys: off})
			if err != nil {
				t.Fatal(err)
			}
			hashed := m != RoundRobin
			if has := strings.Contains(text, "hot_keys"); has != hashed {
				t.Errorf("%s, off %v: hot_keys block %v, want %v:\n%s", m, off, has, hashed, text)
			}
			p, diags := policy.Parse([]byte(text), string(m)+".hcl")
			if diags.HasErrors() {
				t.Fatalf("%s: %s\n%s", m, policy.Format(diags), text)
			}
			if hashed && (p.Pools[0].Hash.Hot == nil) != off {
				t.Errorf("%s: hot keys %v under off = %v", m, p.Pools[0].Hash.Hot != nil, off)
			}
		}
	}
}

// --hot-values declares values of the session header always hot in every
// hash mode, at any time scale, and a body-keyed pool refuses them.
func TestPolicyHotValues(t *testing.T) {
	for _, scale := range []float64{1, 15} {
		text, err := Policy(PolicyOptions{Mode: KVXDS, Endpoints: []string{"127.0.0.1:8001"}, TimeScale: scale,
			Scrape: 250 * time.Millisecond, Escape: DefaultEscape().Resolve(6), HotValues: []string{"app-0", "app-1"}})
		if err != nil {
			t.Fatal(err)
		}
		p, diags := policy.Parse([]byte(text), "kvxds.hcl")
		if diags.HasErrors() {
			t.Fatalf("scale %g: %s\n%s", scale, policy.Format(diags), text)
		}
		want := []fleet.DeclaredHotKey{{Key: 0, Value: "app-0"}, {Key: 0, Value: "app-1"}}
		if hot := p.Pools[0].Hash.Hot; hot == nil || !reflect.DeepEqual(hot.Declared, want) {
			t.Errorf("scale %g: hot keys %+v, want declared %+v:\n%s", scale, hot, want, text)
		}
	}
	if _, err := Policy(PolicyOptions{Mode: KVXDSConversation, Endpoints: []string{"127.0.0.1:8001"}, TimeScale: 1,
		BodyKey: "conversation = true", HotValues: []string{"app-0"}}); err == nil {
		t.Error("hot values accepted in a body-keyed pool")
	}
}
