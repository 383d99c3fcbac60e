// Package fleet is kvxds's in-memory model of the inference fleet: pools of
// replicas with their hashing settings, and each replica's address, weight,
// health, locality and stable hash identity.
//
// The model is the only input of the xDS translator. Policy, discovery and
// metric-driven weights never talk to the translator directly: they are
// joined into a Fleet, which Prepare normalises (sorted, defaulted),
// validates and plans (Plan: which replicas each hash table holds) once,
// before anything is translated. A Fleet is plain data: it is compared,
// copied and serialised freely, and two equal Fleets always translate to
// byte-identical resources.
package fleet

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Algorithm names the consistent-hashing load balancer of a pool.
type Algorithm string

const (
	// Maglev is Envoy's Maglev table. Proxyless gRPC clients, which do not
	// implement Maglev, fall back to ring hash on the same keys.
	Maglev Algorithm = "maglev"
	// RingHash is the Ketama-style ring used by Envoy and gRPC.
	RingHash Algorithm = "ring_hash"
)

// Balancer is how a pool spreads requests over its endpoints.
type Balancer string

const (
	// ConsistentHash maps each request's key to an endpoint (Hash).
	ConsistentHash Balancer = "hash"
	// RoundRobin and LeastRequest ignore keys; they are baselines for
	// measuring what affinity gains.
	RoundRobin   Balancer = "round_robin"
	LeastRequest Balancer = "least_request"
	// Random is only a Hash.Keyless choice: requests without a key stay on
	// the hash table, where Envoy and gRPC hash a random value for them.
	Random Balancer = "random"
)

// KeylessSuffix names the second cluster of a consistent-hashing pool
// whose Hash.Keyless is not Random: pool "chat" gets cluster
// "chat/keyless" over the same endpoints. Pool names cannot contain '/'.
const KeylessSuffix = "/keyless"

// DefaultListenAddress is where Envoy listens for a pool that sets none.
const DefaultListenAddress = "0.0.0.0"

// Health is an endpoint's health as pushed to the data plane.
type Health int

const (
	// Healthy endpoints are in the hash table.
	Healthy Health = iota
	// Draining endpoints leave the hash table for new keys; Envoy lets
	// existing connections finish.
	Draining
	// Degraded endpoints are used by Envoy only when too few healthy ones
	// remain; proxyless gRPC treats them as unusable.
	Degraded
	// Unhealthy endpoints receive no traffic.
	Unhealthy
)

// MarshalText writes the health as its name ("healthy", "draining", ...).
func (h Health) MarshalText() ([]byte, error) {
	if h < Healthy || h > Unhealthy {
		return nil, fmt.Errorf("unknown health %d", int(h))
	}
	return []byte(h.String()), nil
}

// UnmarshalText reads a name MarshalText writes.
func (h *Health) UnmarshalText(b []byte) error {
	for c := Healthy; c <= Unhealthy; c++ {
		if c.String() == string(b) {
			*h = c
			return nil
		}
	}
	return fmt.Errorf("unknown health %q", b)
}

func (h Health) String() string {
	switch h {
	case Healthy:
		return "healthy"
	case Draining:
		return "draining"
	case Degraded:
		return "degraded"
	case Unhealthy:
		return "unhealthy"
	}
	return "health(" + strconv.Itoa(int(h)) + ")"
}

// Fleet is the whole model: every pool kvxds serves.
type Fleet struct {
	Pools []Pool `json:"pools"`
}

