package policy

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/fleet"
)

// The policy file's structure, decoded by gohcl. Every attribute is an
// *hcl.Attribute rather than a typed Go value: nil tells "unset" apart
// from zero, the attribute carries the exact ranges of its name and value,
// and the values are evaluated afterwards by decoder.value and friends,
// whose diagnostics name the attribute and say how to fix it. (gohcl's own
// conversion reports "Unsuitable value type" without the attribute's name,
// adds a second error after "Variables not allowed", and reads null as
// unset.) Blocks that may appear once are still slices, so that a duplicate
// is reported with the line of the first and its contents are checked too.

// fileSpec is the whole policy file.
type fileSpec struct {
	XDS   []serverSpec `hcl:"xds,block"`
	Admin []serverSpec `hcl:"admin,block"`
	HA    []haSpec     `hcl:"ha,block"`
	Pools []poolSpec   `hcl:"pool,block"`
}

// serverSpec is an xds or admin block; the rest of it is decoded by
// xdsServer and adminServer (servers.go).
type serverSpec struct {
	DefRange hcl.Range      `hcl:",def_range"`
	Address  *hcl.Attribute `hcl:"address,optional"`
	Rest     hcl.Body       `hcl:",remain"`
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
}

type hashSpec struct {
	DefRange      hcl.Range      `hcl:",def_range"`
	Algorithm     *hcl.Attribute `hcl:"algorithm,optional"`
	TableSize     *hcl.Attribute `hcl:"table_size,optional"`
	MinRingSize   *hcl.Attribute `hcl:"min_ring_size,optional"`
	MaxRingSize   *hcl.Attribute `hcl:"max_ring_size,optional"`
	BalanceFactor *hcl.Attribute `hcl:"balance_factor,optional"`
	Keyless       *hcl.Attribute `hcl:"keyless,optional"`
	GRPCRingCap   *hcl.Attribute `hcl:"grpc_ring_cap,optional"`
	MaxBodyBytes  *hcl.Attribute `hcl:"max_body_bytes,optional"`
	Keys          []keySpec      `hcl:"key,block"`
}

// keySpec is a key block; exactly one source must be set, which is
// checked by hand to explain how to split a key with several.
type keySpec struct {
	DefRange       hcl.Range      `hcl:",def_range"`
	Header         *hcl.Attribute `hcl:"header,optional"`
	Cookie         *hcl.Attribute `hcl:"cookie,optional"`
	QueryParameter *hcl.Attribute `hcl:"query_parameter,optional"`
	JSONField      *hcl.Attribute `hcl:"json_field,optional"`
	PromptPrefix   *hcl.Attribute `hcl:"prompt_prefix,optional"`
}

type staticSpec struct {
	DefRange  hcl.Range      `hcl:",def_range"`
	Endpoints *hcl.Attribute `hcl:"endpoints,optional"`
	Endpoint  []endpointSpec `hcl:"endpoint,block"`
}

type endpointSpec struct {
	Address      string         `hcl:"address,label"`
	AddressRange hcl.Range      `hcl:"address,label_range"`
	Weight       *hcl.Attribute `hcl:"weight,optional"`
	HashKey      *hcl.Attribute `hcl:"hash_key,optional"`
	Region       *hcl.Attribute `hcl:"region,optional"`
	Zone         *hcl.Attribute `hcl:"zone,optional"`
	SubZone      *hcl.Attribute `hcl:"sub_zone,optional"`
}

// metricsSpec is a metrics block; its presence turns scraping on.
type metricsSpec struct {
	DefRange   hcl.Range      `hcl:",def_range"`
	Engine     *hcl.Attribute `hcl:"engine,optional"`
	Interval   *hcl.Attribute `hcl:"interval,optional"`
	Timeout    *hcl.Attribute `hcl:"timeout,optional"`
	StaleAfter *hcl.Attribute `hcl:"stale_after,optional"`
	Path       *hcl.Attribute `hcl:"path,optional"`
	Port       *hcl.Attribute `hcl:"port,optional"`
	Scheme     *hcl.Attribute `hcl:"scheme,optional"`
	Model      *hcl.Attribute `hcl:"model,optional"`
	Signals    []signalSpec   `hcl:"signal,block"`
}

