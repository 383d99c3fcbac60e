package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// Version returns a deterministic content hash of items, as 16 hex digits:
// a SHA-256 over the SHA-256 digests of each item's deterministic
// marshalling (proto.MarshalOptions{Deterministic: true}), in order. Equal
// lists give equal versions, across processes and restarts; the empty list
// has a fixed version. Items that cannot be marshalled (Translate's output
// always can) are hashed by their error, so Version never panics and stays
// deterministic. Snapshot's per-type versions are Version of each type's
// items.
func Version[T proto.Message](items []T) string {
	digests := make([][sha256.Size]byte, len(items))
	var buf []byte
	for i, m := range items {
		var err error
		buf, err = marshalOpts.MarshalAppend(buf[:0], m)
		if err != nil {
			buf = append(buf[:0], "error: "+err.Error()...)
		}
		digests[i] = sha256.Sum256(buf)
	}
	return combine(digests)
}

var marshalOpts = proto.MarshalOptions{Deterministic: true}

func combine(digests [][sha256.Size]byte) string {
	h := sha256.New()
	for i := range digests {
		h.Write(digests[i][:])
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:8])
}

// Snapshot builds a go-control-plane snapshot of r in which every resource
// type carries its own version, Version of its items: a change confined to
// endpoints changes only the EDS version, so clients are not sent
// listeners, routes or clusters again.
//
// The snapshot's VersionMap (per-resource hashes, for delta xDS) is filled
// in exactly as cache.Snapshot.ConstructVersionMap would, from the same
// single deterministic marshalling that gives the type versions; for
// endpoint assignments and route configurations that marshalling is also
// what the cache sends (see preEncoded), once per version, not once per
// client.
//
// Snapshot checks that references resolve (listener → route → cluster →
// endpoints); cache.Snapshot.Consistent cannot, since it does not follow
// the routes of gRPC API listeners.
func (r *Resources) Snapshot() (*cache.Snapshot, error) {
	if r == nil {
		return nil, errors.New("translate: snapshot of nil resources")
	}
	if err := r.checkReferences(); err != nil {
		return nil, fmt.Errorf("translate: snapshot: %w", err)
	}
	s := &cache.Snapshot{VersionMap: make(map[string]map[string]string, int(types.UnknownType))}
	for i := range types.UnknownType {
		url, err := cache.GetResponseTypeURL(i)
		if err != nil {
			return nil, fmt.Errorf("translate: snapshot: %w", err)
		}
		s.VersionMap[url] = map[string]string{}
	}
	lists := [...]struct {
		t     types.ResponseType
		url   string
		build func() (*typeEntry, error)
	}{
		{types.Listener, resource.ListenerType, func() (*typeEntry, error) { return encodeType(r.Listeners) }},
		{types.Route, resource.RouteType, func() (*typeEntry, error) { return encodeType(r.Routes) }},
		{types.Cluster, resource.ClusterType, func() (*typeEntry, error) { return encodeType(r.Clusters) }},
		{types.Endpoint, resource.EndpointType, func() (*typeEntry, error) { return encodeType(r.Endpoints) }},
	}
	for _, l := range lists {
		c := r.memo.cell(l.t)
		c.once.Do(func() { c.entry, c.err = l.build() })
		if c.err != nil {
			return nil, fmt.Errorf("translate: snapshot: %s: %w", l.url, c.err)
		}
		s.Resources[l.t] = c.entry.resources
		s.VersionMap[l.url] = c.entry.versions
	}
	// A no-op now that VersionMap is filled, kept so that a future
	// go-control-plane needing more than VersionMap still gets it.
	if err := s.ConstructVersionMap(); err != nil {
		return nil, fmt.Errorf("translate: snapshot: %w", err)
	}
	return s, nil
}

// typeMemo holds the typeEntries of a Resources, each built at most once
// and shared with the copies that hold the same resources.
type typeMemo struct {
	mu    sync.Mutex
	cells [types.UnknownType]*lazyType
}

type lazyType struct {
	once  sync.Once
	entry *typeEntry
	err   error
}

