// Package recipe prints what a mesh needs so that one service's endpoints
// and load balancing come from kvxds while the mesh keeps its own control
// plane: the pool's mesh block names the mesh's cluster, kvxds serves that
// cluster's ClusterLoadAssignment (EDS only), and the recipe points the
// mesh's Envoys at kvxds for that one cluster and sets the pool's
// consistent hashing on the mesh's side.
//
//   - Istio: an EnvoyFilter (networking.istio.io/v1alpha3) that adds a
//     cluster for kvxds and merges into the service's cluster an
//     eds_config taking its endpoints from kvxds, and a DestinationRule
//     (networking.istio.io/v1) hashing with Maglev on the pool's header.
//   - Envoy Gateway: an EnvoyPatchPolicy (gateway.envoyproxy.io/v1alpha1)
//     with the same two changes as JSON patches, and a
//     BackendTrafficPolicy hashing on the pool's header.
//   - Envoy: static clusters (kvxds, and the mesh cluster with the pool's
//     load_balancing_policy) and the route hash policies.
//
// Everything is rendered from protos that pass their ValidateAll and
// from the meshes' documented field names; the package tests decode the
// output into the meshes' own API types and Envoy's protos.
package recipe

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/xds/translate"
)

// Target is the kind of data plane a recipe is for.
type Target string

// Targets.
const (
	Istio        Target = "istio"
	EnvoyGateway Target = "envoy-gateway"
	Envoy        Target = "envoy"
)

// Targets lists every target, in the order of the command's usage.
var Targets = []Target{Istio, EnvoyGateway, Envoy}

// XDSClusterName is the cluster the recipes add for kvxds.
const XDSClusterName = "kvxds-xds"

// DefaultGateway is the Gateway an Envoy Gateway recipe patches unless
// told otherwise (Envoy Gateway's quickstart names its Gateway "eg").
const DefaultGateway = "eg"

// Options say what to print the recipe of.
type Options struct {
	// Policy holds Pool, which needs a mesh block.
	Policy *policy.Policy
	Pool   string
	// XDSAddress is where the mesh's Envoys reach kvxds (host:port).
	// Empty: for Istio and Envoy Gateway, the Service kvxds in the
	// namespace of the mesh's service on the policy's xds port; for
	// Envoy, the policy's xds address (127.0.0.1 for a wildcard host).
	XDSAddress string
	// Namespace is where the Kubernetes objects go. Empty: the namespace
	// of the mesh's service (Istio) or HTTPRoute (Envoy Gateway).
	Namespace string
	// Gateway is the Gateway an EnvoyPatchPolicy patches (Envoy Gateway
	// only); empty is DefaultGateway.
	Gateway string
}

// recipe is what every target needs, resolved from Options.
type recipe struct {
	pool    policy.Pool
	cluster string // the mesh cluster's name
	model   fleet.Model
	host    string // kvxds's host and port as the mesh reaches it
	port    uint32
	ns      string
}

// Render prints the recipe of target as YAML documents, each preceded by
// comments saying what it does.
func Render(target Target, o Options) ([]byte, error) {
	if !slices.Contains(Targets, target) {
		return nil, fmt.Errorf("recipe: unknown target %q; use one of %s", target, targetList())
	}
	if o.Policy == nil {
		return nil, errors.New("recipe: no policy")
	}
	i := slices.IndexFunc(o.Policy.Pools, func(p policy.Pool) bool { return p.Name == o.Pool })
	if i < 0 {
		return nil, fmt.Errorf("recipe: the policy has no pool %q", o.Pool)
	}
	r := &recipe{pool: o.Policy.Pools[i]}
	if r.pool.Mesh == nil {
		return nil, fmt.Errorf(`recipe: pool %q has no mesh block; add one naming the mesh's cluster, as in mesh { eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local" }`, o.Pool)
	}
	r.cluster = r.pool.Mesh.ClusterName
	if r.pool.Balancer != fleet.ConsistentHash {
		return nil, fmt.Errorf("recipe: pool %q balances with %s; a recipe sets consistent hashing, so give the pool load_balancing = %q", o.Pool, r.pool.Balancer, fleet.ConsistentHash)
	}
	m, err := fleet.Prepare(reconcile.Join(o.Policy, nil, nil))
	if err != nil {
		return nil, fmt.Errorf("recipe: %w", err)
	}
	r.model = m

	var svcNS string
	switch target {
	case Istio:
		host, _, err := istioService(r.cluster)
		if err != nil {
			return nil, err
		}
		svcNS = kubeNamespace(host)
	case EnvoyGateway:
		rt, err := gatewayRoute(r.cluster)
		if err != nil {
			return nil, err
		}
		svcNS = rt.namespace
	}
	r.ns = o.Namespace
	if r.ns == "" {
		r.ns = svcNS
	}
	addr := o.XDSAddress
	if addr == "" {
		addr = defaultXDSAddress(target, o.Policy.XDSAddress, svcNS)
	}
	if r.host, r.port, err = splitHostPort(addr); err != nil {
		return nil, fmt.Errorf("recipe: xds address: %w", err)
	}

	switch target {
	case Istio:
		return r.istio()
	case EnvoyGateway:
		return r.envoyGateway(cmp.Or(o.Gateway, DefaultGateway))
	default:
		return r.envoy()
	}
}