// signalSpec is a signal block of a custom engine. metric is required,
// but checked by hand so that the diagnostic names the signal.
type signalSpec struct {
	Name      string         `hcl:"name,label"`
	NameRange hcl.Range      `hcl:"name,label_range"`
	DefRange  hcl.Range      `hcl:",def_range"`
	Metric    *hcl.Attribute `hcl:"metric,optional"`
	Labels    *hcl.Attribute `hcl:"labels,optional"`
	Scale     *hcl.Attribute `hcl:"scale,optional"`
}

type escapeSpec struct {
	DefRange             hcl.Range      `hcl:",def_range"`
	MaxQueueDepth        *hcl.Attribute `hcl:"max_queue_depth,optional"`
	MaxKVOccupancy       *hcl.Attribute `hcl:"max_kv_occupancy,optional"`
	MaxPreemptionRate    *hcl.Attribute `hcl:"max_preemption_rate,optional"`
	ResumeQueueDepth     *hcl.Attribute `hcl:"resume_queue_depth,optional"`
	ResumeKVOccupancy    *hcl.Attribute `hcl:"resume_kv_occupancy,optional"`
	Hold                 *hcl.Attribute `hcl:"hold,optional"`
	MaxSaturatedFraction *hcl.Attribute `hcl:"max_saturated_fraction,optional"`
}

type weightsSpec struct {
	DefRange    hcl.Range      `hcl:",def_range"`
	Min         *hcl.Attribute `hcl:"min,optional"`
	Max         *hcl.Attribute `hcl:"max,optional"`
	Levels      *hcl.Attribute `hcl:"levels,optional"`
	Smoothing   *hcl.Attribute `hcl:"smoothing,optional"`
	Hysteresis  *hcl.Attribute `hcl:"hysteresis,optional"`
	MinInterval *hcl.Attribute `hcl:"min_interval,optional"`
	Relative    *hcl.Attribute `hcl:"relative,optional"`
}

// decoder turns a parsed body into a Policy, collecting every diagnostic
// on the way instead of stopping at the first: a user fixing a policy
// should see all of its problems in one run. gohcl decodes the structure
// (reporting unknown attributes and blocks, and wrong labels); the checks
// of values and of how they fit together run on the decoded specs. Every
// error lands in diags, and any error discards the Policy, so the checks
// only track validity where a later check depends on it.
type decoder struct {
	diags hcl.Diagnostics
	dir   string // the policy file's directory, for relative paths

	poolNames map[string]hcl.Range // pool name -> label of its first definition
	meshNames map[string]meshName  // mesh cluster name -> its pool (mesh.go)
	listeners []listener
}

// listener is a pool's Envoy listener, for the port-clash check.
type listener struct {
	pool string
	addr netip.Addr
	port uint32
	rng  hcl.Range // the port expression
}

func (d *decoder) add(diags hcl.Diagnostics) {
	d.diags = append(d.diags, diags...)
}

func (d *decoder) errorf(subject hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  subject.Ptr(),
	})
}

// warnf reports something that is valid but likely not what the user
// meant; warnings do not discard the Policy.
func (d *decoder) warnf(subject hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  subject.Ptr(),
	})
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
		d.server("xds", &spec.XDS[i], xds)
	}
	for i := range spec.Admin {
		d.server("admin", &spec.Admin[i], admin)
	}
	p.XDS, p.Admin = d.xdsServer(spec.XDS), d.adminServer(spec.Admin)
	p.HA = d.ha(spec.HA)
	for i := range spec.Pools {
		p.Pools = append(p.Pools, d.pool(&spec.Pools[i]))
	}
	d.checkServerClash(xds, admin)
	d.checkMeshNames()
	slices.SortFunc(p.Pools, func(a, b Pool) int { return cmp.Compare(a.Name, b.Name) })
	return p
}

// server is the xds or the admin server's address as decoded so far.
type server struct {
	addr  *string        // where the address goes in the Policy
	hp    hostPort       // parsed *addr
	block *serverSpec    // the first block, if any
	attr  *hcl.Attribute // the address attribute, if set
	bad   bool           // the address did not decode
}

func mustHostPort(s string) hostPort {
	hp, err := parseHostPort(s, true)
	if err != nil {
		panic(fmt.Sprintf("policy: bad built-in address %q: %v", s, err))
	}
	return hp
}

