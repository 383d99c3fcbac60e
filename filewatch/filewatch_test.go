package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Changed runs once at the start, once per burst of changes (the default
// debounce), whether a file is renamed over or its Kubernetes-style
// "..data" symlink swapped, and Run returns nil when its context ends.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "cert.pem"), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, "cert.pem")
	if err := os.Symlink(filepath.Join("..data", "cert.pem"), linked); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "policy.hcl")
	if err := os.WriteFile(plain, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}

	var calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// Debounce unset: DefaultDebounce.
		done <- Run(ctx, Options{Files: []string{plain, linked, ""},
			PollInterval: time.Hour, Changed: func() { calls.Add(1) }})
	}()
	wait := func(what string, n int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for calls.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d calls, want %d", what, calls.Load(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("start", 1)
	time.Sleep(100 * time.Millisecond) // the watch is set up before the first call

	tmp := plain + ".tmp"
	if err := os.WriteFile(tmp, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, plain); err != nil {
		t.Fatal(err)
	}
	wait("rename over", 2)

	if err := os.Symlink("v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	wait("symlink swap", 3)

	// The debounce folds a burst into one call.
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 3 {
		t.Errorf("%d calls after three changes, want 3", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRunUnwatchableDirectory(t *testing.T) {
	err := Run(context.Background(), Options{Files: []string{"/nonexistent-kvxds/policy.hcl"},
		Debounce: time.Millisecond, PollInterval: time.Hour, Changed: func() {}})
	if err == nil {
		t.Fatal("Run watched a directory that does not exist")
	}
}
