package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/test/bench"
	"github.com/kvxds/kvxds/test/kube"
)

func TestHelpListsWorkloads(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, name := range bench.WorkloadNames() {
		if !strings.Contains(stderr.String(), name) {
			t.Errorf("help does not list workload %q:\n%s", name, stderr.String())
		}
	}
}

func TestUnknownWorkload(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--workload", "chat-apps,nope", "--out", t.TempDir(), "--no-progress"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `unknown workload "nope"`) || !strings.Contains(err.Error(), "chat-apps") {
		t.Fatalf("got %v, want an unknown-workload error listing chat-apps", err)
	}
}

// A prompt prefix shorter than a policy accepts is refused before any
// workload runs.
func TestShortPromptPrefix(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--workload", "chat-stateless", "--modes", "kvxds+prefix", "--prompt-prefix", "10",
		"--out", t.TempDir(), "--no-progress"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "prompt prefix must be at least 64 bytes, not 10") {
		t.Fatalf("got %v, want the prompt prefix refused", err)
	}
	if stdout.Len() > 0 {
		t.Errorf("a workload ran:\n%s", stdout.String())
	}
}

// Asked for where it cannot run, the rolling workload fails at once with
// the reason, before any other workload runs.
func TestRollingUnavailable(t *testing.T) {
	t.Setenv(kube.BinDirEnv, t.TempDir()) // no API server binaries there
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--workload", "chat,rolling", "--out", t.TempDir(), "--no-progress"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "rolling workload cannot run here") || !strings.Contains(err.Error(), "make kube-deps") {
		t.Fatalf("got %v, want the reason the rolling workload cannot run", err)
	}
	if stdout.Len() > 0 {
		t.Errorf("a workload ran:\n%s", stdout.String())
	}
}