// server decodes an xds or admin block (of type typ) into srv.
func (d *decoder) server(typ string, blk *serverSpec, srv *server) {
	dup := srv.block != nil
	if dup {
		d.errorf(blk.DefRange, fmt.Sprintf("Duplicate %s block", typ),
			"An %s block is already defined at line %d; keep a single one.", typ, srv.block.DefRange.Start.Line)
	} else {
		srv.block = blk
	}
	// A duplicate is still checked so that its own problems show too.
	a := blk.Address
	if a == nil {
		return
	}
	s, ok := d.str(a.Name, a.Expr)
	if !ok {
		srv.bad = srv.bad || !dup
		return
	}
	hp, err := parseHostPort(s, true)
	if err != nil {
		ae := err.(*addrError)
		d.errorf(a.Expr.Range(), ae.summary, "%s", ae.detail)
		srv.bad = srv.bad || !dup
		return
	}
	if !dup {
		*srv.addr, srv.hp, srv.attr = s, hp, a
	}
}

// checkServerClash keeps the xds and admin servers on different sockets.
// An address left unset whose default the other server was given takes
// the other's default instead (the two swap), so that only addresses
// written in the file can clash.
func (d *decoder) checkServerClash(xds, admin *server) {
	if xds.bad || admin.bad || !xds.hp.overlaps(admin.hp) {
		return
	}
	switch {
	case xds.attr == nil:
		*xds.addr, xds.hp = DefaultAdminAddress, mustHostPort(DefaultAdminAddress)
		return
	case admin.attr == nil:
		*admin.addr, admin.hp = DefaultXDSAddress, mustHostPort(DefaultXDSAddress)
		return
	}
	// Point at whichever of the two the user wrote last.
	at := admin.attr
	if xds.attr.Range.Start.Byte > at.Range.Start.Byte {
		at = xds.attr
	}
	if xds.hp == admin.hp {
		d.errorf(at.Expr.Range(), "Address conflict",
			"The xds address %s and the admin address %s are the same; give each server its own port.", *xds.addr, *admin.addr)
		return
	}
	everywhere := *xds.addr
	if !xds.hp.everywhere() {
		everywhere = *admin.addr
	}
	d.errorf(at.Expr.Range(), "Address conflict",
		"The xds address %s and the admin address %s overlap, as %s listens on every interface; give each server its own port.", *xds.addr, *admin.addr, everywhere)
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

	pool := Pool{Name: name, ListenAddress: fleet.DefaultListenAddress}
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

	pool.LoadBalancing = LoadBalancingHash
	if a := spec.LoadBalancing; a != nil {
		if s, good := d.str(a.Name, a.Expr); good {
			switch b := fleet.Balancer(s); b {
			case LoadBalancingHash, LoadBalancingRoundRobin, LoadBalancingLeastRequest:
				pool.LoadBalancing = b
			default:
				d.errorf(a.Expr.Range(), "Unknown load balancing",
					"%q is not a load-balancing mode; use %q (consistent hashing for cache locality, the default), or %q or %q, which ignore the hash block and exist to measure what affinity gains.",
					s, LoadBalancingHash, LoadBalancingRoundRobin, LoadBalancingLeastRequest)
			}
		}
	}

	// A duplicate block is still checked so that its own problems show too.
	for i := range spec.Hash {
		h := d.hash(&spec.Hash[i])
		if i == 0 {
			pool.Hash = h
			continue
		}
		d.errorf(spec.Hash[i].DefRange, "Duplicate hash block",
			"Pool %q already has a hash block at line %d; keep a single one.", name, spec.Hash[0].DefRange.Start.Line)
	}
	for i := range spec.Static {
		eps := d.static(&spec.Static[i])
		if i == 0 {
			pool.Static = eps
			continue
		}
		d.errorf(spec.Static[i].DefRange, "Duplicate static block",
			"Pool %q already has a static block at line %d; list all its endpoints in that one.", name, spec.Static[0].DefRange.Start.Line)
	}
	for i := range spec.DNS {
		pool.DNS = append(pool.DNS, d.dns(&spec.DNS[i]))
	}
	for i := range spec.Kubernetes {
		pool.Kubernetes = append(pool.Kubernetes, d.kubernetes(&spec.Kubernetes[i]))
	}
	if len(spec.Hash) > 0 && pool.LoadBalancing != LoadBalancingHash {
		d.add(hcl.Diagnostics{{
			Severity: hcl.DiagWarning,
			Summary:  "Hash block ignored",
			Detail:   fmt.Sprintf("Pool %q balances with %s, which does not hash; its hash block has no effect.", name, pool.LoadBalancing),
			Subject:  spec.Hash[0].DefRange.Ptr(),
		}})
	}
	if len(spec.Hash) == 0 && pool.LoadBalancing == LoadBalancingHash {
		d.errorf(spec.DefRange, "Missing hash block",
			`Pool %q needs a hash block saying how requests map to replicas, as in hash { key { header = "x-session-id" } }.`, name)
	}

	for i := range spec.Metrics {
		m := d.metrics(&spec.Metrics[i])
		if i == 0 {
			pool.Metrics = m
			continue
		}
		d.errorf(spec.Metrics[i].DefRange, "Duplicate metrics block",
			"Pool %q already has a metrics block at line %d; keep a single one.", name, spec.Metrics[0].DefRange.Start.Line)
	}
	pool.Escape = weights.DefaultEscape()
	for i := range spec.Escape {
		e := d.escape(&spec.Escape[i])
		if i == 0 {
			pool.Escape = e
			continue
		}
		d.errorf(spec.Escape[i].DefRange, "Duplicate escape block",
			"Pool %q already has an escape block at line %d; keep a single one.", name, spec.Escape[0].DefRange.Start.Line)
	}
	pool.Weights = weights.DefaultWeighting()
	for i := range spec.Weights {
		w := d.weights(&spec.Weights[i])
		if i == 0 {
			pool.Weights = w
			continue
		}
		d.errorf(spec.Weights[i].DefRange, "Duplicate weights block",
			"Pool %q already has a weights block at line %d; keep a single one.", name, spec.Weights[0].DefRange.Start.Line)
	}
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
	return pool
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

func (d *decoder) hash(spec *hashSpec) Hash {
	h := Hash{Algorithm: DefaultAlgorithm}

	known := true // whether h.Algorithm is what the user asked for
	if a := spec.Algorithm; a != nil {
		switch s, good := d.str(a.Name, a.Expr); {
		case !good: // already reported
			known = false
		case fleet.Algorithm(s) == Maglev || fleet.Algorithm(s) == RingHash:
			h.Algorithm = fleet.Algorithm(s)
		default:
			d.errorf(a.Expr.Range(), "Unknown hash algorithm",
				"%q is not a hash algorithm; use %q or %q.", s, Maglev, RingHash)
			known = false
		}
	} else if spec.TableSize == nil && (spec.MinRingSize != nil || spec.MaxRingSize != nil) {
		// Ring sizes only apply to a ring.
		h.Algorithm = RingHash
	}

	if a := spec.TableSize; a != nil {
		if known && h.Algorithm == RingHash {
			d.errorf(a.NameRange, "Not a ring_hash setting",
				`table_size sizes a Maglev table; remove it, or set algorithm = %q. A ring_hash ring is sized by min_ring_size and max_ring_size.`, Maglev)
		} else if n, good := d.tableSize(a); good {
			h.TableSize = n
		}
	} else if h.Algorithm == Maglev {
		h.TableSize = fleet.DefaultMaglevTableSize
	}

	// ringSize returns a valid ring size setting, or nil.
	ringSize := func(a *hcl.Attribute) (uint64, *hcl.Attribute) {
		if a == nil {
			return 0, nil
		}
		switch {
		case known && h.Algorithm == Maglev && spec.Algorithm == nil: // chosen by table_size
			d.errorf(a.NameRange, "Not a maglev setting",
				`%s sizes a ring_hash ring, but table_size (line %d) sizes a Maglev table: remove %s for Maglev, or table_size for ring_hash.`,
				a.Name, spec.TableSize.Range.Start.Line, a.Name)
			return 0, nil
		case known && h.Algorithm == Maglev:
			d.errorf(a.NameRange, "Not a maglev setting",
				`%s sizes a ring_hash ring; remove it, or set algorithm = %q. A Maglev table is sized by table_size.`, a.Name, RingHash)
			return 0, nil
		}
		n, good := d.uintIn(a.Name, a.Expr, 1, MaxRingSize, "Invalid ring size")
		if !good {
			return 0, nil
		}
		return n, a
	}
	minN, minA := ringSize(spec.MinRingSize)
	maxN, maxA := ringSize(spec.MaxRingSize)
	if minA != nil && maxA != nil && minN > maxN {
		d.errorf(maxA.Expr.Range(), "Invalid ring size",
			"max_ring_size %d is smaller than min_ring_size %d (line %d); raise max_ring_size or lower min_ring_size.",
			maxN, minN, minA.Range.Start.Line)
	}
	h.MinRingSize, h.MaxRingSize = minN, maxN
	if spec.MinRingSize == nil && maxA != nil && maxN < DataPlaneMinRingSize {
		// The data planes' own minimum would exceed the maximum, and they
		// reject that.
		h.MinRingSize = maxN
	}

	if a := spec.BalanceFactor; a != nil {
		n, good := d.integer(a.Name, a.Expr)
		switch {
		case !good: // already reported
		case n.Sign() < 0 || n.Sign() > 0 && n.Cmp(big.NewInt(MinBalanceFactor)) < 0:
			d.errorf(a.Expr.Range(), "Invalid balance factor",
				"balance_factor must be 0 (off) or at least 100 (percent of average load), not %s; 150 lets a replica take 1.5 times the average load before keys spill over.", n)
		case !n.IsUint64() || n.Uint64() > math.MaxUint32:
			d.errorf(a.Expr.Range(), "Invalid balance factor",
				"balance_factor %s is too large; the maximum is %d.", n, uint64(math.MaxUint32))
		default:
			h.BalanceFactor = uint32(n.Uint64())
		}
	}

	if a := spec.GRPCRingCap; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, MinGRPCRingCap, MaxRingSize, "Invalid gRPC ring cap"); good {
			h.GRPCRingCap = n
		}
	}

	h.Keyless = DefaultKeyless
	if a := spec.Keyless; a != nil {
		if s, good := d.str(a.Name, a.Expr); good {
			switch b := fleet.Balancer(s); b {
			case KeylessRoundRobin, KeylessLeastRequest, KeylessRandom:
				h.Keyless = b
			default:
				d.errorf(a.Expr.Range(), "Unknown keyless balancing",
					"%q is not a way to spread requests that carry no hash key; use %q (the default), %q, or %q to hash them on a random value like a data plane without a fallback.",
					s, KeylessRoundRobin, KeylessLeastRequest, KeylessRandom)
			}
		}
	}

	h.Keys = d.keys(spec)
	d.bodyKeys(spec, &h)
	return h
}