// Pool is one group of interchangeable replicas behind one listener.
type Pool struct {
	// Name names the pool's Envoy listener, route configuration and
	// cluster; proxyless gRPC clients dial xds:///<Name>.
	Name string
	// Settings are how the pool is served, as its policy block says.
	Settings
	Endpoints []Endpoint
	// HotKeys is the pool's hot-key table as decided (see HotKeys),
	// sorted by key index and value; empty when none is hot.
	HotKeys []HotKey
	// Adapters are the pool's placed LoRA adapters as decided (see
	// Adapters and LoRA), sorted by name; empty when none is placed.
	Adapters []Adapter
	// PrefillTable is the prefill pool's table, in a pool with Prefill:
	// Prepare builds it from the prefill pool's replicas.
	PrefillTable *SlotTable
	// LoadAt, when Envoys log the pool's requests in flight to this
	// instance (Hash.LoadInterval), is when its endpoints' InFlightBytes
	// were counted: they are the fleet's as this instance sees it, zeros
	// included. Zero leaves each pick filter to its own counts.
	LoadAt time.Time
	// Went, with LoadAt, are the keys whose last request a pick filter
	// sent away from their slot's replica, by the first eight hex digits
	// of their hash: where to, and when.
	Went map[string]KeyWent
	// Seen, with LoadAt, are the keys a pick filter placed within
	// inflight.WentTTL, home or away, as a set of bits in hex
	// (inflight.SeenSet); "" for none.
	Seen string
}

// KeyWent is where a key's last request went away from its slot's
// replica: the replica's address and when, in ms since the epoch.
type KeyWent struct {
	Host string
	At   int64
}

// Settings are a pool's own settings: everything about it but its name
// and its replicas. The policy decodes a pool block's settings into them,
// and the join copies them into the model as they are.
type Settings struct {
	// ListenAddress and Port are where Envoy listens for this pool.
	ListenAddress string
	Port          uint32
	// RouteTimeout bounds a whole request at Envoy. Zero disables it,
	// which is the default: streamed generations can run for minutes.
	RouteTimeout time.Duration
	// IdleTimeout bounds the silence on a stream; zero keeps Envoy's
	// default.
	IdleTimeout time.Duration
	// Balancer defaults to ConsistentHash; Hash only applies to it.
	Balancer Balancer
	Hash     Hash
	// Mesh, if set, also serves the endpoints under a cluster name that
	// another control plane defines (see Mesh); nil for none.
	Mesh *Mesh
	// Groups are the pool's tenant hash groups, tried in order before
	// the pool's own routes (consistent-hashing pools only).
	Groups []Group
	// LoRA places the pool's LoRA adapters (adapters.go); nil turns it
	// off (consistent-hashing pools only).
	LoRA *Adapters
	// Prefill makes the pool the decode side of prefill/decode
	// disaggregation (prefill.go); nil for none.
	Prefill *Prefill
}

// GroupInfix joins a pool's name and a group's name into the name of the
// group's cluster and assignment: group "acme" of pool "chat" is
// "chat/group/acme". Pool names cannot contain '/'.
const GroupInfix = "/group/"

// Group is a tenant hash group: requests whose Header equals one of
// Values are hashed on the pool's keys over a stable subset of Replicas
// of the pool's replicas, chosen by rendezvous hashing of their
// identities keyed by Name (see GroupMembers).
type Group struct {
	Name   string   `json:"name"`
	Header string   `json:"header"`
	Values []string `json:"values"`
	// Replicas is the number of healthy replicas the group hashes over.
	Replicas int `json:"replicas"`
	// Exclusive takes the group's replicas out of the pool's own
	// clusters, unless that leaves them no healthy replica.
	Exclusive bool `json:"exclusive,omitempty"`
	// MemberWeight is the largest weight a member is expected to carry
	// (the pool's largest metric-driven weight multiplier; 0 means 1):
	// it sizes the group's gRPC ring.
	MemberWeight uint32 `json:"member_weight,omitempty"`
	// Stage is "" once the group is routed; StageAdding or StageLeaving
	// while its cluster is served without its routes (see StageAdding).
	Stage string `json:"stage,omitempty"`
}

// Routed reports whether g's routes are served (its stage is "").
func (g Group) Routed() bool { return g.Stage == "" }