func targetList() string {
	var s []string
	for _, t := range Targets {
		s = append(s, string(t))
	}
	return strings.Join(s, ", ")
}

// defaultXDSAddress is where the mesh reaches kvxds when not told: the
// Service "kvxds" next to the mesh's service in Kubernetes, or the
// policy's own address for a plain Envoy.
func defaultXDSAddress(target Target, policyAddr, ns string) string {
	host, port, err := net.SplitHostPort(policyAddr)
	if err != nil {
		return policyAddr // the policy validated it; splitHostPort reports
	}
	if target == Envoy {
		if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, port)
	}
	return net.JoinHostPort("kvxds."+cmp.Or(ns, "default")+".svc.cluster.local", port)
}

func splitHostPort(addr string) (string, uint32, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", addr, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("%q: port must be 1-65535", addr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("%q: host is empty", addr)
	}
	return host, uint32(port), nil
}

// istioService splits Istio's outbound cluster name
// "outbound|PORT|SUBSET|HOST" into the service's host and port.
func istioService(cluster string) (host string, port uint32, err error) {
	parts := strings.Split(cluster, "|")
	if len(parts) != 4 || parts[0] != "outbound" || parts[3] == "" {
		return "", 0, fmt.Errorf(`recipe: mesh cluster %q is not an Istio outbound cluster name; Istio names a service's cluster "outbound|PORT||HOST", as in "outbound|8000||vllm.llm.svc.cluster.local"`, cluster)
	}
	n, err := strconv.ParseUint(parts[1], 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("recipe: mesh cluster %q: %q is not a port", cluster, parts[1])
	}
	if parts[2] != "" {
		return "", 0, fmt.Errorf("recipe: mesh cluster %q names subset %q; the recipe's DestinationRule applies to the whole service, so serve the cluster without a subset (%q)", cluster, parts[2], "outbound|"+parts[1]+"||"+parts[3])
	}
	return parts[3], uint32(n), nil
}

// kubeNamespace is the namespace of a Kubernetes service host
// (NAME.NAMESPACE.svc...), or "".
func kubeNamespace(host string) string {
	labels := strings.Split(host, ".")
	if len(labels) >= 3 && labels[2] == "svc" {
		return labels[1]
	}
	return ""
}

// route is an Envoy Gateway route named by its cluster.
type route struct {
	kind, namespace, name string
}

// gatewayRoute reads Envoy Gateway's cluster name of a route rule,
// "httproute/NAMESPACE/NAME/rule/N".
func gatewayRoute(cluster string) (route, error) {
	parts := strings.Split(cluster, "/")
	if len(parts) != 5 || parts[3] != "rule" || parts[1] == "" || parts[2] == "" {
		return route{}, fmt.Errorf(`recipe: mesh cluster %q is not an Envoy Gateway route cluster name; Envoy Gateway names a route rule's cluster "httproute/NAMESPACE/NAME/rule/N", as in "httproute/default/vllm/rule/0"`, cluster)
	}
	kinds := map[string]string{"httproute": "HTTPRoute", "grpcroute": "GRPCRoute"}
	kind, ok := kinds[parts[0]]
	if !ok {
		return route{}, fmt.Errorf("recipe: mesh cluster %q: consistent hashing on a header needs an HTTPRoute or a GRPCRoute, not a %s", cluster, parts[0])
	}
	if _, err := strconv.ParseUint(parts[4], 10, 32); err != nil {
		return route{}, fmt.Errorf("recipe: mesh cluster %q: rule index %q is not a number", cluster, parts[4])
	}
	return route{kind: kind, namespace: parts[1], name: parts[2]}, nil
}

// hashHeader is the header the mesh hashes on: the pool's first key,
// which must be a header (the meshes' APIs hash on one key, and body keys
// need kvxds's own listener). dropped lists the other keys of the chain.
func (r *recipe) hashHeader() (header string, dropped []string, err error) {
	keys := r.pool.Hash.Keys
	if len(keys) == 0 || keys[0].Header == "" {
		return "", nil, fmt.Errorf("recipe: pool %q: the first hash key must be a header, which a mesh's consistent hashing can take; cookie, query parameter and body keys are not carried over", r.pool.Name)
	}
	for _, k := range keys[1:] {
		dropped = append(dropped, describeKey(k))
	}
	return keys[0].Header, dropped, nil
}

