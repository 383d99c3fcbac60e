package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// servePage serves a recorded engine page on a loopback address, as the
// engine's /metrics does; without KV lines if noKV.
func servePage(t *testing.T, page string, noKV bool) string {
	t.Helper()
	body, err := os.ReadFile("../../weights/testdata/pages/" + page)
	if err != nil {
		t.Fatal(err)
	}
	if noKV {
		var kept []string
		for _, l := range strings.SplitAfter(string(body), "\n") {
			if !strings.Contains(l, "kv_cache_usage_perc") {
				kept = append(kept, l)
			}
		}
		body = []byte(strings.Join(kept, ""))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// `kvxds validate` says how each pool is scraped, and --probe scrapes
// the static endpoints once: a vLLM replica, one whose page lacks the KV
// gauge, and one that serves TGI's page under engine = "vllm".
func TestValidateProbe(t *testing.T) {
	vllm, noKV, tgi := servePage(t, "vllm_v1.txt", false), servePage(t, "vllm_v1.txt", true), servePage(t, "tgi.txt", false)
	bodyKey := "key { prompt_prefix = 4096 }" // a warning: gRPC clients skip it
	write := func(endpoints ...string) string {
		file := filepath.Join(t.TempDir(), "policy.hcl")
		src := fmt.Sprintf(`pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
    `+bodyKey+`
  }
  static { endpoints = ["%s"] }
  metrics { engine = "vllm" }
}
`, strings.Join(endpoints, `", "`))
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}

	good := write(vllm)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", good}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// The profile's names are weights' (checked there); here, the form.
	for _, want := range []string{
		good + ": ok (1 warning)\n  pool chat: engine vllm: scrapes http://<replica>:<serving port>/metrics every 2s (timeout 1s)\n",
		"\n    SIGNAL           USED BY                   METRIC (the first present wins)\n",
		"\n    kv_occupancy     weights and escape hatch  vllm:kv_cache_usage_perc or ",
		"\n    preemptions      escape hatch              vllm:",
		"\n    ttft             status                    vllm:time_to_first_token_seconds",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), ": warning: Body keys are Envoy only: ") {
		t.Errorf("stderr: %s", stderr.String())
	}

	bodyKey = ""
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		endpoints []string
		lines     []string
	}{
		{"every signal", []string{"--probe"}, 0, []string{vllm},
			[]string{"  probe pool chat:\n    " + vllm + "  http://" + vllm + "/metrics  ok: every signal found\n"}},
		{"a page without KV", []string{"--probe"}, 0, []string{vllm, noKV},
			[]string{"http://" + noKV + "/metrics  ok, lacks kv_occupancy (used by weights and escape hatch)\n"}},
		{"a page without KV, strict", []string{"--probe", "--strict"}, 1, []string{noKV},
			[]string{"http://" + noKV + "/metrics  ok, lacks kv_occupancy"}},
		{"every signal, strict", []string{"--probe", "--strict"}, 0, []string{vllm}, []string{"ok: every signal found"}},
		{"the wrong engine", []string{"--probe"}, 1, []string{vllm, tgi},
			[]string{"http://" + tgi + "/metrics  failed: missing_series: "}},
		{"nothing listening", []string{"--probe"}, 1, []string{"127.0.0.1:1"},
			[]string{"http://127.0.0.1:1/metrics  failed: connection_refused: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			file := write(tc.endpoints...)
			if code := run(append(append([]string{"validate"}, tc.args...), file), &stdout, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
			for _, l := range tc.lines {
				if !strings.Contains(stdout.String(), l) {
					t.Errorf("stdout lacks %q:\n%s", l, stdout.String())
				}
			}
		})
	}
}
