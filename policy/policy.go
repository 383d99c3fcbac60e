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
//	    algorithm      = "maglev" # or "ring_hash" (min_ring_size, max_ring_size), the default when they are set
//	    table_size     = 65537    # prime
//	    balance_factor = 150      # bounded load, percent; 0 = off
//	    balance_on     = "requests" # or "prompt_bytes": Envoy's Lua filter bounds prompt bytes in flight
//	    keyless        = "round_robin" # requests with no key; or "least_request", "random"
//	    grpc_ring_cap  = 4096     # gRPC clients' ring size cap, if raised on them
//	    key { header = "x-session-id" } # tried in order; first present wins
//	    key { cookie = "session" }
//	    key { json_field = "metadata.conversation_id" } # JSON body (Envoy only)
//	    key { prompt_prefix = 4096 } # first bytes of the prompt (Envoy only)
//	    max_body_bytes = 4194304     # DefaultMaxBodyBytes; body keys and hot keys
//	  }
//	  static {
//	    endpoints = ["127.0.0.1:8001"]
//	    endpoint "127.0.0.1:8002" {
//	      weight   = 3           # 1..128
//	      hash_key = "replica-b" # stable ring identity; default host:port
//	    }
//	  }
//	  metrics {                  # scrape each replica; omit for static weights
//	    engine = "vllm"          # or "sglang", "tgi", "trtllm", "custom"
//	    model  = "meta-llama/Llama-3.1-8B-Instruct" # only this model's series
//	  }
//	  escape  { max_kv_occupancy = 0.95 } # when a replica leaves the hash table
//	  weights { max = 8 }                  # weight multiplier from free capacity
//	}
//
// The metrics, escape and weights blocks (at most one each per pool) make
// endpoint weights follow each replica's own engine metrics. Every setting
// in them but a signal's metric is optional; these are the defaults, by
// constant of package weights, whose Config they decode into:
//
//	metrics {                  # presence turns scraping on; Pool.Metrics nil without
//	  engine      = "vllm"     # weights.DefaultEngine, or custom with signal blocks: vllm (V1 and V0 names), sglang, tgi, trtllm, custom
//	  interval    = "2s"       # weights.DefaultScrapeInterval, or 2 x timeout if timeout is 2s or more; at most stale_after; at least weights.MinScrapeInterval (100ms)
//	  timeout     = "1s"       # weights.DefaultScrapeTimeout, or interval / 2 if shorter; shorter than interval
//	  stale_after = "10s"      # weights.DefaultStaleAfterIntervals (5) x interval; at least interval
//	  path        = "/metrics" # weights.MetricsPath(engine): "/prometheus/metrics" for trtllm, else weights.DefaultMetricsPath; starts with "/"
//	  port        = 8000       # default: the endpoint's serving port (Metrics.Port 0)
//	  scheme      = "http"     # weights.DefaultMetricsScheme; or "https"
//	  model       = "..."      # keep only series with this model_name; default all
//	  signal "kv_occupancy" {  # engine = "custom" only: where each signal comes from
//	    metric = "my_engine_kv_used_ratio" # Prometheus metric name
//	    labels = { device = "gpu" }        # exact label matches; default none
//	    scale  = 1                         # weights.DefaultSignalScale; > 0
//	  }
//	}
//	escape {                        # when a replica is saturated and leaves the hash table
//	  max_queue_depth        = 8    # weights.DefaultMaxQueueDepth, or 2 x resume_queue_depth if that is 8 or more; saturated at or above; > 0
//	  max_kv_occupancy       = 0.9  # weights.DefaultMaxKVOccupancy, or 1 if resume_kv_occupancy is 0.9 or more; in (0, 1]
//	  max_preemption_rate    = 0    # weights.DefaultMaxPreemptionRate; per second, saturated above; >= 0
//	  resume_queue_depth     = 4    # max_queue_depth / 2; > 0, < max_queue_depth
//	  resume_kv_occupancy    = 0.8  # max_kv_occupancy - weights.DefaultResumeKVMargin (0.1), or max_kv_occupancy / 2 if at most 0.1; > 0, < max_kv_occupancy
//	  hold                   = "30s" # weights.DefaultHold; below both resume values this long to recover
//	  sustain                = "0s" # weights.DefaultSustain, weights.DefaultBoundedSustain (30s) with a balance_factor; hot this long to leave
//	  max_saturated_fraction = 0.5  # weights.DefaultMaxSaturatedFraction; in [0, 1]; beyond it, pure affinity
//	}
//	weights {                # the multiplier of each endpoint's static weight
//	  min          = 1       # weights.DefaultMinWeight; >= 1
//	  max          = 4       # weights.DefaultMaxWeight (min with a balance_factor), raised to min, and to min + levels - 1 (at most 128); min..weights.MaxWeightMultiplier (128)
//	  levels       = 4       # min(weights.DefaultLevels, max - min + 1); 1..max - min + 1
//	  smoothing    = 0.3     # weights.DefaultSmoothing; EWMA weight of a new observation, in (0, 1]
//	  hysteresis   = 0.5     # weights.DefaultHysteresis; fraction of a level's width, in [0, 1)
//	  min_interval = "30s"   # weights.DefaultMinChangeInterval; between two changes of one replica; >= 0
//	  relative     = false   # true: follow load against the replicas sharing its hash table, not its own headroom
//	}
//
// Several kvxds instances serve the same decisions with an ha block (at
// most one per file), which either elects one leader that scrapes and
// decides:
//
//	ha {
//	  kubernetes {
//	    namespace      = "kvxds"      # where the Lease and the decisions ConfigMap live
//	    lease          = "kvxds-chat" # the Lease; the ConfigMap is "kvxds-chat-decisions"
//	    kubeconfig     = "..."        # default: in-cluster, then $KUBECONFIG
//	    lease_duration = "15s"        # kubernetes.DefaultLeaseDuration (ha/kubernetes); > renew_deadline
//	    renew_deadline = "10s"        # kubernetes.DefaultRenewDeadline; > 1.2 x retry_period
//	    retry_period   = "2s"         # kubernetes.DefaultRetryPeriod
//	  }
//	}
//
// or follows one instance's published decisions (outside Kubernetes):
//
//	ha { follow = "http://10.0.0.5:19000" } # that instance's admin address
//
// A pool's mesh block (mesh.go, at most one) also serves its endpoints
// under the name of a cluster another control plane defines, for a mesh
// that keeps its control plane (EDS only; kvxds recipe prints the rest):
//
//	mesh {
//	  eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local" # required; no pool's name
//	  istio_mtls       = true # endpoints carry tlsMode = "istio"; default false
//	}
//
// A hash pool's group blocks (group.go) give requests whose header carries
// one of the values a route and cluster of their own, over a stable
// subset of the pool's replicas:
//
//	group "acme" {
//	  match {
//	    header = "x-tenant-id"
//	    values = ["acme"]      # non-empty; a value selects one group
//	  }
//	  replicas  = 3            # required; 1..MaxGroupReplicas healthy replicas
//	  exclusive = false        # true: the pool's other requests avoid them
//	}
//
// The xds and admin blocks also say how their servers treat clients
// (servers.go, tls.go; file paths are relative to the policy file):
//
//	xds {
//	  address                     = "0.0.0.0:18000"
//	  max_streams_per_address     = 1000  # DefaultMaxStreamsPerAddress; 0 = no cap
//	  keepalive_time              = "30s" # DefaultKeepaliveTime; at least 1s
//	  keepalive_timeout           = "10s" # DefaultKeepaliveTimeout; at least 1s
//	  keepalive_min_ping_interval = "5s"  # DefaultKeepaliveMinPingInterval; at least 1s
//	  tls {                               # no tls block: plaintext
//	    cert_file      = "tls/tls.crt"
//	    key_file       = "tls/tls.key"
//	    client_ca_file = "tls/ca.crt"     # optional: clients must present a certificate of this CA
//	  }
//	}
//	admin {
//	  address    = "0.0.0.0:19000"
//	  token_file = "admin-token"  # bearer token for everything but /healthz and /readyz
//	  tls {
//	    cert_file = "tls/tls.crt"
//	    key_file  = "tls/tls.key"
//	  }
//	}
//
// A setting left unset never conflicts with one that is set: where its
// default would, it follows the set one as above, so that only settings
// written in the file can be reported as inconsistent, at the one that
// does not fit. Likewise a hash block with min_ring_size or max_ring_size
// (and no table_size) defaults to ring_hash, a max_ring_size below the
// data planes' own minimum (fleet.DefaultMinRingSize) lowers it, and the xds
// and admin addresses swap defaults when the other server is given one.
//
// The signals of a custom engine are queue_depth, running, kv_occupancy,
// preemptions, prefix_queries, prefix_hits, prefix_hit_rate and ttft (the
// histogram's name, without _bucket); it needs at least one of
// queue_depth, running and kv_occupancy. An escape or weights block
// without a metrics block has no effect, and draws a warning.
//
// Each block has a file of its own holding its Go type, its HCL schema
// (the xxxSpec struct gohcl decodes) and its decoder and checks: pool.go,
// hash.go (bodykeys.go for body keys), static.go, dns.go, kubernetes.go,
// metrics.go, escape.go, weights.go, mesh.go, group.go, ha.go, servers.go
// and tls.go; this file holds the file's top level, and decode.go the
// shared decoder. Where a block configures another package, the policy
// decodes into that package's own type, which also owns the defaults:
// weights.Metrics, weights.Weighting, weights.Escape and weights.Series;
// dns.Config and kubernetes.Config of discovery; the Lease elector's
// Config of ha/kubernetes; and fleet.Settings (a pool's listener,
// timeouts and balancer), fleet.Hash, fleet.HashKey, fleet.Mesh and
// fleet.Group.
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
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Defaults of the policy file.
const (
	DefaultXDSAddress   = "127.0.0.1:18000"
	DefaultAdminAddress = "127.0.0.1:19000"
)

