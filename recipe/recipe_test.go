package recipe

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apinetv1 "istio.io/api/networking/v1"
	apinetv1alpha3 "istio.io/api/networking/v1alpha3"
	clientnetv1 "istio.io/client-go/pkg/apis/networking/v1"
	clientnetv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/reconcile"
	"github.com/kvxds/kvxds/xds/translate"
)

var update = flag.Bool("update", false, "rewrite testdata/*.yaml golden files")

// Cases prints every golden recipe; the cmd and examples tests use it too.
var cases = []struct {
	name   string
	target Target
	opts   Options
}{
	{"istio", Istio, Options{Pool: "chat"}},
	{"istio-ring-hash", Istio, Options{Pool: "ring", XDSAddress: "10.0.0.9:18000", Namespace: "istio-system"}},
	{"envoy-gateway", EnvoyGateway, Options{Pool: "gateway", Gateway: "llm-gateway"}},
	{"envoy", Envoy, Options{Pool: "edge"}},
}

func loadPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p, diags := policy.Load(filepath.Join("testdata", "policy.hcl"))
	if diags.HasErrors() {
		t.Fatal(policy.Format(diags))
	}
	return p
}

func TestGolden(t *testing.T) {
	p := loadPolicy(t)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.Policy = p
			got, err := Render(tt.target, o)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tt.name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (regenerate with go test ./recipe -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs (regenerate with -update if intended):\n--- got\n%s\n--- want\n%s", path, got, want)
			}
			pool := poolOf(t, p, o.Pool)
			switch tt.target {
			case Istio:
				checkIstio(t, got, pool)
			case EnvoyGateway:
				checkEnvoyGateway(t, got, pool)
			case Envoy:
				checkEnvoy(t, got, p, pool)
			}
		})
	}
}

func poolOf(t *testing.T, p *policy.Policy, name string) policy.Pool {
	t.Helper()
	for _, pool := range p.Pools {
		if pool.Name == name {
			return pool
		}
	}
	t.Fatalf("no pool %q", name)
	return policy.Pool{}
}

// documents splits a YAML stream into its documents as JSON, leaving out
// those holding only comments.
func documents(t *testing.T, out []byte) [][]byte {
	t.Helper()
	var docs [][]byte
	for _, d := range strings.Split(string(out), "\n---\n") {
		var v any
		if err := yaml.Unmarshal([]byte(d), &v); err != nil {
			t.Fatalf("document does not parse: %v\n%s", err, d)
		}
		if v == nil {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, j)
	}
	return docs
}

// strict decodes JSON into a Kubernetes API type, failing on unknown
// fields (sigs.k8s.io/yaml's strict mode, as kubectl's validation).
func strict(t *testing.T, j []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(j, into); err != nil {
		t.Fatalf("%T: %v\n%s", into, err, j)
	}
}

// spec returns the spec of a Kubernetes object as JSON.
func spec(t *testing.T, j []byte) []byte {
	t.Helper()
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(j, &obj); err != nil {
		t.Fatal(err)
	}
	return obj.Spec
}

// envoyProto decodes JSON into an Envoy proto with protojson, which fails
// on unknown fields, and runs its ValidateAll.
func envoyProto[T interface {
	proto.Message
	ValidateAll() error
}](t *testing.T, j []byte, m T) T {
	t.Helper()
	if err := protojson.Unmarshal(j, m); err != nil {
		t.Fatalf("%T: %v\n%s", m, err, j)
	}
	if err := m.ValidateAll(); err != nil {
		t.Fatalf("%T: %v", m, err)
	}
	return m
}

// checkXDSCluster checks the cluster the recipes add for kvxds.
func checkXDSCluster(t *testing.T, j []byte) {
	t.Helper()
	c := envoyProto(t, j, new(clusterv3.Cluster))
	if c.GetName() != XDSClusterName || c.GetLoadAssignment().GetClusterName() != XDSClusterName {
		t.Errorf("kvxds cluster named %q", c.GetName())
	}
	if _, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
		t.Error("kvxds cluster without HTTP/2")
	}
}

