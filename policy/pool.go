package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/discovery/dns"
	dk "github.com/kvxds/kvxds/discovery/kubernetes"
	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/weights"
)

// Pool is one group of interchangeable replicas behind one Envoy listener.
type Pool struct {
	Name string
	// Settings are where Envoy listens for the pool (ListenAddress
	// defaults to fleet.DefaultListenAddress), its timeouts (a zero
	// RouteTimeout means none, a zero IdleTimeout keeps Envoy's default),
	// its Balancer (fleet.ConsistentHash on Hash, or a baseline that
	// ignores Hash), its Mesh (mesh.go; nil for none) and its tenant
	// Groups (group.go, in file order; hash pools only): decoded straight
	// into the model's own type, which the join copies.
	fleet.Settings
	// Static endpoints in file order: the endpoints list first, then the
	// endpoint blocks.
	Static []fleet.Endpoint
	// DNS and Kubernetes are the pool's other sources of replicas, in file
	// order; their replicas join the static ones.
	DNS        []dns.Config
	Kubernetes []dk.Config
	// Metrics is how replicas are scraped; nil means no scraping and
	// static weights only.
	Metrics *weights.Metrics
	// Escape and Weights are always filled in, with defaults where the
	// file says nothing; they only take effect with Metrics.
	Escape  weights.Escape
	Weights weights.Weighting
}

// MaxMultiplier is the largest factor a replica's own weight can be
// multiplied by: weights.max where metrics are scraped, else 1. Ring
// sizes and tenant groups' member weights are planned for it.
func (p *Pool) MaxMultiplier() uint32 {
	if p.Metrics == nil {
		return 1
	}
	return max(p.Weights.MaxWeight, 1)
}

// poolSpec is a pool block. port is required, but checked by hand so that
// the diagnostic names the pool rather than pointing at its closing brace.
type poolSpec struct {
	Name          string           `hcl:"name,label"`
	NameRange     hcl.Range        `hcl:"name,label_range"`
	DefRange      hcl.Range        `hcl:",def_range"`
	Port          *hcl.Attribute   `hcl:"port,optional"`
	ListenAddress *hcl.Attribute   `hcl:"listen_address,optional"`
	RouteTimeout  *hcl.Attribute   `hcl:"route_timeout,optional"`
	IdleTimeout   *hcl.Attribute   `hcl:"idle_timeout,optional"`
	LoadBalancing *hcl.Attribute   `hcl:"load_balancing,optional"`
	Hash          []hashSpec       `hcl:"hash,block"`
	Static        []staticSpec     `hcl:"static,block"`
	DNS           []dnsSpec        `hcl:"dns,block"`
	Kubernetes    []kubernetesSpec `hcl:"kubernetes,block"`
	Metrics       []metricsSpec    `hcl:"metrics,block"`
	Escape        []escapeSpec     `hcl:"escape,block"`
	Weights       []weightsSpec    `hcl:"weights,block"`
	Mesh          []meshSpec       `hcl:"mesh,block"`
	Groups        []groupSpec      `hcl:"group,block"`
	Adapters      []adaptersSpec   `hcl:"adapters,block"`
	Prefill       []prefillSpec    `hcl:"prefill,block"`
}