// Policy is a decoded, validated policy file.
type Policy struct {
	// Filename is the name the policy was parsed under.
	Filename string
	// XDSAddress is where kvxds serves xDS (host:port).
	XDSAddress string
	// AdminAddress is where kvxds serves metrics and health (host:port).
	AdminAddress string
	// XDS and Admin are the servers' other settings (servers.go).
	XDS   XDSServer
	Admin AdminServer
	// HA, if set, is how this instance agrees on decisions with others.
	HA *HA
	// Pools are sorted by Name.
	Pools []Pool
}

// fileSpec is the whole policy file.
type fileSpec struct {
	XDS   []serverSpec `hcl:"xds,block"`
	Admin []serverSpec `hcl:"admin,block"`
	HA    []haSpec     `hcl:"ha,block"`
	Pools []poolSpec   `hcl:"pool,block"`
}

func (d *decoder) policy(body hcl.Body) *Policy {
	var spec fileSpec
	// A nil EvalContext: a policy file is data, so variables and function
	// calls are rejected when the values are evaluated.
	d.add(gohcl.DecodeBody(body, nil, &spec))

	p := &Policy{XDSAddress: DefaultXDSAddress, AdminAddress: DefaultAdminAddress}
	d.poolNames = map[string]hcl.Range{}
	xds := &server{addr: &p.XDSAddress, hp: mustHostPort(DefaultXDSAddress)}
	admin := &server{addr: &p.AdminAddress, hp: mustHostPort(DefaultAdminAddress)}
	for i := range spec.XDS {
		d.server(&spec.XDS[i], xds)
	}
	atMostOne(d, spec.XDS, "an", "xds", "", keepOne)
	for i := range spec.Admin {
		d.server(&spec.Admin[i], admin)
	}
	atMostOne(d, spec.Admin, "an", "admin", "", keepOne)
	p.XDS, p.Admin = d.xdsServer(spec.XDS), d.adminServer(spec.Admin)
	p.HA = d.ha(spec.HA)
	d.prefillNames = prefillNames(spec.Pools)
	for i := range spec.Pools {
		p.Pools = append(p.Pools, d.pool(&spec.Pools[i]))
	}
	d.checkServerClash(xds, admin)
	d.checkMeshNames()
	d.checkPrefills(p.Pools)
	slices.SortFunc(p.Pools, func(a, b Pool) int { return cmp.Compare(a.Name, b.Name) })
	return p
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
	d := &decoder{dir: filepath.Dir(filename)}
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