// checkKVXDSSource checks that a patched mesh cluster takes its endpoints
// from kvxds under its own name.
func checkKVXDSSource(t *testing.T, c *clusterv3.Cluster, name string) {
	t.Helper()
	eds := c.GetEdsClusterConfig()
	api := eds.GetEdsConfig().GetApiConfigSource()
	if api == nil || eds.GetEdsConfig().GetAds() != nil {
		t.Fatalf("patched cluster's eds_config is not kvxds's: %v", eds)
	}
	if g := api.GetGrpcServices(); len(g) != 1 || g[0].GetEnvoyGrpc().GetClusterName() != XDSClusterName {
		t.Errorf("eds_config points at %v, want cluster %s", g, XDSClusterName)
	}
	if eds.GetServiceName() != name {
		t.Errorf("service_name %q, want %q", eds.GetServiceName(), name)
	}
}

func checkIstio(t *testing.T, out []byte, pool policy.Pool) {
	docs := documents(t, out)
	if len(docs) != 2 {
		t.Fatalf("%d documents, want 2", len(docs))
	}
	var ef clientnetv1alpha3.EnvoyFilter
	strict(t, docs[0], &ef)
	if ef.APIVersion != "networking.istio.io/v1alpha3" || ef.Kind != "EnvoyFilter" {
		t.Errorf("first document is %s %s", ef.APIVersion, ef.Kind)
	}
	var efSpec apinetv1alpha3.EnvoyFilter
	if err := protojson.Unmarshal(spec(t, docs[0]), &efSpec); err != nil {
		t.Fatalf("EnvoyFilter spec: %v", err)
	}
	patches := efSpec.GetConfigPatches()
	if len(patches) != 2 {
		t.Fatalf("%d config patches, want 2", len(patches))
	}
	add, merge := patches[0], patches[1]
	if add.GetApplyTo() != apinetv1alpha3.EnvoyFilter_CLUSTER || add.GetPatch().GetOperation() != apinetv1alpha3.EnvoyFilter_Patch_ADD {
		t.Errorf("first patch: %v %v, want an ADD of a CLUSTER", add.GetApplyTo(), add.GetPatch().GetOperation())
	}
	addJSON, err := protojson.Marshal(add.GetPatch().GetValue())
	if err != nil {
		t.Fatal(err)
	}
	checkXDSCluster(t, addJSON)

	name := pool.Mesh.ClusterName
	if merge.GetApplyTo() != apinetv1alpha3.EnvoyFilter_CLUSTER || merge.GetPatch().GetOperation() != apinetv1alpha3.EnvoyFilter_Patch_MERGE ||
		merge.GetMatch().GetCluster().GetName() != name {
		t.Errorf("second patch: %v %v of %q, want a MERGE into CLUSTER %q", merge.GetApplyTo(), merge.GetPatch().GetOperation(), merge.GetMatch().GetCluster().GetName(), name)
	}
	mergeJSON, err := protojson.Marshal(merge.GetPatch().GetValue())
	if err != nil {
		t.Fatal(err)
	}
	patch := new(clusterv3.Cluster)
	if err := protojson.Unmarshal(mergeJSON, patch); err != nil {
		t.Fatalf("MERGE value: %v", err)
	}
	// Istio merges the value into its cluster with proto.Merge: apply it
	// to the cluster Istio makes for a service (EDS over ADS, Maglev from
	// the DestinationRule, mTLS by transport socket match).
	istioCluster := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			ServiceName: name,
			EdsConfig: &corev3.ConfigSource{
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
				InitialFetchTimeout:   durationpb.New(0),
				ResourceApiVersion:    corev3.ApiVersion_V3,
			},
		},
		ConnectTimeout: durationpb.New(10e9),
		LbPolicy:       clusterv3.Cluster_MAGLEV,
		TransportSocketMatches: []*clusterv3.Cluster_TransportSocketMatch{
			{Name: "tlsMode-istio"}, {Name: "tlsMode-disabled"},
		},
	}
	proto.Merge(istioCluster, patch)
	if err := istioCluster.ValidateAll(); err != nil {
		t.Fatalf("merged cluster: %v", err)
	}
	checkKVXDSSource(t, istioCluster, name)
	if bf := pool.Hash.BalanceFactor; istioCluster.GetCommonLbConfig().GetConsistentHashingLbConfig().GetHashBalanceFactor().GetValue() != bf {
		t.Errorf("merged cluster's hash_balance_factor %v, want %d", istioCluster.GetCommonLbConfig(), bf)
	}
	if len(istioCluster.GetTransportSocketMatches()) != 2 {
		t.Error("the merge dropped Istio's transport socket matches")
	}

	var dr clientnetv1.DestinationRule
	strict(t, docs[1], &dr)
	if dr.APIVersion != "networking.istio.io/v1" || dr.Kind != "DestinationRule" {
		t.Errorf("second document is %s %s", dr.APIVersion, dr.Kind)
	}
	var drSpec apinetv1.DestinationRule
	if err := protojson.Unmarshal(spec(t, docs[1]), &drSpec); err != nil {
		t.Fatalf("DestinationRule spec: %v", err)
	}
	host, _, err := istioService(name)
	if err != nil {
		t.Fatal(err)
	}
	ch := drSpec.GetTrafficPolicy().GetLoadBalancer().GetConsistentHash()
	if drSpec.GetHost() != host || ch.GetHttpHeaderName() != pool.Hash.Keys[0].Header {
		t.Errorf("DestinationRule hashes %q on %q, want %q on %q", drSpec.GetHost(), ch.GetHttpHeaderName(), host, pool.Hash.Keys[0].Header)
	}
	switch pool.Hash.Algorithm {
	case fleet.Maglev:
		if ch.GetMaglev().GetTableSize() != pool.Hash.TableSize {
			t.Errorf("maglev table size %d, want %d", ch.GetMaglev().GetTableSize(), pool.Hash.TableSize)
		}
	case fleet.RingHash:
		if ch.GetRingHash() == nil || ch.GetRingHash().GetMinimumRingSize() != pool.Hash.MinRingSize {
			t.Errorf("ring hash %v, want minimum ring size %d", ch.GetRingHash(), pool.Hash.MinRingSize)
		}
	}
}

