package adsload

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// PolicyOptions describe the kvxds policy of the measurement: one pool of
// static endpoints, optionally scraped.
type PolicyOptions struct {
	XDS, Admin string
	Endpoints  []string
	// Weight is every endpoint's static weight.
	Weight int
	// Scrape, if positive, is the metrics interval of the pool: the
	// endpoints are vLLM engines, and a replica whose queue reaches half
	// of MaxQueue halves its weight multiplier (2 → 1).
	Scrape time.Duration
}

// maxQueue is the pool's max_queue_depth: far above the queues the
// measurement drives, so no replica is taken out of the table.
const maxQueue = 128

// Policy renders the policy.
func Policy(o PolicyOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "xds {\n  address = %q\n  max_streams_per_address = 0\n}\n", o.XDS)
	fmt.Fprintf(&b, "admin { address = %q }\n\n", o.Admin)
	b.WriteString("pool \"chat\" {\n  port = 10000\n  hash {\n    key { header = \"x-session-id\" }\n  }\n  static {\n")
	for _, ep := range o.Endpoints {
		fmt.Fprintf(&b, "    endpoint %q { weight = %d }\n", ep, o.Weight)
	}
	b.WriteString("  }\n")
	if o.Scrape > 0 {
		timeout := o.Scrape / 2
		fmt.Fprintf(&b, `  metrics {
    engine   = "vllm"
    interval = %q
    timeout  = %q
  }
  escape {
    max_queue_depth    = %d
    resume_queue_depth = %d
  }
  weights {
    min          = 1
    max          = 2
    levels       = 2
    smoothing    = 1
    hysteresis   = 0.1
    min_interval = "0s"
  }
`, o.Scrape.String(), timeout.String(), maxQueue, maxQueue/2)
	}
	b.WriteString("}\n")
	return b.String()
}

// WritePolicy writes the policy to path atomically (a rename), as
// configuration management tools and Kubernetes do.
func WritePolicy(path string, o PolicyOptions) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".policy-*")
	if err != nil {
		return fmt.Errorf("writing policy: %w", err)
	}
	if _, err := tmp.WriteString(Policy(o)); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing policy: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing policy: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing policy: %w", err)
	}
	return nil
}