func (d *decoder) pool(spec *poolSpec) Pool {
	name := spec.Name
	d.checkPoolName(name, spec.NameRange)
	if prev, dup := d.poolNames[name]; dup {
		d.errorf(spec.NameRange, "Duplicate pool name",
			"A pool named %q is already defined at line %d; pool names must be unique.", name, prev.Start.Line)
	} else {
		d.poolNames[name] = spec.NameRange
	}

	pool := Pool{Name: name, Settings: fleet.Settings{ListenAddress: fleet.DefaultListenAddress}}
	listenAddr := netip.IPv4Unspecified()
	listenOK := true

	if a := spec.Port; a == nil {
		d.errorf(spec.DefRange, "Missing port",
			"Pool %q needs a port: the port of its Envoy listener, as in port = 10000.", name)
	} else if n, good := d.uintIn(a.Name, a.Expr, 1, 65535, "Invalid port"); good {
		pool.Port = uint32(n)
	}
	if a := spec.ListenAddress; a != nil {
		if s, good := d.str(a.Name, a.Expr); !good {
			listenOK = false
		} else if ip, err := parseListenAddress(s); err != nil {
			d.errorf(a.Expr.Range(), "Invalid listen address", "%s.", err)
			listenOK = false
		} else {
			listenAddr, pool.ListenAddress = ip, ip.String()
		}
	}
	if pool.Port != 0 && listenOK {
		d.checkListener(listener{pool: name, addr: listenAddr, port: pool.Port, rng: spec.Port.Expr.Range()})
	}
	if a := spec.RouteTimeout; a != nil {
		pool.RouteTimeout = d.duration(a, true)
	}
	if a := spec.IdleTimeout; a != nil {
		pool.IdleTimeout = d.duration(a, false)
	}

	pool.Balancer = fleet.DefaultBalancer
	if a := spec.LoadBalancing; a != nil {
		if b, good := enum(d, a, nil, "Unknown load balancing", func(s string) string {
			return fmt.Sprintf("%q is not a load-balancing mode; use %q (consistent hashing for cache locality, the default), or %q or %q, which ignore the hash block and exist to measure what affinity gains.",
				s, fleet.ConsistentHash, fleet.RoundRobin, fleet.LeastRequest)
		}, fleet.ConsistentHash, fleet.RoundRobin, fleet.LeastRequest); good {
			pool.Balancer = b
		}
	}

	// Duplicate blocks are still decoded so that their own problems show
	// too; the first one counts.
	owner := fmt.Sprintf("Pool %q", name)
	loose := false
	for i := range spec.Hash {
		if h, l := d.hash(&spec.Hash[i], len(spec.Adapters) > 0, d.prefillNames[name]); i == 0 {
			pool.Hash, loose = h, l
		}
	}
	atMostOne(d, spec.Hash, "a", "hash", owner, keepOne)
	for i := range spec.Static {
		if eps := d.static(&spec.Static[i]); i == 0 {
			pool.Static = eps
		}
	}
	atMostOne(d, spec.Static, "a", "static", owner, "list all its endpoints in that one.")
	for i := range spec.DNS {
		pool.DNS = append(pool.DNS, d.dns(&spec.DNS[i]))
	}
	for i := range spec.Kubernetes {
		pool.Kubernetes = append(pool.Kubernetes, d.kubernetes(&spec.Kubernetes[i]))
	}
	if len(spec.Hash) > 0 && pool.Balancer != fleet.ConsistentHash {
		d.add(hcl.Diagnostics{{
			Severity: hcl.DiagWarning,
			Summary:  "Hash block ignored",
			Detail:   fmt.Sprintf("Pool %q balances with %s, which does not hash; its hash block has no effect.", name, pool.Balancer),
			Subject:  spec.Hash[0].DefRange.Ptr(),
		}})
	}
	if pool.Balancer != fleet.ConsistentHash {
		// Hot keys spread hashed keys; a pool that does not hash has none.
		pool.Hash.Hot = nil
	}
	if len(spec.Hash) == 0 && pool.Balancer == fleet.ConsistentHash {
		d.errorf(spec.DefRange, "Missing hash block",
			`Pool %q needs a hash block saying how requests map to replicas, as in hash { key { header = "x-session-id" } }.`, name)
	}

	for i := range spec.Metrics {
		if m := d.metrics(&spec.Metrics[i]); i == 0 {
			pool.Metrics = m
		}
	}
	atMostOne(d, spec.Metrics, "a", "metrics", owner, keepOne)
	// Where Envoy's bounded load acts per request, the escape hatch and
	// the weights default to moving keys less (weights.DefaultEscapeFor).
	// A prefill pool's loose default bound takes the bounded escape
	// defaults but keeps moving weights: gRPC clients, which hash its
	// ring without a bound, balance it by them.
	bounded := pool.Balancer == fleet.ConsistentHash && pool.Hash.BalanceFactor != 0
	pool.Escape = weights.DefaultEscapeFor(bounded)
	for i := range spec.Escape {
		if e := d.escape(&spec.Escape[i], bounded); i == 0 {
			pool.Escape = e
		}
	}
	atMostOne(d, spec.Escape, "an", "escape", owner, keepOne)
	bounded = bounded && !loose
	pool.Weights = weights.DefaultWeightingFor(bounded)
	for i := range spec.Weights {
		if w := d.weights(&spec.Weights[i], bounded); i == 0 {
			pool.Weights = w
		}
	}
	atMostOne(d, spec.Weights, "a", "weights", owner, keepOne)
	// Escape and weights act on scraped signals; without a metrics block
	// they are valid but inert, which is worth saying.
	noEffect := func(typ string, rng hcl.Range) {
		d.warnf(rng, fmt.Sprintf("%s block has no effect", strings.ToUpper(typ[:1])+typ[1:]),
			"Pool %q has no metrics block, so kvxds never sees its replicas' load and the %s block changes nothing; add metrics {} to scrape them (vLLM by default), or remove the %s block.",
			name, typ, typ)
	}
	if len(spec.Metrics) == 0 && len(spec.Escape) > 0 {
		noEffect("escape", spec.Escape[0].DefRange)
	}
	if len(spec.Metrics) == 0 && len(spec.Weights) > 0 {
		noEffect("weights", spec.Weights[0].DefRange)
	}
	d.poolMesh(spec, &pool)
	d.poolGroups(spec, &pool)
	d.poolAdapters(spec, &pool)
	d.poolPrefill(spec, &pool)
	if len(spec.Hash) > 0 && spec.Hash[0].PerWeight != nil {
		d.ringPerWeight(spec.Hash[0].PerWeight, &pool)
	}
	return pool
}