func checkEnvoyGateway(t *testing.T, out []byte, pool policy.Pool) {
	docs := documents(t, out)
	if len(docs) != 2 {
		t.Fatalf("%d documents, want 2", len(docs))
	}
	var epp egv1a1.EnvoyPatchPolicy
	strict(t, docs[0], &epp)
	if epp.APIVersion != "gateway.envoyproxy.io/v1alpha1" || epp.Kind != "EnvoyPatchPolicy" || epp.Spec.Type != egv1a1.JSONPatchEnvoyPatchType {
		t.Errorf("first document is %s %s of type %s", epp.APIVersion, epp.Kind, epp.Spec.Type)
	}
	if len(epp.Spec.JSONPatches) != 2 {
		t.Fatalf("%d JSON patches, want 2", len(epp.Spec.JSONPatches))
	}
	for _, p := range epp.Spec.JSONPatches {
		if p.Type != egv1a1.ClusterEnvoyResourceType {
			t.Errorf("patch of %s, want %s", p.Type, egv1a1.ClusterEnvoyResourceType)
		}
	}
	add, replace := epp.Spec.JSONPatches[0], epp.Spec.JSONPatches[1]
	if add.Operation.Op != "add" || add.Operation.Path == nil || *add.Operation.Path != "" || add.Operation.Value == nil {
		t.Fatalf("first patch %+v, want an add of a whole resource (empty path)", add.Operation)
	}
	// Envoy Gateway adds a resource by decoding the value with protojson
	// and validating it.
	checkXDSCluster(t, add.Operation.Value.Raw)

	name := pool.Mesh.ClusterName
	if replace.Name != name || replace.Operation.Value == nil || replace.Operation.Path == nil {
		t.Fatalf("second patch %+v, want one of %q", replace, name)
	}
	// It patches a resource by applying the JSON patch to the resource's
	// protojson, decoding and validating the result: do the same on the
	// cluster it makes for a route rule hashing with Maglev (the shape of
	// Envoy Gateway's own translator output).
	egYAML, err := yaml.YAMLToJSON([]byte(strings.ReplaceAll(egMaglevCluster, "NAME", name)))
	if err != nil {
		t.Fatal(err)
	}
	// Envoy Gateway patches the resource's JSON with proto field names.
	egJSON, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(envoyProto(t, egYAML, new(clusterv3.Cluster)))
	if err != nil {
		t.Fatal(err)
	}
	if !pointerExists(t, egJSON, *replace.Operation.Path) {
		t.Fatalf("replace of %s, which Envoy Gateway's cluster does not have", *replace.Operation.Path)
	}
	ops, err := json.Marshal([]any{map[string]any{"op": replace.Operation.Op, "path": *replace.Operation.Path, "value": json.RawMessage(replace.Operation.Value.Raw)}})
	if err != nil {
		t.Fatal(err)
	}
	jp, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := jp.Apply(egJSON)
	if err != nil {
		t.Fatalf("applying the patch: %v", err)
	}
	checkKVXDSSource(t, envoyProto(t, patched, new(clusterv3.Cluster)), name)

	var btp egv1a1.BackendTrafficPolicy
	strict(t, docs[1], &btp)
	if btp.APIVersion != "gateway.envoyproxy.io/v1alpha1" || btp.Kind != "BackendTrafficPolicy" {
		t.Errorf("second document is %s %s", btp.APIVersion, btp.Kind)
	}
	rt, err := gatewayRoute(name)
	if err != nil {
		t.Fatal(err)
	}
	if refs := btp.Spec.TargetRefs; len(refs) != 1 || string(refs[0].Kind) != rt.kind || string(refs[0].Name) != rt.name {
		t.Errorf("BackendTrafficPolicy targets %+v, want %s %s", refs, rt.kind, rt.name)
	}
	lb := btp.Spec.LoadBalancer
	if lb == nil || lb.Type != egv1a1.ConsistentHashLoadBalancerType || lb.ConsistentHash == nil ||
		lb.ConsistentHash.Type != egv1a1.HeaderConsistentHashType || lb.ConsistentHash.Header == nil ||
		lb.ConsistentHash.Header.Name != pool.Hash.Keys[0].Header ||
		lb.ConsistentHash.TableSize == nil || *lb.ConsistentHash.TableSize != pool.Hash.TableSize {
		t.Errorf("load balancer %+v, want Maglev (%d) on header %s", lb, pool.Hash.TableSize, pool.Hash.Keys[0].Header)
	}
}

