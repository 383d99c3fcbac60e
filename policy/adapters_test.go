package policy

import (
	"reflect"
	"testing"
	"time"

	"github.com/kvxds/kvxds/fleet"
)

// The adapters block decodes into fleet.Adapters; without one a pool
// places no adapters.
func TestAdaptersBlock(t *testing.T) {
	def := fleet.DefaultAdapters()
	def.MemberWeight = 1
	for _, tc := range []struct {
		name   string
		blocks string
		want   *fleet.Adapters
	}{
		{"absent", "", nil},
		{"empty block", "adapters {}", &def},
		{"every attribute", `adapters {
    header      = "X-LoRA"
    body_field  = "adapter"
    base_models = ["llama-3.1-8b"]
    adapters    = ["sql-lora", "fr/chat"]
    max_lora    = 8
    max         = 64
    interval    = "30s"
    half_life   = "5m"
  }
  metrics {}
  weights { max = 4 }`, &fleet.Adapters{Header: "x-lora", BodyField: "adapter", BaseModels: []string{"llama-3.1-8b"},
			Always: []string{"sql-lora", "fr/chat"}, MaxLoRA: 8, Max: 64, Interval: 30 * time.Second, HalfLife: 5 * time.Minute, MemberWeight: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, diags := Parse([]byte(poolWith(tc.blocks)), "p.hcl")
			if diags.HasErrors() {
				t.Fatalf("diagnostics:\n%s", Format(diags))
			}
			if got := p.Pools[0].LoRA; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
