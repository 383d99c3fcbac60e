package translate

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/kvxds/kvxds/xds/fleet"
)

var update = flag.Bool("update", false, "rewrite testdata/out golden files")

// yamlFleet is the readable input format of testdata/in: fleet.Fleet with
// durations and health as strings.
type yamlFleet struct {
	Pools []yamlPool `json:"pools"`
}

type yamlPool struct {
	Balancer      string         `json:"balancer"`
	Name          string         `json:"name"`
	ListenAddress string         `json:"listenAddress"`
	Port          uint32         `json:"port"`
	RouteTimeout  string         `json:"routeTimeout"`
	IdleTimeout   string         `json:"idleTimeout"`
	Hash          yamlHash       `json:"hash"`
	Endpoints     []yamlEndpoint `json:"endpoints"`
	Mesh          *struct {
		ClusterName string `json:"clusterName"`
		IstioMTLS   bool   `json:"istioMTLS"`
	} `json:"mesh"`
	Groups []struct {
		Name      string   `json:"name"`
		Header    string   `json:"header"`
		Values    []string `json:"values"`
		Replicas  int      `json:"replicas"`
		Exclusive bool     `json:"exclusive"`
	} `json:"groups"`
}

type yamlHash struct {
	Algorithm     string `json:"algorithm"`
	TableSize     uint64 `json:"tableSize"`
	MinRingSize   uint64 `json:"minRingSize"`
	MaxRingSize   uint64 `json:"maxRingSize"`
	BalanceFactor uint32 `json:"balanceFactor"`
	Keyless       string `json:"keyless"`
	MaxBodyBytes  int    `json:"maxBodyBytes"`
	Keys          []struct {
		Header         string `json:"header"`
		Cookie         string `json:"cookie"`
		QueryParameter string `json:"queryParameter"`
		JSONField      string `json:"jsonField"`
		PromptPrefix   int    `json:"promptPrefix"`
	} `json:"keys"`
}

type yamlEndpoint struct {
	Host     string `json:"host"`
	Port     uint32 `json:"port"`
	Weight   uint32 `json:"weight"`
	Health   string `json:"health"`
	Locality struct {
		Region  string `json:"region"`
		Zone    string `json:"zone"`
		SubZone string `json:"subZone"`
	} `json:"locality"`
	HashKey string `json:"hashKey"`
}

func loadFleet(t testing.TB, path string) fleet.Fleet {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var y yamlFleet
	if err := yaml.UnmarshalStrict(data, &y); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	dur := func(s string) time.Duration {
		if s == "" {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return d
	}
	var f fleet.Fleet
	for _, yp := range y.Pools {
		p := fleet.Pool{
			Name:          yp.Name,
			ListenAddress: yp.ListenAddress,
			Port:          yp.Port,
			RouteTimeout:  dur(yp.RouteTimeout),
			IdleTimeout:   dur(yp.IdleTimeout),
			Balancer:      fleet.Balancer(yp.Balancer),
			Hash: fleet.Hash{
				Algorithm:     fleet.Algorithm(yp.Hash.Algorithm),
				TableSize:     yp.Hash.TableSize,
				MinRingSize:   yp.Hash.MinRingSize,
				MaxRingSize:   yp.Hash.MaxRingSize,
				BalanceFactor: yp.Hash.BalanceFactor,
				Keyless:       fleet.Balancer(yp.Hash.Keyless),
				MaxBodyBytes:  yp.Hash.MaxBodyBytes,
			},
		}
		if m := yp.Mesh; m != nil {
			p.Mesh = &fleet.Mesh{ClusterName: m.ClusterName, IstioMTLS: m.IstioMTLS}
		}
		for _, g := range yp.Groups {
			p.Groups = append(p.Groups, fleet.Group{Name: g.Name, Header: g.Header, Values: g.Values, Replicas: g.Replicas, Exclusive: g.Exclusive})
		}
		for _, k := range yp.Hash.Keys {
			p.Hash.Keys = append(p.Hash.Keys, fleet.HashKey{Header: k.Header, Cookie: k.Cookie, QueryParameter: k.QueryParameter,
				JSONField: k.JSONField, PromptPrefix: k.PromptPrefix})
		}
		for _, ye := range yp.Endpoints {
			e := fleet.Endpoint{
				Host:     ye.Host,
				Port:     ye.Port,
				Weight:   ye.Weight,
				Locality: fleet.Locality{Region: ye.Locality.Region, Zone: ye.Locality.Zone, SubZone: ye.Locality.SubZone},
				HashKey:  ye.HashKey,
			}
			switch ye.Health {
			case "", "healthy":
				e.Health = fleet.Healthy
			case "draining":
				e.Health = fleet.Draining
			case "degraded":
				e.Health = fleet.Degraded
			case "unhealthy":
				e.Health = fleet.Unhealthy
			default:
				t.Fatalf("%s: unknown health %q", path, ye.Health)
			}
			p.Endpoints = append(p.Endpoints, e)
		}
		f.Pools = append(f.Pools, p)
	}
	return f
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
