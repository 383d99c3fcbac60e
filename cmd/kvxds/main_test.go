package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const chatOK = "../../examples/chat.hcl: ok\n  pool chat: no metrics block: static weights\n"

// bodyKeys is a valid policy whose pools have body keys.
const bodyKeys = "../../policy/testdata/invalid/body_keys.hcl"

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("pool \"a\" {\n  port = 70000\n  hash {\n    key { header = \"x\" }\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stdout    string
		stderrHas string
	}{
		{"example is valid", []string{"validate", "../../examples/chat.hcl"}, 0, chatOK, ""},
		{"bad file", []string{"validate", bad}, 1, "", bad + ":2:10: "},
		{"one bad of two", []string{"validate", "../../examples/chat.hcl", bad}, 1, chatOK, "out of range"},
		{"missing file", []string{"validate", filepath.Join(dir, "nope.hcl")}, 1, "", "nope.hcl"},
		{"no file", []string{"validate"}, 2, "", "no policy file"},
		// Body keys draw a warning (gRPC clients skip them); serve and
		// render accept the policy, and so does validate.
		{"warnings pass", []string{"validate", bodyKeys}, 0,
			bodyKeys + ": ok (2 warnings)\n  pool chat: no metrics block: static weights\n  pool completions: no metrics block: static weights\n",
			bodyKeys + ":8:11: warning: Body keys are Envoy only: "},
		{"warnings fail with --strict", []string{"validate", "--strict", bodyKeys}, 1, "", bodyKeys + ": 2 warnings, which --strict fails\n"},
		{"warnings of an escape block without metrics", []string{"validate", "../../policy/testdata/invalid/escape_without_metrics.hcl"}, 0,
			"../../policy/testdata/invalid/escape_without_metrics.hcl: ok (2 warnings)\n  pool chat: no metrics block: static weights\n", "warning: Escape block has no effect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			if stdout.String() != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderrHas) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.stderrHas)
			}
		})
	}
}

// The prefill/decode example is valid, and validate says which pool is
// the decode side.
func TestValidatePrefillExample(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "../../examples/prefill-decode/policy.hcl"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if want := "  pool llama: decode side; Envoy names each request's prefill replica of pool llama-prefill in x-prefiller-host-port\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout %q lacks %q", stdout.String(), want)
	}
}

func TestBootstrap(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"bootstrap", "--node", "n1", "--grpc", "--xds", "10.0.0.1:18000"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var b struct {
		XDSServers []struct {
			ServerURI string `json:"server_uri"`
		} `json:"xds_servers"`
		Node struct {
			ID string `json:"id"`
		} `json:"node"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &b); err != nil {
		t.Fatalf("gRPC bootstrap is not JSON: %v", err)
	}
	if b.Node.ID != "n1" || len(b.XDSServers) != 1 || b.XDSServers[0].ServerURI != "10.0.0.1:18000" {
		t.Fatalf("unexpected bootstrap %+v", b)
	}

	stdout.Reset()
	if code := run([]string{"bootstrap", "--node", "envoy-1", "--delta"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "api_type: DELTA_GRPC") || !strings.Contains(stdout.String(), "id: envoy-1") {
		t.Fatalf("unexpected Envoy bootstrap:\n%s", stdout.String())
	}

	stderr.Reset()
	if code := run([]string{"bootstrap"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--node is required") {
		t.Fatalf("missing --node: exit %d, stderr %q", code, stderr.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"frobnicate"}, {"serve", "--log-format", "xml"}, {"serve", "--log-level", "loud"}, {"serve", "extra"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if stderr.Len() == 0 {
			t.Errorf("%v: no message", args)
		}
	}
}

func TestServeRejectsInvalidPolicy(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("pool \"a\" {\n  port = 1\n  hash {\n    algorithm = \"random\"\n    key { header = \"x\" }\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"serve", "--policy", bad}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), bad+":4:17: ") {
		t.Fatalf("stderr does not locate the error: %s", stderr.String())
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "kvxds ") {
		t.Fatalf("exit %d, output %q", code, stdout.String())
	}
}