func (m *typeMemo) cell(t types.ResponseType) *lazyType {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cells[t] == nil {
		m.cells[t] = &lazyType{}
	}
	return m.cells[t]
}

// typeEntry is one resource type, ready for a snapshot. It is shared by
// every snapshot that holds the same resources and must not be modified.
type typeEntry struct {
	resources cache.Resources
	versions  map[string]string // resource name → hash, for delta xDS
}

// encodeType marshals each item once, in parallel, to build its
// cache.Resources (versioned with Version(items)) and its per-resource
// hashes, as cache.Snapshot.ConstructVersionMap computes them.
func encodeType[T types.Resource](items []T) (*typeEntry, error) {
	digests := make([][sha256.Size]byte, len(items))
	encoded := make([]proto.Message, len(items))
	err := parallel(len(items), func(i int) error {
		opts := marshalOpts
		if singleEntryMaps(items[i]) {
			// Same bytes (maps of one entry have one order), without
			// sorting every map's keys: this is the hot path of endpoint
			// updates.
			opts.Deterministic = false
		}
		b, err := opts.Marshal(items[i])
		if err != nil {
			return err
		}
		// cache.HashResource is the hex of this digest.
		digests[i] = sha256.Sum256(b)
		encoded[i] = items[i]
		switch any(items[i]).(type) {
		case *endpointv3.ClusterLoadAssignment, *routev3.RouteConfiguration:
			encoded[i], err = preEncoded(items[i], b)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	res := make([]types.Resource, len(items))
	vm := make(map[string]string, len(items))
	for i, m := range items {
		vm[cache.GetResourceName(m)] = hex.EncodeToString(digests[i][:])
		res[i] = encoded[i]
	}
	return &typeEntry{resources: cache.NewResources(combine(digests), res), versions: vm}, nil
}

// preEncoded returns a message of m's type that marshals to exactly b, m's
// deterministic encoding, at the cost of a copy: its name (field 1 of
// every xDS resource type, which the cache reads) is set, and every other
// field is kept as encoded bytes.
//
// The snapshot cache encodes a resource again for every response it
// sends, so a version pushed to N streams was encoded N times; with this,
// it is encoded once, when the snapshot is built, and the cache's encoding
// per stream is a copy. Endpoint assignments, which every weight, health
// and membership change pushes to every client, and route
// configurations, which a pool that bounds prompt bytes pushes to its
// Envoys at every load interval with its pick table, are held this way.
// Listeners and clusters are not: go-control-plane's consistency check
// reads the references inside them (it reads none in routes), and
// Resources keeps the decoded ones.
func preEncoded(m proto.Message, b []byte) (proto.Message, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil, fmt.Errorf("%T does not start with its name", m)
	}
	name, k := protowire.ConsumeBytes(b[n:])
	if k < 0 {
		return nil, fmt.Errorf("%T: malformed name", m)
	}
	shell := m.ProtoReflect().New()
	fd := shell.Descriptor().Fields().ByNumber(1)
	if fd == nil || fd.Kind() != protoreflect.StringKind {
		return nil, fmt.Errorf("%T: field 1 is not a name", m)
	}
	shell.Set(fd, protoreflect.ValueOfString(string(name)))
	shell.SetUnknown(b[n+k:])
	return shell.Interface(), nil
}

// singleEntryMaps reports whether m is a ClusterLoadAssignment whose maps
// (endpoint and locality metadata, and the Structs in it) all have at most
// one entry, as buildEndpoints makes them; for anything else it reports
// false.
func singleEntryMaps(m proto.Message) bool {
	cla, ok := m.(*endpointv3.ClusterLoadAssignment)
	if !ok {
		return false
	}
	for _, lle := range cla.GetEndpoints() {
		if !singleEntryMetadata(lle.GetMetadata()) {
			return false
		}
		for _, ep := range lle.GetLbEndpoints() {
			if !singleEntryMetadata(ep.GetMetadata()) {
				return false
			}
		}
	}
	return true
}

func singleEntryMetadata(md *corev3.Metadata) bool {
	if md == nil {
		return true
	}
	if len(md.GetFilterMetadata()) > 1 || len(md.GetTypedFilterMetadata()) > 0 {
		return false
	}
	for _, st := range md.GetFilterMetadata() {
		if len(st.GetFields()) > 1 {
			return false
		}
		for _, v := range st.GetFields() {
			switch v.GetKind().(type) {
			case *structpb.Value_StructValue, *structpb.Value_ListValue:
				return false
			}
		}
	}
	return true
}

// checkReferences reports names that are duplicated or that reference
// nothing: every listener's route configuration, every route's cluster and
// every cluster's load assignment must exist.
func (r *Resources) checkReferences() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	routes := map[string]bool{}
	for _, rc := range r.Routes {
		if routes[rc.GetName()] {
			bad("duplicate route configuration %q", rc.GetName())
		}
		routes[rc.GetName()] = true
	}
	clusters := map[string]bool{}
	for _, c := range r.Clusters {
		if clusters[c.GetName()] {
			bad("duplicate cluster %q", c.GetName())
		}
		clusters[c.GetName()] = true
	}
	clas := map[string]bool{}
	for _, cla := range r.Endpoints {
		if clas[cla.GetClusterName()] {
			bad("duplicate cluster load assignment %q", cla.GetClusterName())
		}
		clas[cla.GetClusterName()] = true
	}
	listeners := map[string]bool{}
	for _, l := range r.Listeners {
		if listeners[l.GetName()] {
			bad("duplicate listener %q", l.GetName())
		}
		listeners[l.GetName()] = true
		names, err := listenerRoutes(l)
		if err != nil {
			bad("listener %q: %v", l.GetName(), err)
		}
		for _, n := range names {
			if !routes[n] {
				bad("listener %q: route configuration %q does not exist", l.GetName(), n)
			}
		}
	}
	for _, rc := range r.Routes {
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				a := rt.GetRoute()
				if a == nil {
					continue
				}
				var names []string
				if c := a.GetCluster(); c != "" {
					names = append(names, c)
				}
				for _, wc := range a.GetWeightedClusters().GetClusters() {
					names = append(names, wc.GetName())
				}
				for _, n := range names {
					if !clusters[n] {
						bad("route configuration %q: cluster %q does not exist", rc.GetName(), n)
					}
				}
			}
		}
	}
	used := map[string]bool{}
	for _, c := range r.Clusters {
		n := c.GetName()
		if sn := c.GetEdsClusterConfig().GetServiceName(); sn != "" {
			n = sn
		}
		used[n] = true
		if !clas[n] {
			bad("cluster %q: cluster load assignment %q does not exist", c.GetName(), n)
		}
	}
	// An unused CLA means endpoints and clusters come from different
	// fleets (e.g. Retranslate after a pool was added), unless another
	// control plane's cluster uses it (fleet.Mesh).
	for _, cla := range r.Endpoints {
		if !used[cla.GetClusterName()] && !slices.Contains(r.mesh, cla.GetClusterName()) {
			bad("cluster load assignment %q: no such cluster", cla.GetClusterName())
		}
	}
	return errors.Join(errs...)
}

// listenerRoutes returns the RDS route configuration names of l, from its
// API listener (gRPC) or its HTTP connection managers (Envoy).
func listenerRoutes(l *listenerv3.Listener) ([]string, error) {
	var names []string
	add := func(a interface {
		UnmarshalTo(proto.Message) error
	}) error {
		hcm := new(hcmv3.HttpConnectionManager)
		if err := a.UnmarshalTo(hcm); err != nil {
			return err
		}
		if n := hcm.GetRds().GetRouteConfigName(); n != "" {
			names = append(names, n)
		}
		return nil
	}
	if a := l.GetApiListener().GetApiListener(); a != nil {
		if err := add(a); err != nil {
			return nil, err
		}
	}
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			if f.GetName() != wellknown.HTTPConnectionManager || f.GetTypedConfig() == nil {
				continue
			}
			if err := add(f.GetTypedConfig()); err != nil {
				return nil, err
			}
		}
	}
	return names, nil
}