// tableSize decodes a Maglev table size: a prime no larger than Envoy's
// maximum. Maglev's permutation needs a prime table to fill it evenly.
func (d *decoder) tableSize(a *hcl.Attribute) (uint64, bool) {
	n, ok := d.integer(a.Name, a.Expr)
	if !ok {
		return 0, false
	}
	if n.Sign() < 0 || !n.IsUint64() || n.Uint64() > fleet.MaxMaglevTableSize {
		d.errorf(a.Expr.Range(), "Invalid table size",
			"table_size %s is out of range; use a prime from 2 to %d (the default is %d).", n, fleet.MaxMaglevTableSize, fleet.DefaultMaglevTableSize)
		return 0, false
	}
	v := n.Uint64()
	if isPrime(v) {
		return v, true
	}
	near := fmt.Sprintf("the nearest prime is %d", nextPrime(v))
	if v > 2 {
		near = fmt.Sprintf("the nearest primes are %d and %d", prevPrime(v), nextPrime(v))
	}
	d.errorf(a.Expr.Range(), "Table size not prime", "table_size %d is not prime; %s.", v, near)
	return 0, false
}

// keys decodes the key chain of a hash block.
func (d *decoder) keys(hash *hashSpec) []HashKey {
	if len(hash.Keys) == 0 {
		d.errorf(hash.DefRange, "Missing hash key",
			`The hash block has no key; add one, as in key { header = "x-session-id" }. Keys are tried in order and the first one present in a request wins.`)
		return nil
	}
	var keys []HashKey
	seen := map[HashKey]hcl.Range{}
	for _, kb := range hash.Keys {
		set := attributesInOrder(kb.Header, kb.Cookie, kb.QueryParameter, kb.JSONField, kb.PromptPrefix)
		if len(set) == 0 {
			d.errorf(kb.DefRange, "Empty hash key",
				`A key block needs exactly one of header, cookie, query_parameter, json_field or prompt_prefix, as in key { header = "x-session-id" }.`)
			continue
		}
		for _, a := range set[1:] {
			d.errorf(a.NameRange, "Conflicting hash key sources",
				"This key already takes its value from %s (line %d); a key has exactly one source. Move %s into a key block of its own: keys are tried in order.",
				set[0].Name, set[0].Range.Start.Line, a.Name)
		}
		a := set[0]
		if a == kb.PromptPrefix {
			if k, good := d.promptPrefix(a); good && d.uniqueKey(seen, k, a, fmt.Sprint(k.PromptPrefix)) && len(set) == 1 {
				keys = append(keys, k)
			}
			continue
		}
		s, good := d.str(a.Name, a.Expr)
		if !good {
			continue
		}
		var k HashKey
		var err error
		switch a {
		case kb.Header:
			s = strings.ToLower(s)
			if k.Header, err = checkHeaderName(s); err == nil {
				err = checkNotGenerated(s)
			}
		case kb.JSONField:
			k.JSONField, err = checkJSONField(s)
		case kb.Cookie:
			k.Cookie, err = checkCookieName(s)
		case kb.QueryParameter:
			k.QueryParameter, err = checkQueryParameter(s)
		}
		if err != nil {
			d.errorf(a.Expr.Range(), "Invalid hash key", "%s.", err)
			continue
		}
		if !d.uniqueKey(seen, k, a, strconv.Quote(s)) {
			continue
		}
		if len(set) == 1 {
			keys = append(keys, k)
		}
	}
	return keys
}

