// Package bootstrap writes the configuration a data plane needs to find
// kvxds: an Envoy bootstrap (YAML) or a gRPC xDS bootstrap (JSON). Both are
// deterministic for the same options.
package bootstrap

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"
)

// XDSClusterName is the static cluster through which Envoy reaches kvxds.
const XDSClusterName = "kvxds"

// ClientKindKey is the node metadata field that tells kvxds which kind of
// client a node is ("envoy" or "grpc"), overriding its user agent.
const ClientKindKey = "kvxds.client"

// Options describe the node and where kvxds listens.
type Options struct {
	// NodeID identifies the node in kvxds's logs; any value is served.
	NodeID string
	// NodeCluster is Envoy's service cluster (default "kvxds-envoy").
	NodeCluster string
	// XDSAddress is kvxds's xDS host:port.
	XDSAddress string
	// XDSAddresses, if set, are several kvxds instances (host:port each)
	// serving the same configuration, in order of preference; it
	// replaces XDSAddress.
	XDSAddresses []string
	// Delta makes Envoy use incremental xDS.
	Delta bool
	// AdminAddress is Envoy's admin host:port (default 127.0.0.1:9901).
	AdminAddress string
	// TLS, if set, reaches kvxds over TLS (tls.go); nil is plaintext.
	TLS *TLS
}

func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", 0, fmt.Errorf("address %q: port must be 1-65535", addr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("address %q: host is empty", addr)
	}
	return host, uint32(p), nil
}

func socket(host string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address:       host,
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
	}}}
}

// xdsAddresses are the kvxds instances to reach.
func (o Options) xdsAddresses() []string {
	if len(o.XDSAddresses) > 0 {
		return o.XDSAddresses
	}
	return []string{o.XDSAddress}
}

// Envoy returns a validated Envoy bootstrap that takes listeners and
// clusters from kvxds over ADS. With several kvxds instances, the cluster
// to them has every one, health-checked over gRPC, so Envoy's ADS stream
// moves to a live instance when its instance goes away; instances serve
// the same versions, so the move changes nothing.
func Envoy(o Options) (*bootstrapv3.Bootstrap, error) {
	if o.NodeID == "" {
		return nil, fmt.Errorf("node id is empty")
	}
	if o.NodeCluster == "" {
		o.NodeCluster = "kvxds-envoy"
	}
	if o.AdminAddress == "" {
		o.AdminAddress = "127.0.0.1:9901"
	}
	discoveryType := clusterv3.Cluster_STATIC
	var lbEndpoints []*endpointv3.LbEndpoint
	var hosts []string
	for _, addr := range o.xdsAddresses() {
		host, port, err := splitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("xds address: %w", err)
		}
		hosts = append(hosts, host)
		if _, err := netip.ParseAddr(host); err != nil {
			discoveryType = clusterv3.Cluster_STRICT_DNS
		}
		lbEndpoints = append(lbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socket(host, port)}},
		})
	}
	adminHost, adminPort, err := splitHostPort(o.AdminAddress)
	if err != nil {
		return nil, fmt.Errorf("admin address: %w", err)
	}
	apiType := core.ApiConfigSource_GRPC
	if o.Delta {
		apiType = core.ApiConfigSource_DELTA_GRPC
	}
	// kvxds speaks gRPC, so the cluster to it must use HTTP/2.
	h2, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &core.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	ads := &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		ResourceApiVersion:    core.ApiVersion_V3,
	}
	b := &bootstrapv3.Bootstrap{
		Node: &core.Node{Id: o.NodeID, Cluster: o.NodeCluster},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &core.ApiConfigSource{
				ApiType:                   apiType,
				TransportApiVersion:       core.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*core.GrpcService{{
					TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: XDSClusterName}},
				}},
			},
			CdsConfig: ads,
			LdsConfig: ads,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Clusters: []*clusterv3.Cluster{{
				Name:                 XDSClusterName,
				ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: discoveryType},
				ConnectTimeout:       durationpb.New(time.Second),
				TypedExtensionProtocolOptions: map[string]*anypb.Any{
					"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2,
				},
				LoadAssignment: &endpointv3.ClusterLoadAssignment{
					ClusterName: XDSClusterName,
					Endpoints:   []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbEndpoints}},
				},
			}},
		},
		Admin: &bootstrapv3.Admin{Address: socket(adminHost, adminPort)},
	}
	if o.TLS != nil {
		ts, err := o.TLS.envoyTransportSocket(hosts)
		if err != nil {
			return nil, err
		}
		b.StaticResources.Clusters[0].TransportSocket = ts
	}
	if len(lbEndpoints) > 1 {
		// kvxds serves grpc.health.v1: an instance that stops answering
		// leaves the cluster within a few seconds.
		b.StaticResources.Clusters[0].HealthChecks = []*core.HealthCheck{{
			Timeout:            durationpb.New(time.Second),
			Interval:           durationpb.New(2 * time.Second),
			UnhealthyThreshold: wrapperspb.UInt32(2),
			HealthyThreshold:   wrapperspb.UInt32(1),
			HealthChecker:      &core.HealthCheck_GrpcHealthCheck_{GrpcHealthCheck: &core.HealthCheck_GrpcHealthCheck{}},
		}}
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("invalid bootstrap: %w", err)
	}
	return b, nil
}

