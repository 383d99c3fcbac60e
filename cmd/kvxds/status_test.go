package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/status"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// statusPage is the reconcile package's golden /api/v1/status: a fixed
// fleet with a saturated, a stale and a draining replica and a data plane
// that rejected a configuration.
const statusPage = "../../reconcile/testdata/status/status.json"

func serveStatus(t *testing.T) (string, []byte) {
	t.Helper()
	body, err := os.ReadFile(statusPage)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != status.Path {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), body
}

func checkGolden(t *testing.T, golden string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update to accept):\n%s", golden, got)
	}
}

// `kvxds status` against a real HTTP server: the table (no colour: stdout
// is not a terminal), and --json passes the page through.
func TestStatusCommand(t *testing.T) {
	addr, body := serveStatus(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "--admin", addr}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), "\x1b[") {
		t.Error("colour written to a non-terminal")
	}
	checkGolden(t, "testdata/status.txt", stdout.Bytes())

	stdout.Reset()
	if code := run([]string{"status", "--admin", "http://" + addr + "/", "--json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr.String())
	}
	if !bytes.Equal(stdout.Bytes(), body) {
		t.Errorf("--json printed %q, want the page as served", stdout.String())
	}
}

// The colours a terminal gets, pinned too; and the padding ignores them.
func TestStatusColour(t *testing.T) {
	_, body := serveStatus(t)
	var st status.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printStatus(&out, &st, true)
	checkGolden(t, "testdata/status.color.txt", out.Bytes())
	var plainOut bytes.Buffer
	printStatus(&plainOut, &st, false)
	stripped := out.String()
	for _, c := range []string{red, yellow, green, dim, bold, reset} {
		stripped = strings.ReplaceAll(stripped, c, "")
	}
	if stripped != plainOut.String() {
		t.Errorf("coloured output without its colours differs from the plain one:\n%s\nvs\n%s", stripped, plainOut.String())
	}
}

func TestStatusCommandErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stderrHas string
	}{
		{"not kvxds", []string{"status", "--admin", strings.TrimPrefix(srv.URL, "http://")}, 1, "404"},
		{"nothing listening", []string{"status", "--admin", "127.0.0.1:1"}, 1, "connection refused"},
		{"stray argument", []string{"status", "chat"}, 2, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(stderr.String(), tc.stderrHas) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.stderrHas)
			}
		})
	}
}

// A pool too idle for a balance, and one whose replicas' pages lack a
// signal, say so in the table.
func TestStatusSignalsAndBalance(t *testing.T) {
	_, body := serveStatus(t)
	var st status.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	chat := &st.Pools[1]
	chat.Balance, chat.BalanceNote = nil, "too little load to compare: the busiest replica queues 1 on average (balance needs 2)"
	for i := range chat.Signals {
		if c := &chat.Signals[i]; c.Signal == "kv_occupancy" {
			c.Found, c.Missing = 1, 3
		}
	}
	chat.Replicas[0].SignalsMissing = []string{"kv_occupancy"}
	var out bytes.Buffer
	printStatus(&out, &st, false)
	for _, want := range []string{
		"5 replicas  hit rate 1m 72.0%  balance - (too little load to compare: the busiest replica queues 1 on average (balance needs 2))  escapes 1h 1",
		"\n  SIGNAL kv_occupancy: missing on 3 of 4 replicas; weights and the escape hatch go without it: check the metrics block's engine, path and model (looked for vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc)\n",
		"page lacks kv_occupancy",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