// tchars are the characters of an HTTP token (RFC 9110), which header
// and cookie names are.
const tchars = "!#$%&'*+-.^_`|~"

func firstNonToken(s string) (rune, bool) {
	for _, c := range s {
		if !isAlnum(c) && !strings.ContainsRune(tchars, c) {
			return c, true
		}
	}
	return 0, false
}

func checkHeaderName(s string) (string, error) {
	switch {
	case s == "":
		return "", fmt.Errorf(`header must not be empty; name the request header that carries the session, as in "x-session-id"`)
	case s[0] == ':':
		return "", fmt.Errorf(`%q is an HTTP/2 pseudo-header, which cannot be a hash key; hash on a regular request header such as "x-session-id"`, s)
	}
	if c, bad := firstNonToken(s); bad {
		return "", fmt.Errorf("%q is not a valid HTTP header name: %q is not allowed; use letters, digits and %s", s, c, tchars)
	}
	return s, nil
}

func checkCookieName(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf(`cookie must not be empty; name the cookie that carries the session, as in "session"`)
	}
	if c, bad := firstNonToken(s); bad {
		return "", fmt.Errorf("%q is not a valid cookie name: %q is not allowed; use letters, digits and %s", s, c, tchars)
	}
	return s, nil
}

func checkQueryParameter(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf(`query_parameter must not be empty; name the URL query parameter that carries the session, as in "session_id"`)
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("&=#?", c) {
			return "", fmt.Errorf("%q is not a valid query parameter name: %q is not allowed", s, c)
		}
	}
	return s, nil
}