// EnvoyYAML renders Envoy(o) as YAML.
func EnvoyYAML(o Options) ([]byte, error) {
	b, err := Envoy(o)
	if err != nil {
		return nil, err
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(b)
	if err != nil {
		return nil, err
	}
	// protojson's whitespace is unstable by design: normalise via YAML.
	return yaml.JSONToYAML(js)
}

// GRPC is the JSON bootstrap read by grpc-go, grpc-java, C-core and grpc-js
// (GRPC_XDS_BOOTSTRAP or GRPC_XDS_BOOTSTRAP_CONFIG).
type GRPC struct {
	XDSServers []GRPCServer `json:"xds_servers"`
	Node       GRPCNode     `json:"node"`
}

// GRPCServer is one management server entry.
type GRPCServer struct {
	ServerURI      string            `json:"server_uri"`
	ChannelCreds   []GRPCChannelCred `json:"channel_creds"`
	ServerFeatures []string          `json:"server_features"`
}

// GRPCChannelCred names the channel credentials to kvxds.
type GRPCChannelCred struct {
	Type   string         `json:"type"`
	Config *GRPCTLSConfig `json:"config,omitempty"`
}

// GRPCNode is the node a gRPC client presents.
type GRPCNode struct {
	ID       string            `json:"id"`
	Cluster  string            `json:"cluster,omitempty"`
	Locality map[string]string `json:"locality"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// GRPCJSON returns a gRPC xDS bootstrap that reaches kvxds with insecure
// credentials, or TLS ones with o.TLS. Several kvxds instances are listed as xds_servers in order:
// grpc-go and grpc-java fall back to the next one while the first cannot
// be reached and a resource is not cached yet (gRFC A71), and otherwise
// keep their last configuration until it returns. The node carries an empty locality (grpc-js requires one)
// and the metadata that marks it as a proxyless gRPC client, so it is
// classified correctly whatever its user agent.
func GRPCJSON(o Options) ([]byte, error) {
	if o.NodeID == "" {
		return nil, fmt.Errorf("node id is empty")
	}
	var servers []GRPCServer
	for _, addr := range o.xdsAddresses() {
		host, _, err := splitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("xds address: %w", err)
		}
		creds := GRPCChannelCred{Type: "insecure"}
		if o.TLS != nil {
			if creds, err = o.TLS.grpcChannelCreds(host); err != nil {
				return nil, err
			}
		}
		servers = append(servers, GRPCServer{
			ServerURI:      addr,
			ChannelCreds:   []GRPCChannelCred{creds},
			ServerFeatures: []string{"xds_v3"},
		})
	}
	b := GRPC{
		XDSServers: servers,
		Node: GRPCNode{
			ID:       o.NodeID,
			Cluster:  o.NodeCluster,
			Locality: map[string]string{},
			Metadata: map[string]string{ClientKindKey: "grpc"},
		},
	}
	return json.MarshalIndent(b, "", "  ")
}
