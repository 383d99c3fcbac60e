package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/test/workload"
)

func TestHelpListsWorkloads(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, name := range workload.Names() {
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