func (d *decoder) static(spec *staticSpec) []StaticEndpoint {
	var eps []StaticEndpoint
	addrs := map[hostPort]hcl.Range{} // canonical address -> first occurrence
	ids := map[string]hcl.Range{}     // hash identity -> first occurrence

	// add registers an endpoint, rejecting a repeated address or identity.
	add := func(hp hostPort, addrRange hcl.Range, ep StaticEndpoint, idRange hcl.Range) bool {
		if prev, dup := addrs[hp]; dup {
			d.errorf(addrRange, "Duplicate endpoint",
				"%s is already listed at line %d; list each endpoint once (an endpoint block can give it a weight).", hp, prev.Start.Line)
			return false
		}
		addrs[hp] = addrRange
		id := cmp.Or(ep.HashKey, hp.String())
		if prev, dup := ids[id]; dup {
			d.errorf(idRange, "Duplicate hash_key",
				"Hash key %q is already used at line %d; every endpoint needs its own identity on the hash ring.", id, prev.Start.Line)
			return false
		}
		ids[id] = idRange
		return true
	}

	if a := spec.Endpoints; a != nil {
		exprs, diags := hcl.ExprList(a.Expr)
		d.add(diags)
		for _, e := range exprs {
			hp, good := d.endpointAddress(e.Range(), "endpoints element", e)
			if !good {
				continue
			}
			ep := StaticEndpoint{Host: hp.host, Port: hp.port, Weight: 1}
			if add(hp, e.Range(), ep, e.Range()) {
				eps = append(eps, ep)
			}
		}
	}

	for i := range spec.Endpoint {
		b := &spec.Endpoint[i]
		hp, addrOK := d.parseEndpointLabel(b.Address, b.AddressRange)
		good := addrOK
		ep := StaticEndpoint{Host: hp.host, Port: hp.port, Weight: 1}
		idRange := b.AddressRange
		if a := b.Weight; a != nil {
			n, g := d.uintIn(a.Name, a.Expr, 1, MaxEndpointWeight, "Invalid weight")
			ep.Weight, good = uint32(n), good && g
		}
		if a := b.HashKey; a != nil {
			s, g := d.str(a.Name, a.Expr)
			if g && s == "" {
				d.errorf(a.Expr.Range(), "Invalid hash_key",
					"hash_key must not be empty; omit it to use the endpoint's host:port as its identity.")
				g = false
			}
			ep.HashKey, good, idRange = s, good && g, a.Expr.Range()
		}
		for _, f := range []struct {
			attr *hcl.Attribute
			dst  *string
		}{{b.Region, &ep.Region}, {b.Zone, &ep.Zone}, {b.SubZone, &ep.SubZone}} {
			if a := f.attr; a != nil {
				s, g := d.str(a.Name, a.Expr)
				*f.dst, good = s, good && g
			}
		}
		if addrOK && add(hp, b.AddressRange, ep, idRange) && good {
			eps = append(eps, ep)
		}
	}
	return eps
}