// Stages of a group's or an adapter's routes (Group.Stage,
// Adapter.Stage), make before break: a route names a cluster only after
// that cluster was served in an earlier push, and a cluster goes only
// after its routes went in an earlier one. A client given both in one
// push may install the route before the cluster (Envoy answers "no
// cluster", grpc-go "unknown cluster selected for RPC"): the protocol
// orders nothing across resource types, and a client that has the
// cluster still has to fetch its endpoints. Meanwhile the group's or
// adapter's requests take the pool's own routes, which are always valid.
const (
	// StageAdding is a cluster served whose routes come with a later
	// push.
	StageAdding = "adding"
	// StageLeaving is a cluster whose routes are gone and which goes
	// with a later push, so that no request is routed to a cluster its
	// client has just lost.
	StageLeaving = "leaving"
)

func validStage(s string) bool { return s == "" || s == StageAdding || s == StageLeaving }

// ClusterName is the name of g's cluster and assignment in pool.
func (g Group) ClusterName(pool string) string { return pool + GroupInfix + g.Name }

// Mesh is a pool's assignment for a cluster of another control plane: an
// Istio or Envoy Gateway cluster whose endpoints, weights and health
// come from kvxds (EDS only), next to the pool's own resources.
type Mesh struct {
	// ClusterName is the mesh's cluster (and assignment) name, such as
	// Istio's "outbound|8000||vllm.llm.svc.cluster.local". It differs
	// from every pool name and every other pool's mesh name.
	ClusterName string `json:"cluster_name"`
	// IstioMTLS marks the endpoints with Istio's transport socket match
	// (tlsMode = "istio"), so that sidecars keep using mTLS.
	IstioMTLS bool `json:"istio_mtls,omitempty"`
}

// poolJSON is a Pool's serialised form: durations as Go duration strings
// ("10m0s"), omitted when zero. Its fields are listed rather than
// embedded so that the endpoints keep their place among the settings
// (/debug/fleet and the fleet goldens are read in this order).
type poolJSON struct {
	Name          string     `json:"name"`
	ListenAddress string     `json:"listen_address"`
	Port          uint32     `json:"port"`
	Balancer      Balancer   `json:"balancer"`
	Hash          Hash       `json:"hash"`
	Endpoints     []Endpoint `json:"endpoints"`
	Mesh          *Mesh      `json:"mesh,omitempty"`
	Groups        []Group    `json:"groups,omitempty"`
	HotKeys       []HotKey   `json:"hot_keys,omitempty"`
	LoRA          *Adapters  `json:"lora,omitempty"`
	Adapters      []Adapter  `json:"adapters,omitempty"`
	Prefill       *Prefill   `json:"prefill,omitempty"`
	// PrefillTable is written for reading (status); Prepare rebuilds it.
	PrefillTable *SlotTable `json:"prefill_table,omitempty"`
	LoadAt       *time.Time `json:"load_at,omitempty"`
	RouteTimeout string     `json:"route_timeout,omitempty"`
	IdleTimeout  string     `json:"idle_timeout,omitempty"`
}

