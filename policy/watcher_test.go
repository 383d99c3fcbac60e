package policy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const waitFor = 5 * time.Second

func policyText(port int) string {
	return fmt.Sprintf(`pool "chat" {
  port = %d
  hash {
    key { header = "x-session-id" }
  }
}
`, port)
}

const badPolicy = `pool "chat" {
  port = 10000
  hash {
    table_size = 65536
    key { header = "x-session-id" }
  }
}
`

// errorSink captures the diagnostics of Error-level log lines.
type errorSink chan string

func (s errorSink) Accept(_ string, level hclog.Level, _ string, args ...any) {
	if level != hclog.Error {
		return
	}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "diagnostics" {
			s <- fmt.Sprint(args[i+1])
		}
	}
}

type harness struct {
	t       *testing.T
	file    string
	w       *Watcher
	reg     *prometheus.Registry
	reloads chan *Policy
	errs    errorSink
}

// newHarness creates a Watcher on file (which the caller may have
// created); the Watcher only learns of changes through fsnotify, as the
// poll is an hour away.
func newHarness(t *testing.T, file string) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		file:    file,
		reg:     prometheus.NewRegistry(),
		reloads: make(chan *Policy, 100),
		errs:    make(errorSink, 100),
	}
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "test", Output: testWriter{t}, Level: hclog.Debug})
	logger.RegisterSink(h.errs)
	w, err := NewWatcher(file, WatcherOptions{
		Logger:       logger,
		OnReload:     func(p *Policy) { h.reloads <- p },
		Registerer:   h.reg,
		Debounce:     10 * time.Millisecond,
		PollInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	return h
}

// run starts the Watcher and stops it when the test ends.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.w.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				h.t.Errorf("Run: %v", err)
			}
		case <-time.After(waitFor):
			h.t.Errorf("Run did not return after cancel")
		}
	})
}

// waitReload waits for OnReload with a policy whose pool has port.
func (h *harness) waitReload(port uint32) *Policy {
	h.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case p := <-h.reloads:
			if len(p.Pools) == 1 && p.Pools[0].Port == port {
				return p
			}
		case <-deadline:
			h.t.Fatalf("no reload with port %d within %v", port, waitFor)
		}
	}
}

func (h *harness) waitError() string {
	h.t.Helper()
	select {
	case s := <-h.errs:
		return s
	case <-time.After(waitFor):
		h.t.Fatalf("no rejected policy within %v", waitFor)
	}
	return ""
}

func (h *harness) metrics() (reloads, errs, success float64) {
	return testutil.ToFloat64(h.w.reloads), testutil.ToFloat64(h.w.reloadErrors), testutil.ToFloat64(h.w.lastSuccess)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content next to name and renames it over name, as
// atomic writers and many editors do.
func replaceFile(t *testing.T, name, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".tmp")
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

func TestWatcherEditInPlace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	writeFile(t, file, policyText(10000))
	h := newHarness(t, file)
	if p := h.w.Current(); p == nil || p.Pools[0].Port != 10000 {
		t.Fatalf("Current() after NewWatcher = %+v", p)
	}
	h.run()
	h.waitReload(10000) // the initial policy

	writeFile(t, file, policyText(10001))
	p := h.waitReload(10001)
	if h.w.Current() != p {
		t.Errorf("Current() is not the reloaded policy")
	}
	if reloads, _, success := h.metrics(); reloads < 2 || success != 1 {
		t.Errorf("reloads=%v success=%v, want >= 2 and 1", reloads, success)
	}
}

func TestWatcherRenameReplace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	writeFile(t, file, policyText(10000))
	h := newHarness(t, file)
	h.run()
	h.waitReload(10000)

	replaceFile(t, file, policyText(10002))
	h.waitReload(10002)
	// And again: the renamed-in file is a new inode, which a watch on the
	// file itself would have lost.
	replaceFile(t, file, policyText(10003))
	h.waitReload(10003)
	if got, _, _ := h.metrics(); got != 3 {
		t.Errorf("reloads = %v, want 3", got)
	}
}