func (d *decoder) endpointAddress(rng hcl.Range, name string, e hcl.Expression) (hostPort, bool) {
	s, ok := d.str(name, e)
	if !ok {
		return hostPort{}, false
	}
	return d.parseEndpointLabel(s, rng)
}

func (d *decoder) parseEndpointLabel(s string, rng hcl.Range) (hostPort, bool) {
	hp, err := parseHostPort(s, false)
	if err != nil {
		ae := err.(*addrError)
		d.errorf(rng, ae.summary, "%s", ae.detail)
		return hostPort{}, false
	}
	// Envoy only accepts IP addresses in endpoint assignments, and a name
	// resolved once here would go stale.
	if _, err := netip.ParseAddr(hp.host); err != nil {
		d.errorf(rng, "Endpoint is not an IP address",
			"Static endpoints must be IP addresses, as in \"10.0.0.7:%d\"; %q is a name. Envoy only accepts IP addresses for endpoints.", hp.port, hp.host)
		return hostPort{}, false
	}
	return hp, true
}

// value evaluates expr as data (no variables, no functions) and converts
// it to ty; what names ty for messages, as in "a number".
func (d *decoder) value(name string, expr hcl.Expression, ty cty.Type, what string) (cty.Value, bool) {
	v, diags := expr.Value(nil)
	d.add(diags)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if v.IsNull() {
		d.errorf(expr.Range(), "Invalid value", "%s must be %s, not null.", name, what)
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, ty)
	if err != nil || !cv.IsKnown() {
		d.errorf(expr.Range(), "Incorrect value type", "%s must be %s, not %s.", name, what, withArticle(v.Type().FriendlyName()))
		return cty.NilVal, false
	}
	return cv, true
}

