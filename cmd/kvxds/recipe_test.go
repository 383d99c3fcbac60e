package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateExamples = flag.Bool("update-examples", false, "rewrite examples/*/recipe.yaml from kvxds recipe")

// recipeExamples are the mesh examples: each directory's recipe.yaml is
// what kvxds recipe prints for its policy.hcl, and its README shows both.
var recipeExamples = []struct {
	dir  string
	args []string
}{
	{"istio", []string{"recipe", "istio", "chat", "--policy", "../../examples/istio/policy.hcl"}},
	{"envoy-gateway", []string{"recipe", "envoy-gateway", "chat", "--policy", "../../examples/envoy-gateway/policy.hcl", "--gateway", "eg"}},
	{"envoy-mesh", []string{"recipe", "envoy", "chat", "--policy", "../../examples/envoy-mesh/policy.hcl"}},
}

func TestRecipeExamples(t *testing.T) {
	for _, ex := range recipeExamples {
		t.Run(ex.dir, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(ex.args, &stdout, &stderr); code != 0 {
				t.Fatalf("kvxds %s: exit %d: %s", strings.Join(ex.args, " "), code, stderr.String())
			}
			dir := filepath.Join("..", "..", "examples", ex.dir)
			path := filepath.Join(dir, "recipe.yaml")
			if *updateExamples {
				if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(stdout.Bytes(), want) {
				t.Errorf("%s differs from kvxds %s (regenerate with go test ./cmd/kvxds -run TestRecipeExamples -update-examples):\n%s",
					path, strings.Join(ex.args, " "), stdout.String())
			}
			readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
			if err != nil {
				t.Fatal(err)
			}
			pol, err := os.ReadFile(filepath.Join(dir, "policy.hcl"))
			if err != nil {
				t.Fatal(err)
			}
			for name, content := range map[string][]byte{"policy.hcl": pol, "recipe.yaml": stdout.Bytes()} {
				if !bytes.Contains(readme, content) {
					t.Errorf("%s/README.md does not show the current %s verbatim", dir, name)
				}
			}
		})
	}
}

func TestRecipeUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"recipe"}, 2, "need a target, a pool and --policy"},
		{[]string{"recipe", "istio", "chat"}, 2, "need a target, a pool and --policy"},
		{[]string{"recipe", "istio", "--policy", "x.hcl"}, 2, "need a target, a pool and --policy"},
		{[]string{"recipe", "istio", "chat", "--policy", "testdata/missing.hcl"}, 1, "Cannot read policy file"},
		{[]string{"recipe", "istio", "nope", "--policy", "../../examples/istio/policy.hcl"}, 1, `no pool "nope"`},
		{[]string{"recipe", "envoy-gateway", "chat", "--policy", "../../examples/istio/policy.hcl"}, 1, "not an Envoy Gateway route cluster name"},
		{[]string{"recipe", "linkerd", "chat", "--policy", "../../examples/istio/policy.hcl"}, 1, "unknown target"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) || stdout.Len() != 0 {
			t.Errorf("kvxds %s: exit %d, stderr %q, stdout %d bytes; want exit %d and %q",
				strings.Join(tt.args, " "), code, stderr.String(), stdout.Len(), tt.code, tt.want)
		}
	}
}
