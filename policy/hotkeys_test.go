package policy

import (
	"reflect"
	"testing"
	"time"

	"github.com/kvxds/kvxds/fleet"
)

// The hot_keys block decodes into fleet.HotKeys; without one a hashing
// pool gets the defaults, and enabled = false or a pool that does not
// hash gets none.
func TestHotKeysBlock(t *testing.T) {
	pool := func(lb, hot string) string {
		return `pool "p" {
  port = 10000
  ` + lb + `
  hash {
    key { header = "x-tenant" }
    ` + hot + `
  }
}`
	}
	def := fleet.DefaultHotKeys()
	for _, tc := range []struct {
		name string
		src  string
		want *fleet.HotKeys
	}{
		{"default", pool("", ""), &def},
		{"empty block", pool("", "hot_keys {}"), &def},
		{"off", pool("", "hot_keys { enabled = false }"), nil},
		{"baseline", pool(`load_balancing = "round_robin"`, ""), nil},
		{"every attribute", pool("", `hot_keys {
      enabled     = true
      share       = 0.125
      max         = 256
      log_cluster = "xds_cluster"
      interval    = "30s"
      half_life   = "5m"
      spread_by { json_field = "metadata.conversation_id" }
    }`), &fleet.HotKeys{Share: 0.125, Max: 256, LogCluster: "xds_cluster", Interval: 30 * time.Second, HalfLife: 5 * time.Minute,
			SpreadBy: fleet.HashKey{JSONField: "metadata.conversation_id"}}},
		{"declared", pool("", `hot_keys {
      max = 3
      declared {
        header = "X-Tenant"
        values = ["globex", "acme", "app-0"]
      }
    }`), func() *fleet.HotKeys {
			h := fleet.DefaultHotKeys()
			h.Max = 3
			h.Declared = []fleet.DeclaredHotKey{{Key: 0, Value: "acme"}, {Key: 0, Value: "app-0"}, {Key: 0, Value: "globex"}}
			return &h
		}()},
		{"prompt prefix", pool("", `hot_keys {
      spread_by { prompt_prefix = 2048 }
    }`), func() *fleet.HotKeys {
			h := fleet.DefaultHotKeys()
			h.SpreadBy = fleet.HashKey{PromptPrefix: 2048}
			return &h
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, diags := Parse([]byte(tc.src), "p.hcl")
			if diags.HasErrors() {
				t.Fatalf("diagnostics:\n%s", Format(diags))
			}
			if got := p.Pools[0].Hash.Hot; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if err := checkPolicy(p); err != nil {
				t.Error(err)
			}
		})
	}
}
