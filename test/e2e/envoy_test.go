package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvxds/kvxds/xds/bootstrap"
)

// TestEnvoy routes HTTP through a real Envoy configured by kvxds. It runs
// only where an envoy binary is on PATH.
func TestEnvoy(t *testing.T) {
	envoy, err := exec.LookPath("envoy")
	if err != nil {
		t.Skip("skipping: no envoy binary on PATH; the proxyless gRPC tests cover the xDS contract")
	}
	type httpBackend struct{ id, addr string }
	var backends []httpBackend
	for i := range 3 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("replica-%d", i)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, id) })}
		go srv.Serve(lis)
		t.Cleanup(func() { srv.Close() })
		backends = append(backends, httpBackend{id, lis.Addr().String()})
	}
	dir := t.TempDir()
	xdsAddr, adminAddr, listenAddr, envoyAdmin := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	_, port, _ := net.SplitHostPort(listenAddr)
	var eps strings.Builder
	for _, b := range backends {
		fmt.Fprintf(&eps, "    endpoint %q { hash_key = %q }\n", b.addr, b.id)
	}
	policy := fmt.Sprintf(`xds   { address = %q }
admin { address = %q }
pool "chat" {
  port = %s
  listen_address = "127.0.0.1"
  hash {
    key { header = "x-session-id" }
  }
  static {
%s  }
}
`, xdsAddr, adminAddr, port, eps.String())
	path := filepath.Join(dir, "policy.hcl")
	writeAtomic(t, path, policy)
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()

	cfg, err := bootstrap.EnvoyYAML(bootstrap.Options{NodeID: "envoy-e2e", XDSAddress: xdsAddr, AdminAddress: envoyAdmin})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(envoy, "-c", cfgPath, "--base-id", fmt.Sprint(os.Getpid()%1000), "-l", "warning")
	cmd.Stdout, cmd.Stderr = testWriter{t}, testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()

	get := func(session string) (string, error) {
		req, _ := http.NewRequest("GET", "http://"+listenAddr+"/v1/models", nil)
		if session != "" {
			req.Header.Set("x-session-id", session)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return string(b), err
	}
	eventually(t, "Envoy to route", func() bool {
		_, err := get("probe")
		return err == nil
	})
	first := map[string]string{}
	for _, s := range sessions(300) {
		id, err := get(s)
		if err != nil {
			t.Fatal(err)
		}
		first[s] = id
	}
	for _, s := range sessions(300) {
		if id, err := get(s); err != nil || id != first[s] {
			t.Fatalf("session %s: %q then %q (%v)", s, first[s], id, err)
		}
	}
	if got := shares(first); len(got) != len(backends) {
		t.Fatalf("sessions reached %d of %d replicas: %v", len(got), len(backends), got)
	}

	// Requests without the key take the keyless route: round robin over
	// the same replicas (one keep-alive connection, so one Envoy worker and
	// one rotation, where a random hash would stray by ±8).
	keyless := map[string]int{}
	for range 300 {
		id, err := get("")
		if err != nil {
			t.Fatal(err)
		}
		keyless[id]++
	}
	t.Logf("300 keyless requests: %v", keyless)
	for _, b := range backends {
		if n := keyless[b.id]; n < 97 || n > 103 {
			t.Errorf("replica %s served %d of 300 keyless requests, want about 100 (round robin)", b.id, n)
		}
	}
}