func withArticle(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

func (d *decoder) str(name string, expr hcl.Expression) (string, bool) {
	v, ok := d.value(name, expr, cty.String, "a string")
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

// integer evaluates expr as a whole number of any size.
func (d *decoder) integer(name string, expr hcl.Expression) (*big.Int, bool) {
	v, ok := d.value(name, expr, cty.Number, "a number")
	if !ok {
		return nil, false
	}
	f := v.AsBigFloat()
	if !f.IsInt() {
		d.errorf(expr.Range(), "Invalid value", "%s must be a whole number, not %s.", name, f.Text('g', -1))
		return nil, false
	}
	i, _ := f.Int(nil)
	return i, true
}

// uintIn evaluates expr as a whole number in lo..hi.
func (d *decoder) uintIn(name string, expr hcl.Expression, lo, hi uint64, summary string) (uint64, bool) {
	n, ok := d.integer(name, expr)
	if !ok {
		return 0, false
	}
	if n.Sign() < 0 || !n.IsUint64() || n.Uint64() < lo || n.Uint64() > hi {
		d.errorf(expr.Range(), summary, "%s %s is out of range; use %d to %d.", name, n, lo, hi)
		return 0, false
	}
	return n.Uint64(), true
}

// duration decodes a Go duration string; "" means the default. zeroOK says
// whether "0s" is allowed: it means "no timeout" for route_timeout, but
// idle_timeout has no way to say "off" (zero keeps Envoy's default), so
// there "0s" would silently not mean what it says.
func (d *decoder) duration(a *hcl.Attribute, zeroOK bool) time.Duration {
	hint := ""
	if zeroOK {
		hint = `"0s" means no timeout.`
	}
	dur, set, ok := d.durationValue(a, hint)
	if ok && set && dur == 0 && !zeroOK {
		d.errorf(a.Expr.Range(), "Invalid duration",
			"%s must be positive; omit it to keep Envoy's default.", a.Name)
	}
	return dur
}

// durationOr decodes an optional duration attribute (a may be nil),
// returning def when it is unset or "". ok is false after a diagnostic,
// and the duration is then def. hint is as for durationValue.
func (d *decoder) durationOr(a *hcl.Attribute, def time.Duration, hint string) (dur time.Duration, ok bool) {
	if a == nil {
		return def, true
	}
	dur, set, ok := d.durationValue(a, hint)
	if !set {
		return def, ok
	}
	return dur, true
}

// optDuration is durationValue for an optional attribute (a may be nil,
// which is unset).
func (d *decoder) optDuration(a *hcl.Attribute, hint string) (dur time.Duration, set, ok bool) {
	if a == nil {
		return 0, false, true
	}
	return d.durationValue(a, hint)
}

// durationValue decodes a non-negative Go duration string. set is false
// for "", which means the default, as if omitted; ok is false after a
// diagnostic (set is then false and dur zero). hint, if any, ends the
// diagnostic of a string that is not a duration.
func (d *decoder) durationValue(a *hcl.Attribute, hint string) (dur time.Duration, set, ok bool) {
	s, ok := d.str(a.Name, a.Expr)
	if !ok {
		return 0, false, false
	}
	if s == "" {
		return 0, false, true
	}
	dur, err := time.ParseDuration(s)
	switch {
	case err != nil:
		if hint != "" {
			hint = " " + hint
		}
		d.errorf(a.Expr.Range(), "Invalid duration",
			`%s %q is not a duration; write a number with a unit, such as "30s", "10m" or "1h30m".%s`, a.Name, s, hint)
	case dur < 0:
		d.errorf(a.Expr.Range(), "Invalid duration", "%s %q must not be negative.", a.Name, s)
	default:
		return dur, true, true
	}
	return 0, false, false
}

// attributesInOrder returns the set attributes among attrs in source
// order.
func attributesInOrder(attrs ...*hcl.Attribute) []*hcl.Attribute {
	out := make([]*hcl.Attribute, 0, len(attrs))
	for _, a := range attrs {
		if a != nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *hcl.Attribute) int { return cmp.Compare(a.Range.Start.Byte, b.Range.Start.Byte) })
	return out
}

// sortDiagnostics orders diagnostics by position (those without one last),
// keeping the order of diagnostics at the same position. HCL reports
// unexpected attributes in map order, and golden files need a stable one.
func sortDiagnostics(diags hcl.Diagnostics) hcl.Diagnostics {
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		switch {
		case a.Subject == nil || b.Subject == nil:
			return cmp.Compare(boolInt(a.Subject == nil), boolInt(b.Subject == nil))
		}
		return cmp.Or(
			cmp.Compare(a.Subject.Filename, b.Subject.Filename),
			cmp.Compare(a.Subject.Start.Byte, b.Subject.Start.Byte),
		)
	})
	return diags
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for i := uint64(2); i*i <= n; i++ {
		if n%i == 0 {
			return false
		}
	}
	return true
}

// prevPrime returns the largest prime below n; n must be above 2.
func prevPrime(n uint64) uint64 {
	for n--; !isPrime(n); n-- {
	}
	return n
}

func nextPrime(n uint64) uint64 {
	for n++; !isPrime(n); n++ {
	}
	return n
}
