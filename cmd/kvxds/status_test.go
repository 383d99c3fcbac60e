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
	"time"

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

// Whatever figure the status lacks, the table leaves out or marks
// unknown, and never fails on: a pool without a balance (a hotspot among
// them), one without metrics or replicas, a follower that cannot reach
// its leader's decisions, a data plane that never accepted anything.
func TestStatusUnknowns(t *testing.T) {
	const rule = "(rule: balance above 2, hit rate at least 0.5, busiest queue at least 2)"
	for _, tc := range []struct {
		name      string
		edit      func(st *status.Status, chat *status.Pool)
		want, not []string
	}{{
		name: "pool bounding prompt bytes",
		edit: func(_ *status.Status, chat *status.Pool) { chat.BalanceOn = "prompt_bytes" },
		want: []string{"POOL chat  hash/maglev, bound on prompt_bytes  vllm  5 replicas"},
	}, {
		name: "pool without a balance or a note",
		edit: func(_ *status.Status, chat *status.Pool) { chat.Balance = nil },
		want: []string{"POOL chat  hash/maglev  vllm  5 replicas  hit rate 1m 72.0%  escapes 1h 1  weight moves 1h 4\n"},
		not:  []string{"  balance ", "HOTSPOT"},
	}, {
		name: "hotspot",
		edit: func(_ *status.Status, chat *status.Pool) { chat.Balance, chat.Hotspot = status.Number(2.64), true },
		want: []string{"balance 2.64", "\n  HOTSPOT: the busiest replica queues 2.6× the mean while the hit rate is 72.0% " + rule + "\n"},
	}, {
		name: "hotspot without a balance",
		edit: func(_ *status.Status, chat *status.Pool) { chat.Balance, chat.Hotspot = nil, true },
		want: []string{"\n  HOTSPOT: the hit rate is 72.0% " + rule + "\n"},
		not:  []string{"  balance "},
	}, {
		name: "hotspot without any figure",
		edit: func(_ *status.Status, chat *status.Pool) { chat.Balance, chat.HitRate1m, chat.Hotspot = nil, nil, true },
		want: []string{"\n  HOTSPOT: flagged without its figures " + rule + "\n"},
		not:  []string{"hit rate 1m"},
	}, {
		name: "pool without metrics",
		edit: func(_ *status.Status, chat *status.Pool) {
			chat.Engine, chat.Balance, chat.BusiestQueue1m, chat.MeanQueue1m, chat.HitRate1m = "", nil, nil, nil, nil
			chat.Signals, chat.PagesRead, chat.Moved = nil, 0, nil
			for i := range chat.Replicas {
				r := &chat.Replicas[i]
				r.Multiplier, r.TableShare, r.QueueDepth, r.KVOccupancy, r.HitRate1m, r.TTFTP95 = 0, nil, nil, nil, nil, nil
				r.LastScrape, r.SignalsFound, r.SignalsMissing = nil, nil, nil
			}
		},
		want: []string{"POOL chat  hash/maglev  5 replicas\n", "  10.0.0.4:8000  10.0.0.4:8000  draining   4       -      -      -   -       -         since 10m ago: going away (discovery)\n"},
		not:  []string{"last push", "SIGNAL", "last scrape failed"},
	}, {
		name: "pool without replicas",
		edit: func(_ *status.Status, chat *status.Pool) { chat.Replicas = nil },
		want: []string{"  balance 1.82  escapes 1h 1  weight moves 1h 4\n  last push"},
	}, {
		name: "follower that cannot reach its leader",
		edit: func(st *status.Status, _ *status.Pool) {
			st.HA = status.HA{Mode: "kubernetes lease infra/kvxds", Term: 3, Error: "connection refused"}
		},
		want: []string{"kvxds kvxds-0 v0.0.0-test  kubernetes lease infra/kvxds, following nobody yet (unreachable: connection refused)  2025-07-01"},
	}, {
		name: "follower, no error known",
		edit: func(st *status.Status, _ *status.Pool) { st.HA = status.HA{Mode: "lease", Leader: "kvxds-1"} },
		want: []string{"  lease, following kvxds-1 (unreachable)  "},
	}, {
		name: "data plane that never accepted anything",
		edit: func(st *status.Status, _ *status.Pool) {
			st.DataPlanes[0].ACKed, st.DataPlanes[0].Connected = nil, time.Time{}
		},
		want: []string{"  app-1    grpc         10.0.3.4:51234  1                   waiting for its first ACK\n"},
	}, {
		name: "no pools, no data planes",
		edit: func(st *status.Status, _ *status.Pool) { st.Pools, st.DataPlanes, st.HA = nil, nil, status.HA{} },
		want: []string{"kvxds kvxds-0 v0.0.0-test  standalone  2025-07-01 12:00:00 UTC\npolicy test.hcl\n\nDATA PLANES  none connected\n"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, body := serveStatus(t)
			var st status.Status
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatal(err)
			}
			tc.edit(&st, &st.Pools[1])
			var out bytes.Buffer
			printStatus(&out, &st, false)
			for _, want := range tc.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for _, not := range tc.not {
				if strings.Contains(out.String(), not) {
					t.Errorf("output has %q:\n%s", not, out.String())
				}
			}
		})
	}
}
