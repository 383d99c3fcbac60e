// Package policy reads kvxds's policy file: the HCL document that says which
// pools of LLM replicas Envoy serves, on which ports, and how requests are
// hashed onto replicas for KV-cache locality.
//
// A policy file looks like this (every setting but port, hash and its keys
// is optional; testdata/valid has more examples, doc.hcl being this one):
//
//	xds   { address = "127.0.0.1:18000" }
//	admin { address = "127.0.0.1:19000" }
//
//	pool "chat" {
//	  port          = 10000   # Envoy listener; gRPC clients dial xds:///chat
//	  route_timeout = "0s"    # no timeout: generations stream for minutes
//	  hash {
//	    algorithm      = "maglev" # or "ring_hash" (min_ring_size, max_ring_size)
//	    table_size     = 65537    # prime
//	    balance_factor = 150      # bounded load, percent; 0 = off
//	    key { header = "x-session-id" } # tried in order; first present wins
//	    key { cookie = "session" }
//	  }
//	  static {
//	    endpoints = ["127.0.0.1:8001"]
//	    endpoint "127.0.0.1:8002" {
//	      weight   = 3           # 1..128
//	      hash_key = "replica-b" # stable ring identity; default host:port
//	    }
//	  }
//	}
//
// The contract:
//
//   - Parse and Load decode a policy and validate all of it at once. They
//     return every problem found, each as an hcl.Diagnostic whose Subject
//     points at the offending token and whose Detail says how to fix it.
//     When any diagnostic is an error the returned *Policy is nil; a
//     non-nil Policy is complete: defaults are applied, pools are sorted by
//     name and every value is within the ranges Envoy and gRPC accept.
//   - Expressions are evaluated without variables or functions: a policy
//     file is data, not a program.
//   - Format renders diagnostics one per line as "file:line:col: summary:
//     detail", the form editors and CI logs link to.
//   - Watcher keeps the last good policy of a file current, reloading it
//     when the file changes (in place, by atomic rename, or by a Kubernetes
//     ConfigMap symlink swap). A bad edit is logged and counted, and never
//     replaces the last good policy.
//
// The package holds no global state.
package policy

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Defaults of the policy file.
const (
	DefaultXDSAddress      = "127.0.0.1:18000"
	DefaultAdminAddress    = "127.0.0.1:19000"
	DefaultListenAddress   = "0.0.0.0"
	DefaultAlgorithm       = Maglev
	DefaultMaglevTableSize = 65537
)

// Hash algorithms.
const (
	Maglev   = "maglev"
	RingHash = "ring_hash"
)

// Limits on settings. The table and ring sizes are Envoy's own limits; the
// weight bound keeps Maglev tables balanced.
const (
	MaxMaglevTableSize = 5000011
	MaxRingSize        = 8388608
	MaxEndpointWeight  = 128
	MinBalanceFactor   = 100
)

// Policy is a decoded, validated policy file.
type Policy struct {
	// Filename is the name the policy was parsed under.
	Filename string
	// XDSAddress is where kvxds serves xDS (host:port).
	XDSAddress string
	// AdminAddress is where kvxds serves metrics and health (host:port).
	AdminAddress string
	// Pools are sorted by Name.
	Pools []Pool
}

// Pool is one group of interchangeable replicas behind one Envoy listener.
type Pool struct {
	Name string
	// Port and ListenAddress are where Envoy listens for the pool.
	Port          uint32
	ListenAddress string
	// RouteTimeout bounds a whole request; zero means no timeout.
	RouteTimeout time.Duration
	// IdleTimeout bounds a silent stream; zero keeps Envoy's default.
	IdleTimeout time.Duration
	Hash        Hash
	// Static endpoints in file order: the endpoints list first, then the
	// endpoint blocks.
	Static []StaticEndpoint
}

// Hash is how a pool maps requests to endpoints.
type Hash struct {
	// Algorithm is Maglev or RingHash.
	Algorithm string
	// TableSize is the Maglev table size (prime); zero for ring_hash.
	TableSize uint64
	// MinRingSize and MaxRingSize bound the ring_hash ring; zero keeps
	// the data plane's default.
	MinRingSize, MaxRingSize uint64
	// BalanceFactor is bounded-load hashing in percent of the average
	// load (>= 100); zero turns it off.
	BalanceFactor uint32
	// Keys are tried in order; the first one present in a request wins.
	Keys []HashKey
}

// HashKey is one source of a request's hash key. Exactly one field is set;
// Header is lower-cased.
type HashKey struct {
	Header, Cookie, QueryParameter string
}

// StaticEndpoint is one replica listed in the policy file.
type StaticEndpoint struct {
	// Host is an IP address (without brackets), in canonical form.
	Host string
	Port uint32
	// Weight is the endpoint's share of the hash table, at least 1.
	Weight uint32
	// HashKey is the endpoint's stable identity on the hash ring; empty
	// means host:port.
	HashKey               string
	Region, Zone, SubZone string
}

// Parse decodes and validates a policy. filename is used in diagnostics
// only. The policy is nil if any diagnostic is an error.
func Parse(src []byte, filename string) (*Policy, hcl.Diagnostics) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		// A body that did not parse yields follow-on errors that only
		// confuse; the syntax errors are what needs fixing first.
		return nil, sortDiagnostics(diags)
	}
	d := &decoder{}
	p := d.policy(file.Body)
	diags = sortDiagnostics(append(diags, d.diags...))
	if diags.HasErrors() {
		return nil, diags
	}
	p.Filename = filename
	return p, diags
}

// Load reads and parses the policy file filename.
func Load(filename string) (*Policy, hcl.Diagnostics) {
	src, err := os.ReadFile(filename)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read policy file",
			Detail:   fmt.Sprintf("%v.", err),
		}}
	}
	return Parse(src, filename)
}

// Format renders diagnostics one per line, as
// "file:line:col: summary: detail". Warnings read
// "file:line:col: warning: summary: detail". A diagnostic without a source
// location starts at its summary.
func Format(diags hcl.Diagnostics) string {
	var b strings.Builder
	for _, d := range diags {
		if d.Subject != nil {
			fmt.Fprintf(&b, "%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		if d.Severity == hcl.DiagWarning {
			b.WriteString("warning: ")
		}
		b.WriteString(oneLine(d.Summary))
		if d.Detail != "" {
			b.WriteString(": ")
			b.WriteString(oneLine(d.Detail))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// oneLine keeps Format at one line per diagnostic even for multi-line
// details from HCL itself.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	var parts []string
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, " ")
}
