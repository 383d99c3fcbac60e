package translate

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/kvxds/kvxds/fleet"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files")

// loadFleet reads a golden input: a fleet.Fleet as its own JSON
// (fleet.Fleet's encoding), written as YAML so that it can carry comments.
// Keys the model does not know are an error, as a misspelt field would
// otherwise silently leave its default.
func loadFleet(t testing.TB, path string) fleet.Fleet {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var f fleet.Fleet
	if err := json.Unmarshal(j, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// Pool decodes through its own UnmarshalJSON, which ignores unknown
	// keys: check them against the fleet's encoding instead.
	back, err := json.Marshal(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var in, out any
	if err := json.Unmarshal(j, &in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(back, &out); err != nil {
		t.Fatal(err)
	}
	if err := unknownKeys(in, out, ""); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// unknownKeys reports the first key of in (decoded JSON) that out, its
// value re-encoded, lacks; keys with zero values may be omitted.
func unknownKeys(in, out any, at string) error {
	switch in := in.(type) {
	case map[string]any:
		o, _ := out.(map[string]any)
		for k, v := range in {
			ov, ok := o[k]
			if !ok {
				if zeroJSON(v) {
					continue
				}
				return fmt.Errorf("unknown key %s.%s", at, k)
			}
			if err := unknownKeys(v, ov, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		o, _ := out.([]any)
		for i, v := range in {
			if i >= len(o) {
				return fmt.Errorf("%s[%d]: lost", at, i)
			}
			if err := unknownKeys(v, o[i], fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func zeroJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// toYAML renders resources as a YAML list: protojson (proto field names,
// Any with @type) normalised through sigs.k8s.io/yaml, since protojson's
// whitespace is deliberately unstable.
func toYAML[T proto.Message](t testing.TB, items []T) []byte {
	t.Helper()
	j, err := jsonList(items)
	if err != nil {
		t.Fatal(err)
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/in/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no golden inputs")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			f := loadFleet(t, in)
			for _, kind := range Kinds {
				r, err := translateFleet(f, kind)
				if err != nil {
					t.Fatal(err)
				}
				outs := map[string][]byte{
					"listeners": toYAML(t, r.Listeners),
					"routes":    toYAML(t, r.Routes),
					"clusters":  toYAML(t, r.Clusters),
					"endpoints": toYAML(t, r.Endpoints),
				}
				if kind == GRPCNoHash {
					// GRPC's resources but the clusters: only those
					// have a golden file.
					g := mustTranslate(t, f, GRPC)
					for typ, want := range map[string][]byte{"listeners": toYAML(t, g.Listeners), "routes": toYAML(t, g.Routes), "endpoints": toYAML(t, g.Endpoints)} {
						if !bytes.Equal(outs[typ], want) {
							t.Errorf("%s: %s differ from grpc's", kind, typ)
						}
						delete(outs, typ)
					}
				}
				for typ, got := range outs {
					path := filepath.Join("testdata", "out", fmt.Sprintf("%s.%s.%s.yaml", name, kind, typ))
					if *update {
						if err := os.WriteFile(path, got, 0o644); err != nil {
							t.Fatal(err)
						}
						continue
					}
					want, err := os.ReadFile(path)
					if err != nil {
						t.Fatalf("%v (regenerate with go test ./xds/translate -update)", err)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("%s differs from translation (regenerate with -update if intended):\n--- got\n%s\n--- want\n%s", path, got, want)
					}
				}
			}
		})
	}
}