// MarshalJSON writes p with its durations as strings.
func (p Pool) MarshalJSON() ([]byte, error) {
	j := poolJSON{
		Name: p.Name, ListenAddress: p.ListenAddress, Port: p.Port, Balancer: p.Balancer,
		Hash: p.Hash, Endpoints: p.Endpoints, Mesh: p.Mesh, Groups: p.Groups, HotKeys: p.HotKeys,
		LoRA: p.LoRA, Adapters: p.Adapters, Prefill: p.Prefill, PrefillTable: p.PrefillTable,
	}
	if !p.LoadAt.IsZero() {
		j.LoadAt = &p.LoadAt
	}
	if p.RouteTimeout != 0 {
		j.RouteTimeout = p.RouteTimeout.String()
	}
	if p.IdleTimeout != 0 {
		j.IdleTimeout = p.IdleTimeout.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Pool) UnmarshalJSON(b []byte) error {
	var j poolJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = Pool{Name: j.Name, Endpoints: j.Endpoints, HotKeys: j.HotKeys, Adapters: j.Adapters, Settings: Settings{
		ListenAddress: j.ListenAddress, Port: j.Port, Balancer: j.Balancer,
		Hash: j.Hash, Mesh: j.Mesh, Groups: j.Groups, LoRA: j.LoRA, Prefill: j.Prefill,
	}}
	if j.LoadAt != nil {
		p.LoadAt = *j.LoadAt
	}
	for _, d := range []struct {
		s   string
		dst *time.Duration
	}{{j.RouteTimeout, &p.RouteTimeout}, {j.IdleTimeout, &p.IdleTimeout}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("pool %q: %w", p.Name, err)
		}
		*d.dst = v
	}
	return nil
}

// Hash is how requests of a pool map to endpoints.
type Hash struct {
	Algorithm Algorithm `json:"algorithm,omitempty"`
	// TableSize is the Maglev table size (prime).
	TableSize uint64 `json:"table_size,omitempty"`
	// MinRingSize and MaxRingSize bound the ring; zero keeps the
	// client's default.
	MinRingSize uint64 `json:"min_ring_size,omitempty"`
	MaxRingSize uint64 `json:"max_ring_size,omitempty"`
	// EntriesPerWeight, with RingHash and no ring sizes, sizes Envoy's
	// ring to this many entries per unit of healthy weight (EnvoyRingSize),
	// so that a change moves only the changed replica's sessions; the
	// ring size, and so Envoy's cluster, then follows the healthy weight.
	// Zero keeps Envoy's own sizing from MinRingSize and MaxRingSize.
	EntriesPerWeight uint64 `json:"entries_per_weight,omitempty"`
	// BalanceFactor is bounded-load hashing in percent (>= 100); zero
	// turns it off.
	BalanceFactor uint32 `json:"balance_factor,omitempty"`
	// BalanceOn is what the bound counts: BalanceOnRequests (Envoy's own
	// hash_balance_factor) or BalanceOnPromptBytes (Envoy's Lua filter
	// picks the replica from the pool's slot table, bounded on the prompt
	// bytes in flight; clients without the filter keep the requests
	// bound). Empty is BalanceOnRequests.
	BalanceOn string `json:"balance_on,omitempty"`
	// LoadInterval, with BalanceOnPromptBytes, is how often kvxds serves
	// the Envoys' pick filters each replica's prompt bytes in flight as
	// every Envoy's upstream logs report them (Endpoint.InFlightBytes):
	// each filter then bounds on the fleet's load, not on its own share
	// of it. Zero turns that off: each filter bounds on its own counts.
	LoadInterval time.Duration `json:"load_interval,omitempty"`
	// GRPCRingCap is the ring size cap of proxyless gRPC clients; zero
	// is their default (4,096). Their rings are sized to fill it with
	// 64 units of weight.
	GRPCRingCap uint64 `json:"grpc_ring_cap,omitempty"`
	// Keys are tried in order; the first one present in a request wins.
	Keys []HashKey `json:"keys,omitempty"`
	// Keyless is how requests carrying none of Keys are spread:
	// RoundRobin (the default) or LeastRequest over the same endpoints,
	// or Random. A missing key cannot pick a cache, and hashing a random
	// value per request places requests like random assignment, which is
	// burstier than round robin's rotation.
	Keyless Balancer `json:"keyless,omitempty"`
	// MaxBodyBytes is the longest request body Envoy buffers for body
	// keys and for Hot's spread sub-key (a body key too); set when Keys
	// has one or Hot is set (Normalize fills DefaultMaxBodyBytes in for
	// Hot).
	MaxBodyBytes int `json:"max_body_bytes,omitempty"`
	// Hot finds and spreads the pool's hot keys; nil turns it off.
	Hot *HotKeys `json:"hot_keys,omitempty"`
}