// ringPerWeight checks a ring sized by entries per unit of healthy weight
// against what the pool's ring must hold: Envoy caps rings at MaxRingSize
// entries, beyond which every unit gets fewer and changes move other
// replicas' sessions again; and a mesh's cluster, which another control
// plane holds, cannot follow the size.
func (d *decoder) ringPerWeight(a *hcl.Attribute, pool *Pool) {
	k := pool.Hash.EntriesPerWeight
	if k == 0 {
		return
	}
	if pool.Mesh != nil {
		d.errorf(a.NameRange, "Ring size cannot follow the mesh",
			"entries_per_weight sizes Envoy's ring to the pool's healthy weight, which changes with every replica, but the mesh's cluster %q is configured once by the mesh; remove entries_per_weight (or the mesh block).",
			pool.Mesh.ClusterName)
		return
	}
	var w uint64
	for _, e := range pool.Static {
		w += uint64(max(e.Weight, 1))
	}
	mult := uint64(pool.MaxMultiplier())
	if w*mult*k > fleet.MaxRingSize {
		at := ""
		if mult > 1 {
			at = fmt.Sprintf(" at weights.max %d", mult)
		}
		d.errorf(a.Expr.Range(), "Ring too small",
			"entries_per_weight %d needs %d ring entries for the static endpoints' weight %d%s, above Envoy's maximum ring size %d; use at most %d entries per unit.",
			k, w*mult*k, w, at, uint64(fleet.MaxRingSize), uint64(fleet.MaxRingSize)/(w*mult))
	}
}

func (d *decoder) checkPoolName(name string, rng hcl.Range) {
	if name == "" {
		d.errorf(rng, "Invalid pool name",
			`Pool names must not be empty; name the pool as clients address it, as in pool "chat".`)
		return
	}
	for i, c := range name {
		if isAlnum(c) || i > 0 && (c == '.' || c == '_' || c == '-') {
			continue
		}
		what := fmt.Sprintf("%q is not allowed", c)
		if i == 0 {
			what = "it must start with a letter or digit"
		}
		d.errorf(rng, "Invalid pool name",
			"Pool name %q is invalid: %s. Use letters, digits, '.', '_' and '-', starting with a letter or digit.", name, what)
		return
	}
}

// listener is a pool's Envoy listener, for the port-clash check.
type listener struct {
	pool string
	addr netip.Addr
	port uint32
	rng  hcl.Range // the port expression
}

// checkListener rejects two pools whose Envoy listeners would bind the
// same socket. A wildcard address overlaps every address on its port.
func (d *decoder) checkListener(l listener) {
	for _, o := range d.listeners {
		if o.port != l.port || o.addr != l.addr && !o.addr.IsUnspecified() && !l.addr.IsUnspecified() {
			continue
		}
		d.errorf(l.rng, "Duplicate port",
			"Port %d on %s is already used by pool %q on %s (line %d); give each pool its own port.",
			l.port, l.addr, o.pool, o.addr, o.rng.Start.Line)
		return
	}
	d.listeners = append(d.listeners, l)
}
