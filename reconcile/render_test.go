package reconcile

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/xds/translate"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestRenderGolden pins what each policy in testdata/render and each
// shipped example turns into, for both kinds of client. Regenerate with
// go test -update.
func TestRenderGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/render/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no policies: %v", err)
	}
	examples, err := filepath.Glob("../examples/*.hcl")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, file := range append(files, examples...) {
		p, diags := policy.Load(file)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", file, policy.Format(diags))
		}
		base := strings.TrimSuffix(file, ".hcl")
		if slices.Contains(examples, file) {
			base = filepath.Join("testdata", "render", "example-"+filepath.Base(base))
		}
		for _, kind := range translate.Kinds {
			golden := base + "." + kind.String() + ".yaml"
			t.Run(filepath.Base(golden), func(t *testing.T) {
				got, err := Render(p, kind)
				if err != nil {
					t.Fatal(err)
				}
				if *update {
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test -update)", err)
				}
				if string(got) != string(want) {
					t.Errorf("%s changed; if intended, run go test ./reconcile -update and review the diff\ngot:\n%s", golden, got)
				}
			})
		}
	}
}