// HashKey is one source of a request's hash. Exactly one field is set.
type HashKey struct {
	Header         string `json:"header,omitempty"`
	Cookie         string `json:"cookie,omitempty"`
	QueryParameter string `json:"query_parameter,omitempty"`
	// JSONField (a dot path) and PromptPrefix (bytes) read the JSON
	// request body: Envoy only, through a generated Lua filter.
	JSONField    string `json:"json_field,omitempty"`
	PromptPrefix int    `json:"prompt_prefix,omitempty"`
	// Conversation keys on the body's leading messages (bodykey's
	// Conversation), the same for every turn and branch.
	Conversation bool `json:"conversation,omitempty"`
}

// Body reports whether k is read from the request body.
func (k HashKey) Body() bool { return k.JSONField != "" || k.PromptPrefix != 0 || k.Conversation }

// Locality places an endpoint; proxyless gRPC requires every endpoint to
// belong to one.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

// Endpoint is one replica of a pool.
type Endpoint struct {
	// Host is an IP address (names are resolved before the model);
	// Port its serving port.
	Host string `json:"host"`
	Port uint32 `json:"port"`
	// Weight is the endpoint's share of the hash table (>= 1).
	Weight   uint32   `json:"weight"`
	Health   Health   `json:"health"`
	Locality Locality `json:"locality"`
	// HashKey is the endpoint's stable identity on the hash ring. Every
	// data-plane instance must build the same table, and a replica that
	// changes address while keeping its identity keeps its keys. Defaults
	// to host:port.
	HashKey string `json:"hash_key"`
	// MaxLoRA is the adapter slots the replica's engine reports (its
	// max_lora); 0 when unknown, and then the pool's Adapters.MaxLoRA.
	MaxLoRA int `json:"max_lora,omitempty"`
	// Saturated is set on a Draining endpoint that the escape hatch took
	// out of the hash table until it recovers: it stays in the pool, so
	// the adapters it is a member of keep it, served healthy in their
	// tables, rather than fill in.
	Saturated bool `json:"saturated,omitempty"`
	// Cached is the replica's prefix-cache hit rate in sixteenths, as
	// the weights decided (weights.Decision.Cached; 0: unknown): a bound
	// on prompt bytes counts 1 − Cached/16 of the bytes in flight there,
	// since what hits the cache is not computed again. It moves no key.
	Cached uint8 `json:"cached,omitempty"`
	// InFlightBytes is the prompt bytes the Envoys that log to this kvxds
	// instance have in flight to the replica, in a pool whose pick
	// filters bound on the fleet's load (Hash.LoadInterval); zero
	// otherwise. Unlike the rest of the model it is this instance's own
	// observation, not a published decision: it moves no key (the slot
	// table does not depend on it), only where a bound overflows.
	InFlightBytes uint64 `json:"in_flight_bytes,omitempty"`
	// InFlightAdapters are, in such a pool placing LoRA adapters, the
	// adapters those Envoys have requests in flight for on the replica,
	// sorted and joined by spaces (names have none; a string keeps the
	// endpoint comparable): an engine runs at most MaxLoRA at once, so a
	// request for another waits there. Observed like InFlightBytes.
	InFlightAdapters string `json:"in_flight_adapters,omitempty"`
}

// Identity is the endpoint's place on the hash ring: its hash key, or its
// address when it has none (Normalize fills HashKey in with it).
func (e Endpoint) Identity() string {
	if e.HashKey != "" {
		return e.HashKey
	}
	return e.Address()
}

// Address returns host:port.
func (e Endpoint) Address() string {
	return joinHostPort(e.Host, e.Port)
}