// egMaglevCluster is a cluster as Envoy Gateway makes it for a route rule
// with consistent hashing.
const egMaglevCluster = `
circuitBreakers:
  thresholds:
  - maxRetries: 1024
commonLbConfig: {}
connectTimeout: 10s
dnsLookupFamily: V4_PREFERRED
edsClusterConfig:
  edsConfig:
    ads: {}
    resourceApiVersion: V3
  serviceName: NAME
ignoreHealthOnHostRemoval: true
loadBalancingPolicy:
  policies:
  - typedExtensionConfig:
      name: envoy.load_balancing_policies.maglev
      typedConfig:
        '@type': type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev
name: NAME
perConnectionBufferLimitBytes: 32768
type: EDS
`

func checkEnvoy(t *testing.T, out []byte, p *policy.Policy, pool policy.Pool) {
	docs := documents(t, out)
	if len(docs) != 2 {
		t.Fatalf("%d documents, want 2", len(docs))
	}
	b := envoyProto(t, docs[0], new(bootstrapv3.Bootstrap))
	clusters := b.GetStaticResources().GetClusters()
	if len(clusters) != 2 {
		t.Fatalf("%d clusters, want 2", len(clusters))
	}
	checkXDSCluster(t, mustJSON(t, clusters[0]))
	name := pool.Mesh.ClusterName
	c := clusters[1]
	if c.GetName() != name {
		t.Errorf("cluster %q, want %q", c.GetName(), name)
	}
	if c.GetEdsClusterConfig().GetEdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != XDSClusterName {
		t.Errorf("cluster takes its endpoints from %v", c.GetEdsClusterConfig())
	}
	// The same balancing as kvxds's own Envoy cluster of the pool.
	m, err := fleet.Prepare(reconcile.Join(p, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	r, err := translate.Translate(m, translate.Envoy)
	if err != nil {
		t.Fatal(err)
	}
	var own *clusterv3.Cluster
	for _, oc := range r.Clusters {
		if oc.GetName() == pool.Name {
			own = oc
		}
	}
	if own == nil || !proto.Equal(own.GetLoadBalancingPolicy(), c.GetLoadBalancingPolicy()) {
		t.Errorf("load_balancing_policy %v, want kvxds's own %v", c.GetLoadBalancingPolicy(), own.GetLoadBalancingPolicy())
	}

	var routeDoc struct {
		Route json.RawMessage `json:"route"`
	}
	if err := json.Unmarshal(docs[1], &routeDoc); err != nil {
		t.Fatal(err)
	}
	action := envoyProto(t, routeDoc.Route, new(routev3.RouteAction))
	if action.GetCluster() != name || len(action.GetHashPolicy()) == 0 {
		t.Errorf("route action %v", action)
	}
}

// pointerExists reports whether the JSON pointer path names a member of
// doc's objects.
func pointerExists(t *testing.T, doc []byte, path string) bool {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = obj[seg]; !ok {
			return false
		}
	}
	return true
}

func mustJSON(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestErrors(t *testing.T) {
	p := loadPolicy(t)
	for _, tt := range []struct {
		target Target
		opts   Options
		want   string
	}{
		{"linkerd", Options{Pool: "chat"}, "unknown target"},
		{Istio, Options{Pool: "nope"}, `no pool "nope"`},
		{Istio, Options{Pool: "plain"}, "has no mesh block"},
		{Istio, Options{Pool: "gateway"}, "not an Istio outbound cluster name"},
		{Istio, Options{Pool: "subset"}, "names subset"},
		{Istio, Options{Pool: "bodyfirst"}, "first hash key must be a header"},
		{EnvoyGateway, Options{Pool: "chat"}, "not an Envoy Gateway route cluster name"},
		{EnvoyGateway, Options{Pool: "ringgw"}, "Maglev only"},
		{Envoy, Options{Pool: "edge", XDSAddress: "kvxds"}, "xds address"},
		{Envoy, Options{Pool: "baseline"}, "balances with round_robin"},
	} {
		t.Run(fmt.Sprintf("%s/%s", tt.target, tt.opts.Pool), func(t *testing.T) {
			o := tt.opts
			o.Policy = p
			_, err := Render(tt.target, o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Render: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestExamples validates the recipes of the mesh examples as the golden
// ones (the cmd tests keep their files in sync with the command).
func TestExamples(t *testing.T) {
	for _, ex := range []struct {
		dir    string
		target Target
	}{
		{"istio", Istio},
		{"envoy-gateway", EnvoyGateway},
		{"envoy-mesh", Envoy},
	} {
		t.Run(ex.dir, func(t *testing.T) {
			p, diags := policy.Load(filepath.Join("..", "examples", ex.dir, "policy.hcl"))
			if diags.HasErrors() {
				t.Fatal(policy.Format(diags))
			}
			out, err := Render(ex.target, Options{Policy: p, Pool: "chat"})
			if err != nil {
				t.Fatal(err)
			}
			pool := poolOf(t, p, "chat")
			switch ex.target {
			case Istio:
				checkIstio(t, out, pool)
			case EnvoyGateway:
				checkEnvoyGateway(t, out, pool)
			case Envoy:
				checkEnvoy(t, out, p, pool)
			}
		})
	}
}
