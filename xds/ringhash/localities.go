package ringhash

// How a gRPC client turns an EDS assignment's locality and endpoint
// weights into the weights its ring hash divides. The implementations
// differ, so one assignment can mean different rings to different clients
// when its localities are of unequal size.

// Arithmetic is one way of combining locality and endpoint weights.
type Arithmetic int

const (
	// Product weighs an endpoint by locality weight × endpoint weight.
	// C-core: 1.51's src/core/ext/filters/client_channel/lb_policy/xds/
	// xds_cluster_resolver.cc and the current src/core/load_balancing/xds/
	// cds.cc (PriorityEndpointIterator; the default, unless
	// GRPC_EXPERIMENTAL_PF_WEIGHTED_SHUFFLING=true). grpc-java:
	// xds/.../ClusterResolverLoadBalancer.java (ATTR_SERVER_WEIGHT =
	// localityWeight × loadBalancingWeight). grpc-js: @grpc/grpc-js-xds
	// 1.14 load-balancer-cds.js (endpointWeight = locality weight ×
	// endpoint weight). grpc-go before gRFC A113, or with
	// GRPC_EXPERIMENTAL_PF_WEIGHTED_SHUFFLING=false.
	Product Arithmetic = iota
	// Normalised is gRFC A113: (locality weight ÷ the priority's locality
	// total) × (endpoint weight ÷ the locality's endpoint total), each
	// share in UQ1.31 fixed point rounded down, the product rounded down
	// and at least 1. The totals count every endpoint, healthy or not.
	// grpc-go: internal/xds/balancer/cdsbalancer/configbuilder.go
	// (priorityLocalitiesToEndpoints; on by default in v1.85). C-core with
	// GRPC_EXPERIMENTAL_PF_WEIGHTED_SHUFFLING=true.
	Normalised
)

// Client is a gRPC implementation kvxds serves.
type Client struct {
	Name       string
	Arithmetic Arithmetic
}

// Clients are the implementations whose rings kvxds must agree, each with
// the arithmetic of the versions it supports by default.
var Clients = []Client{
	{"grpc-go", Normalised},
	{"grpc-go (A113 off)", Product},
	{"grpc-java", Product},
	{"C-core", Product},
	{"C-core (A113 on)", Normalised},
	{"grpc-js", Product},
}

// Locality is one locality of an assignment, as a client reads it. Healthy
// tells, per endpoint, whether it goes on the ring (nil: all of them).
type Locality struct {
	Weight    uint64
	Endpoints []Endpoint
	Healthy   []bool
}

// Weigh returns the endpoints a client puts on its ring for the
// localities of one priority, with the weights its arithmetic gives them,
// in assignment order.
func Weigh(a Arithmetic, locs []Locality) []Endpoint {
	const one = 1 << 31
	var locSum uint64
	for _, l := range locs {
		locSum += l.Weight
	}
	var out []Endpoint
	for _, l := range locs {
		var epSum uint64
		for _, e := range l.Endpoints {
			epSum += e.Weight
		}
		for i, e := range l.Endpoints {
			if l.Healthy != nil && !l.Healthy[i] {
				continue
			}
			w := l.Weight * e.Weight
			if a == Normalised {
				nl := l.Weight * one / locSum
				ne := e.Weight * one / epSum
				w = max(ne*nl>>31, 1)
			}
			out = append(out, Endpoint{HashKey: e.HashKey, Weight: w})
		}
	}
	return out
}