func joinHostPort(host string, port uint32) string {
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return "[" + host + "]:" + strconv.FormatUint(uint64(port), 10)
	}
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// Normalize returns a copy of f with defaults filled in and everything
// sorted: pools by name, endpoints by hash key then address. Translating
// a normalised fleet is deterministic.
func (f Fleet) Normalize() Fleet {
	out := Fleet{Pools: make([]Pool, len(f.Pools))}
	for i, p := range f.Pools {
		p.Hash.Keys = slices.Clone(p.Hash.Keys)
		p.Groups = slices.Clone(p.Groups)
		for j := range p.Groups {
			p.Groups[j].Header = strings.ToLower(p.Groups[j].Header)
			p.Groups[j].Values = slices.Clone(p.Groups[j].Values)
		}
		if p.ListenAddress == "" {
			p.ListenAddress = DefaultListenAddress
		}
		if p.Balancer == "" {
			p.Balancer = DefaultBalancer
		}
		if p.Balancer != ConsistentHash {
			p.Hash = Hash{}
		}
		if p.Balancer == ConsistentHash && p.Hash.Algorithm == "" {
			p.Hash.Algorithm = DefaultAlgorithm
		}
		if p.Balancer == ConsistentHash && p.Hash.Algorithm == Maglev && p.Hash.TableSize == 0 {
			p.Hash.TableSize = DefaultMaglevTableSize
		}
		if p.Balancer == ConsistentHash && p.Hash.Keyless == "" {
			p.Hash.Keyless = DefaultKeyless
		}
		if p.Hash.Hot != nil {
			h := p.Hash.Hot.withDefaults()
			h.Declared = slices.Clone(h.Declared)
			slices.SortFunc(h.Declared, func(a, b DeclaredHotKey) int {
				return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value))
			})
			p.Hash.Hot = &h
			// Envoy reads the spread sub-key from the body.
			if p.Hash.MaxBodyBytes == 0 {
				p.Hash.MaxBodyBytes = DefaultMaxBodyBytes
			}
		}
		// The hot-key table sorted by key and value (then spread, so
		// that a repeated pair keeps a deterministic first).
		p.HotKeys = slices.Clone(p.HotKeys)
		slices.SortStableFunc(p.HotKeys, func(a, b HotKey) int {
			return cmp.Or(compareHotKeys(a, b), cmp.Compare(a.Spread, b.Spread))
		})
		if p.LoRA != nil {
			a := p.LoRA.withDefaults()
			p.LoRA = &a
		}
		p.Adapters = slices.Clone(p.Adapters)
		slices.SortStableFunc(p.Adapters, func(a, b Adapter) int { return cmp.Compare(a.Name, b.Name) })
		eps := make([]Endpoint, len(p.Endpoints))
		for j, e := range p.Endpoints {
			if e.Weight == 0 {
				e.Weight = 1
			}
			e.HashKey = e.Identity()
			// Only a draining replica is saturated.
			e.Saturated = e.Saturated && e.Health == Draining
			eps[j] = e
		}
		slices.SortFunc(eps, func(a, b Endpoint) int {
			if c := cmp.Compare(a.HashKey, b.HashKey); c != 0 {
				return c
			}
			// Identities are unique in a valid fleet; this only keeps
			// invalid ones deterministic until Validate rejects them.
			return cmp.Compare(a.Address(), b.Address())
		})
		p.Endpoints = eps
		out.Pools[i] = p
	}
	slices.SortFunc(out.Pools, func(a, b Pool) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Validate reports every inconsistency of a normalised fleet. The policy
// package reports user errors with source locations; this is the last
// line of defence before anything is pushed.
func (f Fleet) Validate() error {
	var errs []error
	names := map[string]bool{}
	ports := map[string]string{}
	errs = append(errs, f.validateMesh()...)
	byName := make(map[string]*Pool, len(f.Pools))
	for i := range f.Pools {
		byName[f.Pools[i].Name] = &f.Pools[i]
	}
	for _, p := range f.Pools {
		if p.Name == "" {
			errs = append(errs, errors.New("pool with empty name"))
		}
		if strings.Contains(p.Name, "/") {
			errs = append(errs, fmt.Errorf("pool %q: name contains '/'", p.Name))
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("pool %q: duplicate name", p.Name))
		}
		names[p.Name] = true
		if p.Port == 0 || p.Port > 65535 {
			errs = append(errs, fmt.Errorf("pool %q: port %d out of range", p.Name, p.Port))
		}
		la := joinHostPort(p.ListenAddress, p.Port)
		if other, ok := ports[la]; ok {
			errs = append(errs, fmt.Errorf("pool %q: listener %s already used by pool %q", p.Name, la, other))
		}
		ports[la] = p.Name
		switch p.Balancer {
		case ConsistentHash:
			errs = append(errs, p.Hash.validate(p.Name)...)
			if p.Hash.Hot != nil {
				for _, err := range p.Hash.Hot.validate() {
					errs = append(errs, fmt.Errorf("pool %q: %w", p.Name, err))
				}
			}
		case RoundRobin, LeastRequest:
		default:
			errs = append(errs, fmt.Errorf("pool %q: unknown balancer %q", p.Name, p.Balancer))
		}
		errs = append(errs, p.validateGroups()...)
		errs = append(errs, p.validateHotKeys()...)
		errs = append(errs, p.validateDeclared()...)
		errs = append(errs, p.validateAdapters()...)
		errs = append(errs, p.validatePrefill(byName)...)
		ids := map[string]bool{}
		for _, e := range p.Endpoints {
			if e.Port == 0 || e.Port > 65535 {
				errs = append(errs, fmt.Errorf("pool %q: bad endpoint address %q", p.Name, e.Address()))
			}
			// Envoy rejects EDS endpoints that are not IP addresses; names
			// are resolved by discovery before they reach the model.
			if _, err := netip.ParseAddr(e.Host); err != nil {
				errs = append(errs, fmt.Errorf("pool %q: endpoint host %q is not an IP address", p.Name, e.Host))
			}
			if e.Weight == 0 {
				errs = append(errs, fmt.Errorf("pool %q: endpoint %s has weight 0", p.Name, e.Address()))
			}
			if ids[e.HashKey] {
				errs = append(errs, fmt.Errorf("pool %q: duplicate endpoint identity %q", p.Name, e.HashKey))
			}
			ids[e.HashKey] = true
		}
	}
	return errors.Join(errs...)
}

