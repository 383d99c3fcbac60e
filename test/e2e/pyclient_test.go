package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/xds/bootstrap"
)

// pyPython is the interpreter that sees Debian's python3-grpcio (other
// Pythons on PATH do not).
const pyPython = "/usr/bin/python3"

// newPyClient starts Debian's gRPC C-core, through Python's grpcio
// (pygrpc/client.py), as a client of xds:///chat whose bootstrap file is
// what `kvxds bootstrap --grpc` prints. Without grpcio the test is skipped,
// unless KVXDS_REQUIRE_PYGRPC is set (CI sets it).
func newPyClient(t *testing.T, xdsAddr string) client {
	t.Helper()
	if out, err := exec.Command(pyPython, "-c", "import grpc; print(grpc.__version__)").CombinedOutput(); err != nil {
		if os.Getenv("KVXDS_REQUIRE_PYGRPC") != "" {
			t.Fatalf("%s cannot import grpc (apt-get install python3-grpcio): %v: %s", pyPython, err, out)
		}
		t.Skipf("no Python grpcio (apt-get install python3-grpcio): %v", err)
	}
	cfg, err := bootstrap.GRPCJSON(bootstrap.Options{NodeID: "e2e-py-" + t.Name(), XDSAddress: xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "xds-bootstrap.json")
	if err := os.WriteFile(file, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs("pygrpc")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pyPython, "client.py", "xds:///chat")
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRPC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GRPC_XDS_BOOTSTRAP="+file)
	return startStdioClient(t, "python-grpcio", cmd)
}