func describeKey(k fleet.HashKey) string {
	switch {
	case k.Header != "":
		return "header " + k.Header
	case k.Cookie != "":
		return "cookie " + k.Cookie
	case k.QueryParameter != "":
		return "query_parameter " + k.QueryParameter
	case k.JSONField != "":
		return "json_field " + k.JSONField
	case k.Conversation:
		return "conversation"
	default:
		return "prompt_prefix " + strconv.Itoa(k.PromptPrefix)
	}
}

// xdsCluster is the cluster of kvxds as the mesh's Envoys reach it: gRPC
// over HTTP/2, by DNS unless the host is an IP address.
func (r *recipe) xdsCluster() (*clusterv3.Cluster, error) {
	h2, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	typ := clusterv3.Cluster_STATIC
	if _, err := netip.ParseAddr(r.host); err != nil {
		typ = clusterv3.Cluster_STRICT_DNS
	}
	c := &clusterv3.Cluster{
		Name:                 XDSClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: typ},
		ConnectTimeout:       durationpb.New(time.Second),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2,
		},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: XDSClusterName,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address:       r.host,
						PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: r.port},
					}}},
				}},
			}}}},
		},
	}
	if err := c.ValidateAll(); err != nil {
		return nil, fmt.Errorf("recipe: kvxds cluster: %w", err)
	}
	return c, nil
}

// edsSource takes one cluster's endpoints from kvxds over its own gRPC
// stream (EDS, state of the world), whatever the Envoy's other sources.
func edsSource() (*corev3.ConfigSource, error) {
	cs := &corev3.ConfigSource{
		ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType:             corev3.ApiConfigSource_GRPC,
			TransportApiVersion: corev3.ApiVersion_V3,
			GrpcServices: []*corev3.GrpcService{{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSClusterName}},
			}},
		}},
	}
	if err := cs.ValidateAll(); err != nil {
		return nil, fmt.Errorf("recipe: eds config: %w", err)
	}
	return cs, nil
}

// edsClusterConfig is the part of the mesh's cluster the recipes change.
func (r *recipe) edsClusterConfig() (*clusterv3.Cluster_EdsClusterConfig, error) {
	cs, err := edsSource()
	if err != nil {
		return nil, err
	}
	return &clusterv3.Cluster_EdsClusterConfig{EdsConfig: cs, ServiceName: r.cluster}, nil
}

// balanceFactor is the pool's bounded load, nil when off.
func (r *recipe) balanceFactor() *wrapperspb.UInt32Value {
	if r.pool.Hash.BalanceFactor == 0 {
		return nil
	}
	return wrapperspb.UInt32(r.pool.Hash.BalanceFactor)
}

// protoValue turns m into the JSON value Envoy's and the meshes' loaders
// read (proto field names).
func protoValue(m proto.Message) (any, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// doc is one YAML document with the comment lines above it.
type doc struct {
	comments []string
	value    any
}

// write renders docs as a YAML stream.
func write(header []string, docs []doc) ([]byte, error) {
	var b bytes.Buffer
	for _, l := range header {
		b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
	}
	for i, d := range docs {
		if i > 0 || len(header) > 0 {
			b.WriteString("---\n")
		}
		for _, l := range d.comments {
			b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
		}
		y, err := yaml.Marshal(d.value)
		if err != nil {
			return nil, fmt.Errorf("recipe: %w", err)
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

func translateMeshCluster(r *recipe, eds *corev3.ConfigSource) (*clusterv3.Cluster, error) {
	c, err := translate.MeshCluster(r.model, r.pool.Name, eds)
	if err != nil {
		return nil, fmt.Errorf("recipe: %w", err)
	}
	return c, nil
}

func translateHashPolicy(r *recipe) ([]*routev3.RouteAction_HashPolicy, error) {
	hp, err := translate.MeshRouteHashPolicy(r.model, r.pool.Name)
	if err != nil {
		return nil, fmt.Errorf("recipe: %w", err)
	}
	if len(hp) == 0 {
		return nil, fmt.Errorf("recipe: pool %q has no header, cookie or query parameter key for Envoy's route to hash on", r.pool.Name)
	}
	return hp, nil
}

// source is what the mesh recipes add to route one cluster's endpoints
// through kvxds: the cluster that reaches kvxds, as a value to print, and
// the EDS configuration that points the mesh's cluster at it.
func (r *recipe) source() (any, *clusterv3.Cluster_EdsClusterConfig, error) {
	xds, err := r.xdsCluster()
	if err != nil {
		return nil, nil, err
	}
	xdsV, err := protoValue(xds)
	if err != nil {
		return nil, nil, err
	}
	eds, err := r.edsClusterConfig()
	if err != nil {
		return nil, nil, err
	}
	return xdsV, eds, nil
}