// validateMesh keeps mesh cluster names non-empty and apart from each
// other and from pool names: all of them name assignments.
func (f Fleet) validateMesh() []error {
	var errs []error
	pools := make(map[string]bool, len(f.Pools))
	for _, p := range f.Pools {
		pools[p.Name] = true
	}
	meshes := map[string]string{}
	for _, p := range f.Pools {
		if p.Mesh == nil {
			continue
		}
		n := p.Mesh.ClusterName
		switch other, dup := meshes[n]; {
		case n == "":
			errs = append(errs, fmt.Errorf("pool %q: empty mesh cluster name", p.Name))
		case pools[n]:
			errs = append(errs, fmt.Errorf("pool %q: mesh cluster name %q is a pool's name", p.Name, n))
		case dup:
			errs = append(errs, fmt.Errorf("pool %q: mesh cluster name %q already used by pool %q", p.Name, n, other))
		}
		meshes[n] = p.Name
	}
	return errs
}

// validateGroups reports what is wrong with a pool's groups.
func (p Pool) validateGroups() []error {
	var errs []error
	if len(p.Groups) > 0 && p.Balancer != ConsistentHash {
		return []error{fmt.Errorf("pool %q: groups need consistent hashing, not %q", p.Name, p.Balancer)}
	}
	names := map[string]bool{}
	for _, g := range p.Groups {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("pool %q: group %q: "+format, append([]any{p.Name, g.Name}, args...)...))
		}
		if g.Name == "" || strings.Contains(g.Name, "/") {
			bad("name is empty or contains '/'")
		}
		if names[g.Name] {
			bad("duplicate name")
		}
		names[g.Name] = true
		if g.Header == "" {
			bad("no header")
		}
		if len(g.Values) == 0 || slices.Contains(g.Values, "") {
			bad("no values, or an empty one")
		}
		if g.Replicas < 1 {
			bad("replicas %d below 1", g.Replicas)
		}
		if !validStage(g.Stage) {
			bad("unknown stage %q", g.Stage)
		}
	}
	return errs
}

