package recipe

import (
	"fmt"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/kvxds/kvxds/fleet"
)

// Resource type URLs of Envoy Gateway's JSON patches.
const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// objectName is the name of the Kubernetes objects of a pool's recipe.
func (r *recipe) objectName() string {
	return "kvxds-" + strings.ToLower(strings.ReplaceAll(r.pool.Name, "_", "-"))
}

func (r *recipe) metadata() map[string]any {
	md := map[string]any{"name": r.objectName()}
	if r.ns != "" {
		md["namespace"] = r.ns
	}
	return md
}

// notes are the comments every recipe starts with.
func (r *recipe) notes(target string, dropped []string) []string {
	n := []string{
		fmt.Sprintf("kvxds recipe for %s: pool %q serves the endpoints of cluster %q", target, r.pool.Name, r.cluster),
		fmt.Sprintf("(EDS only) from kvxds at %s:%d; every other resource stays as configured.", r.host, r.port),
	}
	if len(dropped) > 0 {
		n = append(n, fmt.Sprintf("The mesh hashes on the pool's first key only; not carried over: %s.", strings.Join(dropped, ", ")))
	}
	if r.pool.Hash.BalanceOn == fleet.BalanceOnPromptBytes && r.pool.Hash.BalanceFactor > 0 {
		n = append(n, "The mesh's Envoys bound requests in flight (hash_balance_factor), not prompt bytes: that bound needs kvxds's own listener.")
	}
	return n
}

func (r *recipe) istio() ([]byte, error) {
	host, _, err := istioService(r.cluster)
	if err != nil {
		return nil, err
	}
	header, dropped, err := r.hashHeader()
	if err != nil {
		return nil, err
	}
	xdsV, eds, err := r.source()
	if err != nil {
		return nil, err
	}
	// A MERGE is a proto merge into Istio's cluster: the ADS source
	// Istio set is replaced by kvxds's (one member of a oneof), the rest
	// of Istio's cluster (mTLS transport sockets, circuit breakers,
	// outlier detection) stays.
	merge := &clusterv3.Cluster{Name: r.cluster, EdsClusterConfig: eds}
	if bf := r.balanceFactor(); bf != nil {
		merge.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{
			ConsistentHashingLbConfig: &clusterv3.Cluster_CommonLbConfig_ConsistentHashingLbConfig{HashBalanceFactor: bf},
		}
	}
	h := r.pool.Hash
	if err := merge.ValidateAll(); err != nil {
		return nil, fmt.Errorf("recipe: cluster patch: %w", err)
	}
	mergeV, err := protoValue(merge)
	if err != nil {
		return nil, err
	}
	filter := map[string]any{
		"apiVersion": "networking.istio.io/v1alpha3",
		"kind":       "EnvoyFilter",
		"metadata":   r.metadata(),
		"spec": map[string]any{
			"configPatches": []any{
				map[string]any{
					"applyTo": "CLUSTER",
					"match":   map[string]any{"context": "ANY"},
					"patch":   map[string]any{"operation": "ADD", "value": xdsV},
				},
				map[string]any{
					"applyTo": "CLUSTER",
					"match":   map[string]any{"context": "ANY", "cluster": map[string]any{"name": r.cluster}},
					"patch":   map[string]any{"operation": "MERGE", "value": mergeV},
				},
			},
		},
	}
	ch := map[string]any{"httpHeaderName": header}
	if h.Algorithm == fleet.Maglev {
		ch["maglev"] = map[string]any{"tableSize": h.TableSize}
	} else {
		rh := map[string]any{}
		if h.MinRingSize != 0 {
			rh["minimumRingSize"] = h.MinRingSize
		}
		ch["ringHash"] = rh
	}
	rule := map[string]any{
		"apiVersion": "networking.istio.io/v1",
		"kind":       "DestinationRule",
		"metadata":   r.metadata(),
		"spec": map[string]any{
			"host": host,
			"trafficPolicy": map[string]any{
				"loadBalancer": map[string]any{"consistentHash": ch},
			},
		},
	}
	notes := r.notes("Istio", dropped)
	if h.Algorithm == fleet.RingHash && h.MaxRingSize != 0 {
		notes = append(notes, fmt.Sprintf("A DestinationRule has no maximum ring size: the pool's max_ring_size %d is not carried over.", h.MaxRingSize))
	}
	mtls := "Istio's tlsMode metadata, so mTLS stays on"
	if !r.pool.Mesh.IstioMTLS {
		mtls = "no tlsMode metadata: set istio_mtls = true in the mesh block to keep mTLS"
	}
	filterNotes := []string{
		"Adds a cluster for kvxds to every proxy in scope, and makes the service's cluster",
		fmt.Sprintf("take its endpoints from kvxds (%s).", mtls),
	}
	if h.BalanceFactor != 0 {
		filterNotes = append(filterNotes, fmt.Sprintf("The merge also bounds each replica's load (hash_balance_factor %d, the pool's balance_factor).", h.BalanceFactor))
	}
	return write(notes, []doc{
		{comments: filterNotes, value: filter},
		{comments: []string{
			"Consistent hashing on the pool's session header, as kvxds's own Envoy clusters do.",
		}, value: rule},
	})
}