func TestWatcherInvalidEdit(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	writeFile(t, file, policyText(10000))
	h := newHarness(t, file)
	h.run()
	good := h.waitReload(10000)

	replaceFile(t, file, badPolicy)
	diag := h.waitError()
	want := file + ":4:18: Table size not prime: table_size 65536 is not prime; the nearest primes are 65521 and 65537.\n"
	if diag != want {
		t.Errorf("logged diagnostics %q, want %q", diag, want)
	}
	if h.w.Current() != good {
		t.Errorf("Current() changed after an invalid edit")
	}
	const metrics = `
# HELP kvxds_policy_last_reload_success Whether the last policy load succeeded (1) or was rejected (0).
# TYPE kvxds_policy_last_reload_success gauge
kvxds_policy_last_reload_success 0
# HELP kvxds_policy_reload_errors_total Policy loads rejected because the file was unreadable or invalid.
# TYPE kvxds_policy_reload_errors_total counter
kvxds_policy_reload_errors_total 1
# HELP kvxds_policy_reloads_total Policy loads that succeeded, the first one included.
# TYPE kvxds_policy_reloads_total counter
kvxds_policy_reloads_total 1
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(metrics)); err != nil {
		t.Error(err)
	}

	// Fixing the file recovers.
	replaceFile(t, file, policyText(10004))
	h.waitReload(10004)
	if reloads, errs, success := h.metrics(); reloads != 2 || errs != 1 || success != 1 {
		t.Errorf("reloads=%v errors=%v success=%v, want 2 1 1", reloads, errs, success)
	}
}

// TestWatcherConfigMapSwap mimics how the kubelet updates a mounted
// ConfigMap: the file is a symlink through "..data", itself a symlink to a
// timestamped directory, and an update atomically renames a new "..data"
// symlink over the old one.
func TestWatcherConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "policy.hcl"), content)
	}
	version("..2024_01_01_00_00_00.1", policyText(10000))
	if err := os.Symlink("..2024_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "policy.hcl")
	if err := os.Symlink(filepath.Join("..data", "policy.hcl"), file); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, file)
	h.run()
	h.waitReload(10000)

	version("..2024_01_01_00_01_00.2", policyText(10005))
	if err := os.Symlink("..2024_01_01_00_01_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2024_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	h.waitReload(10005)
}

func TestWatcherStartsWithoutFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	h := newHarness(t, file)
	if h.w.Current() != nil {
		t.Fatalf("Current() = %+v without a file", h.w.Current())
	}
	if !strings.Contains(h.waitError(), "Cannot read policy file") {
		t.Errorf("missing file not reported")
	}
	h.run()
	replaceFile(t, file, policyText(10006))
	h.waitReload(10006)
	if reloads, errs, success := h.metrics(); reloads != 1 || errs != 1 || success != 1 {
		t.Errorf("reloads=%v errors=%v success=%v, want 1 1 1", reloads, errs, success)
	}
}

// TestWatcherCheck drives check directly: a rejected content is counted
// and logged once, however often it is read.
func TestWatcherCheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	writeFile(t, file, policyText(10000))
	h := newHarness(t, file)
	good := h.w.Current()

	for _, content := range []string{badPolicy, badPolicy, " \n", " \n"} {
		writeFile(t, file, content)
		h.w.check(true)
	}
	if _, errs, _ := h.metrics(); errs != 2 {
		t.Errorf("errors = %v, want 2 (one per distinct content)", errs)
	}
	if len(h.errs) != 2 {
		t.Errorf("%d error log lines, want 2", len(h.errs))
	}
	if h.w.Current() != good {
		t.Errorf("Current() changed after invalid content")
	}
	if len(h.reloads) != 0 {
		t.Errorf("OnReload called for invalid content")
	}

	writeFile(t, file, policyText(10001))
	h.w.check(true)
	h.w.check(true)
	if len(h.reloads) != 1 || h.w.Current().Pools[0].Port != 10001 {
		t.Errorf("valid content: %d reloads, Current() = %+v", len(h.reloads), h.w.Current())
	}
}

func TestNewWatcherRegistration(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	reg := prometheus.NewRegistry()
	if _, err := NewWatcher(file, WatcherOptions{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewWatcher(file, WatcherOptions{Registerer: reg}); err == nil {
		t.Error("second Watcher on the same registry: no error")
	}
	if _, err := NewWatcher(file, WatcherOptions{}); err != nil {
		t.Errorf("Watcher without registry: %v", err)
	}
	if _, err := NewWatcher("", WatcherOptions{}); err == nil {
		t.Error("empty file name: no error")
	}
}