// validate reports what is wrong with a consistent-hashing pool's Hash.
func (h Hash) validate(pool string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("pool %q: "+format, append([]any{pool}, args...)...))
	}
	switch h.Algorithm {
	case Maglev:
		if h.TableSize == 0 || h.TableSize > MaxMaglevTableSize {
			bad("maglev table size %d out of range", h.TableSize)
		}
	case RingHash:
		if h.MaxRingSize != 0 && h.MinRingSize > h.MaxRingSize {
			bad("min ring size above max ring size")
		}
		if h.EntriesPerWeight != 0 && (h.MinRingSize != 0 || h.MaxRingSize != 0) {
			bad("entries per weight with explicit ring sizes")
		}
		if h.EntriesPerWeight > MaxRingSize {
			bad("entries per weight %d above %d", h.EntriesPerWeight, MaxRingSize)
		}
	default:
		bad("unknown hash algorithm %q", h.Algorithm)
	}
	if h.EntriesPerWeight != 0 && h.Algorithm != RingHash {
		bad("entries per weight on a %s table", h.Algorithm)
	}
	if h.BalanceFactor != 0 && h.BalanceFactor < MinBalanceFactor {
		bad("balance factor %d below %d", h.BalanceFactor, MinBalanceFactor)
	}
	switch h.BalanceOn {
	case "", BalanceOnRequests:
	case BalanceOnPromptBytes:
		if h.BalanceFactor == 0 {
			bad("balance on %s without a balance factor", h.BalanceOn)
		}
	default:
		bad("unknown balance_on %q", h.BalanceOn)
	}
	if h.LoadInterval != 0 && (h.BalanceOn != BalanceOnPromptBytes || h.LoadInterval < MinLoadInterval) {
		bad("load interval %s without balance on %s, or below %s", h.LoadInterval, BalanceOnPromptBytes, MinLoadInterval)
	}
	if h.GRPCRingCap != 0 && (h.GRPCRingCap < MinGRPCRingCap || h.GRPCRingCap > MaxRingSize) {
		bad("gRPC ring cap %d outside %d..%d", h.GRPCRingCap, MinGRPCRingCap, MaxRingSize)
	}
	switch h.Keyless {
	case RoundRobin, LeastRequest, Random:
	default:
		bad("unknown keyless balancer %q", h.Keyless)
	}
	if len(h.Keys) == 0 {
		bad("no hash key")
	}
	body := false
	for i, k := range h.Keys {
		n := 0
		for _, s := range []string{k.Header, k.Cookie, k.QueryParameter, k.JSONField} {
			if s != "" {
				n++
			}
		}
		if k.PromptPrefix != 0 {
			n++
		}
		if k.Conversation {
			n++
		}
		if n != 1 {
			bad("hash key %d must set exactly one source", i)
		}
		if k.PromptPrefix < 0 {
			bad("hash key %d: negative prompt prefix %d", i, k.PromptPrefix)
		}
		body = body || k.Body()
	}
	if body && h.MaxBodyBytes <= 0 {
		bad("body hash keys need a positive body limit, not %d", h.MaxBodyBytes)
	}
	if h.Hot != nil && h.MaxBodyBytes <= 0 {
		bad("hot keys need a positive body limit for their spread sub-key, not %d", h.MaxBodyBytes)
	}
	return errs
}