func (r *recipe) envoyGateway(gateway string) ([]byte, error) {
	rt, err := gatewayRoute(r.cluster)
	if err != nil {
		return nil, err
	}
	header, dropped, err := r.hashHeader()
	if err != nil {
		return nil, err
	}
	h := r.pool.Hash
	if h.Algorithm != fleet.Maglev {
		return nil, fmt.Errorf("recipe: pool %q hashes with %s; Envoy Gateway's consistent hashing is Maglev only, so give the pool algorithm = %q", r.pool.Name, h.Algorithm, fleet.Maglev)
	}
	xdsV, eds, err := r.source()
	if err != nil {
		return nil, err
	}
	edsV, err := protoValue(eds)
	if err != nil {
		return nil, err
	}
	patch := map[string]any{
		"apiVersion": "gateway.envoyproxy.io/v1alpha1",
		"kind":       "EnvoyPatchPolicy",
		"metadata":   r.metadata(),
		"spec": map[string]any{
			"targetRef": map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway},
			"type":      "JSONPatch",
			"jsonPatches": []any{
				map[string]any{
					"type": clusterType, "name": XDSClusterName,
					"operation": map[string]any{"op": "add", "path": "", "value": xdsV},
				},
				map[string]any{
					"type": clusterType, "name": r.cluster,
					"operation": map[string]any{"op": "replace", "path": "/eds_cluster_config", "value": edsV},
				},
			},
		},
	}
	btp := map[string]any{
		"apiVersion": "gateway.envoyproxy.io/v1alpha1",
		"kind":       "BackendTrafficPolicy",
		"metadata":   r.metadata(),
		"spec": map[string]any{
			"targetRefs": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": rt.kind, "name": rt.name}},
			"loadBalancer": map[string]any{
				"type": "ConsistentHash",
				"consistentHash": map[string]any{
					"type":      "Header",
					"header":    map[string]any{"name": header},
					"tableSize": h.TableSize,
				},
			},
		},
	}
	notes := r.notes("Envoy Gateway", dropped)
	if h.BalanceFactor != 0 {
		notes = append(notes, fmt.Sprintf("Envoy Gateway has no bounded load: the pool's balance_factor %d is not carried over.", h.BalanceFactor))
	}
	if r.ns != rt.namespace {
		notes = append(notes, fmt.Sprintf("The BackendTrafficPolicy must live in the namespace of %s %s (%s).", rt.kind, rt.name, rt.namespace))
	}
	return write(notes, []doc{
		{comments: []string{
			fmt.Sprintf("Needs extensionApis.enableEnvoyPatchPolicy in Envoy Gateway's configuration; Gateway %q.", gateway),
			"Adds a cluster for kvxds and makes the route's cluster take its endpoints from kvxds.",
		}, value: patch},
		{comments: []string{
			"Consistent hashing (Maglev) on the pool's session header.",
		}, value: btp},
	})
}

func (r *recipe) envoy() ([]byte, error) {
	xds, err := r.xdsCluster()
	if err != nil {
		return nil, err
	}
	eds, err := edsSource()
	if err != nil {
		return nil, err
	}
	c, err := translateMeshCluster(r, eds)
	if err != nil {
		return nil, err
	}
	hp, err := translateHashPolicy(r)
	if err != nil {
		return nil, err
	}
	static := &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xds, c}}
	if err := static.ValidateAll(); err != nil {
		return nil, fmt.Errorf("recipe: clusters: %w", err)
	}
	staticV, err := protoValue(static)
	if err != nil {
		return nil, err
	}
	action := &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: r.cluster},
		HashPolicy:       hp,
	}
	if err := action.ValidateAll(); err != nil {
		return nil, fmt.Errorf("recipe: route: %w", err)
	}
	actionV, err := protoValue(action)
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, k := range r.pool.Hash.Keys {
		if k.Body() {
			dropped = append(dropped, describeKey(k))
		}
	}
	notes := r.notes("Envoy", nil)
	if len(dropped) > 0 {
		notes = append(notes, fmt.Sprintf("Body keys need kvxds's own listener and are not carried over: %s.", strings.Join(dropped, ", ")))
	}
	return write(notes, []doc{
		{comments: []string{
			"Bootstrap static_resources: the cluster of kvxds, and the pool's cluster, which takes",
			"its endpoints from kvxds and balances as kvxds's own Envoy cluster of the pool.",
		}, value: map[string]any{"static_resources": staticV}},
		{comments: []string{
			"The route action of the routes to the pool (keys tried in order, the first present wins).",
		}, value: map[string]any{"route": actionV}},
	})
}
