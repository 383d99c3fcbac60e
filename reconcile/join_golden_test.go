package reconcile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"sigs.k8s.io/yaml"

	"github.com/kvxds/kvxds/policy"
)

// TestJoinGolden pins the fleet model every valid policy turns into: the
// policy package's valid examples and the shipped ones, joined with their
// static endpoints and no metric decisions, then normalised (the form the
// translator reads). The goldens are the model's own JSON, the same form
// the translator's golden inputs use. Regenerate with go test -update.
func TestJoinGolden(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../policy/testdata/valid/*.hcl", "../examples/*.hcl", "../examples/*/policy.hcl", "../examples/kubernetes/kvxds.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("only %d policies found", len(files))
	}
	seen := map[string]string{}
	for _, file := range files {
		name := goldenName(file)
		if other, dup := seen[name]; dup {
			t.Fatalf("%s and %s share golden %s", file, other, name)
		}
		seen[name] = file
		t.Run(name, func(t *testing.T) {
			p, diags := loadPolicy(t, file)
			if diags.HasErrors() {
				t.Fatalf("%s", policy.Format(diags))
			}
			f := Join(p, StaticTargets(p), nil).Normalize()
			if err := f.Validate(); err != nil {
				t.Fatalf("joined fleet does not validate: %v", err)
			}
			got, err := json.MarshalIndent(f, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "fleet", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./reconcile -update)", err)
			}
			if string(got) != string(want) {
				t.Errorf("%s changed; if intended, run go test ./reconcile -update and review the diff\ngot:\n%s", golden, got)
			}
		})
	}
}

// loadPolicy loads a policy file, or the policy.hcl of the ConfigMap in a
// Kubernetes manifest.
func loadPolicy(t *testing.T, file string) (*policy.Policy, hcl.Diagnostics) {
	if filepath.Ext(file) == ".hcl" {
		return policy.Load(file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if src, ok := cm.Data["policy.hcl"]; ok && cm.Kind == "ConfigMap" {
			return policy.Parse([]byte(src), file+":policy.hcl")
		}
	}
	t.Fatalf("%s: no ConfigMap with a policy.hcl", file)
	return nil, nil
}

// goldenName names a policy's golden after where it lives: "valid-chat",
// "example-chat", "example-istio".
func goldenName(file string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(file), ".hcl"), ".yaml")
	dir := filepath.Base(filepath.Dir(file))
	switch {
	case dir == "valid":
		return "valid-" + base
	case dir == "examples" && base != "kvxds":
		return "example-" + base
	default:
		return "example-" + dir
	}
}
