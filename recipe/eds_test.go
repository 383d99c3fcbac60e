package recipe

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/xds/server"
	"github.com/kvxds/kvxds/xds/translate"
)

const meshPolicy = `
pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static {
    endpoint "10.0.0.1:8000" {
      weight = 2
      zone   = "zone-a"
    }
    endpoint "10.0.0.2:8000" {
      weight = 3
      zone   = "zone-b"
    }
  }
  mesh {
    eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local"
    istio_mtls       = true
  }
}
`

const meshCluster = "outbound|8000||vllm.llm.svc.cluster.local"

// sidecar is how an Istio sidecar presents itself to a second xDS source.
var sidecar = &corev3.Node{Id: "sidecar~10.1.0.7~app-0.llm~llm.svc.cluster.local", Cluster: "app.llm", UserAgentName: "envoy"}

// model joins meshPolicy with the given weight of the first replica.
func model(t *testing.T, firstWeight uint32) fleet.Model {
	t.Helper()
	p, diags := policy.Parse([]byte(meshPolicy), "mesh.hcl")
	if diags.HasErrors() {
		t.Fatal(policy.Format(diags))
	}
	p.Pools[0].Static[0].Weight = firstWeight
	m, err := fleet.Prepare(reconcile.Join(p, reconcile.StaticTargets(p), nil))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stream is one xDS stream of a client that ACKs what it receives.
type stream interface {
	Send(*discoveryv3.DiscoveryRequest) error
	Recv() (*discoveryv3.DiscoveryResponse, error)
}

func receiveAll(s stream) <-chan *discoveryv3.DiscoveryResponse {
	ch := make(chan *discoveryv3.DiscoveryResponse, 16)
	go func() {
		defer close(ch)
		for {
			r, err := s.Recv()
			if err != nil {
				return
			}
			ch <- r
		}
	}()
	return ch
}

func nextResponse(t *testing.T, ch <-chan *discoveryv3.DiscoveryResponse, d time.Duration) *discoveryv3.DiscoveryResponse {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("stream closed")
		}
		return r
	case <-time.After(d):
		t.Fatal("no response")
	}
	return nil
}

// ack acknowledges r, asking for names again (nil: all of the type).
func ack(t *testing.T, s stream, r *discoveryv3.DiscoveryResponse, names []string) {
	t.Helper()
	if err := s.Send(&discoveryv3.DiscoveryRequest{
		Node: sidecar, TypeUrl: r.GetTypeUrl(), ResourceNames: names,
		VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(),
	}); err != nil {
		t.Fatal(err)
	}
}

// meshAssignment decodes the one assignment of r and returns its weights
// by address, checking Istio's tlsMode on every endpoint.
func meshAssignment(t *testing.T, r *discoveryv3.DiscoveryResponse) map[string]uint32 {
	t.Helper()
	if len(r.GetResources()) != 1 {
		t.Fatalf("%d assignments, want 1", len(r.GetResources()))
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := r.GetResources()[0].UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	if cla.GetClusterName() != meshCluster {
		t.Fatalf("assignment %q, want %q", cla.GetClusterName(), meshCluster)
	}
	weights := map[string]uint32{}
	for _, lle := range cla.GetEndpoints() {
		if lle.GetLocality().GetZone() == "" {
			t.Errorf("endpoints without their zone: %v", lle.GetLocality())
		}
		for _, e := range lle.GetLbEndpoints() {
			md := e.GetMetadata().GetFilterMetadata()[translate.TransportSocketMatchKey].GetFields()[translate.IstioTLSModeKey]
			if md.GetStringValue() != translate.IstioTLSModeValue {
				t.Errorf("endpoint %v without tlsMode istio: %v", e.GetEndpoint().GetAddress(), e.GetMetadata())
			}
			weights[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = e.GetLoadBalancingWeight().GetValue()
		}
	}
	return weights
}

// TestMeshClusterOverEDS plays a mesh's Envoy taking one cluster's
// endpoints from kvxds: over a plain EDS stream, as the recipes configure
// it, and over ADS. A weight change reaches both as an EDS update only.
func TestMeshClusterOverEDS(t *testing.T) {
	s := server.New(server.Options{Registerer: prometheus.NewRegistry()})
	ctx := context.Background()
	if err := s.Update(ctx, model(t, 2)); err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })

	eds, err := endpointservice.NewEndpointDiscoveryServiceClient(cc).StreamEndpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	edsCh := receiveAll(eds)
	if err := eds.Send(&discoveryv3.DiscoveryRequest{Node: sidecar, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{meshCluster}}); err != nil {
		t.Fatal(err)
	}
	r := nextResponse(t, edsCh, 5*time.Second)
	if got := meshAssignment(t, r); got["10.0.0.1"] != 2 || got["10.0.0.2"] != 3 {
		t.Fatalf("weights %v, want 10.0.0.1: 2, 10.0.0.2: 3", got)
	}
	ack(t, eds, r, []string{meshCluster})

	// Over ADS, with everything else a full client asks for.
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	adsCh := receiveAll(ads)
	subscriptions := map[string][]string{
		resourcev3.ClusterType:  nil,
		resourcev3.ListenerType: nil,
		resourcev3.RouteType:    {"chat"},
		resourcev3.EndpointType: {meshCluster},
	}
	for typ, names := range subscriptions {
		if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: sidecar, TypeUrl: typ, ResourceNames: names}); err != nil {
			t.Fatal(err)
		}
	}
	for range subscriptions {
		r := nextResponse(t, adsCh, 5*time.Second)
		if r.GetTypeUrl() == resourcev3.EndpointType {
			meshAssignment(t, r)
		}
		ack(t, ads, r, subscriptions[r.GetTypeUrl()])
	}

	if err := s.Update(ctx, model(t, 7)); err != nil {
		t.Fatal(err)
	}
	r = nextResponse(t, edsCh, 5*time.Second)
	if got := meshAssignment(t, r); got["10.0.0.1"] != 7 || got["10.0.0.2"] != 3 {
		t.Fatalf("after the change: weights %v, want 10.0.0.1: 7, 10.0.0.2: 3", got)
	}
	r = nextResponse(t, adsCh, 5*time.Second)
	if r.GetTypeUrl() != resourcev3.EndpointType {
		t.Fatalf("weight change sent %s over ADS, want only EDS", r.GetTypeUrl())
	}
	if got := meshAssignment(t, r); got["10.0.0.1"] != 7 {
		t.Fatalf("ADS: weights %v after the change", got)
	}
	ack(t, ads, r, subscriptions[r.GetTypeUrl()])
	select {
	case r := <-adsCh:
		t.Fatalf("weight change also sent %s (version %s)", r.GetTypeUrl(), r.GetVersionInfo())
	case <-time.After(300 * time.Millisecond):
	}
}
