package bootstrap

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from golden file:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestEnvoyGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"envoy-sotw.yaml", Options{NodeID: "envoy-1", XDSAddress: "127.0.0.1:18000"}},
		{"envoy-delta-dns.yaml", Options{NodeID: "edge", NodeCluster: "edge", XDSAddress: "kvxds.infra.svc:18000", Delta: true, AdminAddress: "0.0.0.0:9901"}},
		{"envoy-ha.yaml", Options{NodeID: "envoy-1", XDSAddresses: []string{"10.0.0.5:18000", "10.0.0.6:18000", "kvxds-2.infra:18000"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnvoyYAML(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, got)
		})
	}
}

func TestGRPCGolden(t *testing.T) {
	got, err := GRPCJSON(Options{NodeID: "client-1", XDSAddress: "127.0.0.1:18000"})
	if err != nil {
		t.Fatal(err)
	}
	var b GRPC
	if err := json.Unmarshal(got, &b); err != nil {
		t.Fatal(err)
	}
	if b.Node.Locality == nil {
		t.Error("node locality must be present (grpc-js requires it)")
	}
	golden(t, "grpc.json", append(got, '\n'))

	got, err = GRPCJSON(Options{NodeID: "client-1", XDSAddresses: []string{"10.0.0.5:18000", "10.0.0.6:18000"}})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "grpc-ha.json", append(got, '\n'))
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no node", Options{XDSAddress: "127.0.0.1:1"}, "node id"},
		{"no port", Options{NodeID: "n", XDSAddress: "127.0.0.1"}, "missing port"},
		{"bad port", Options{NodeID: "n", XDSAddress: "127.0.0.1:99999"}, "port must be"},
		{"no host", Options{NodeID: "n", XDSAddress: ":18000"}, "host is empty"},
		{"bad admin", Options{NodeID: "n", XDSAddress: "127.0.0.1:1", AdminAddress: "x"}, "admin address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EnvoyYAML(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
