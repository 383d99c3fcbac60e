package server

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/translate"
)

// DataPlanes returns the xDS clients connected now: the open streams of
// each node id from each address, merged (a client on the separate CDS,
// EDS, LDS and RDS services has one stream per type). Streams that have
// not named their node yet are left out; a client is forgotten when its
// last stream closes.
func (s *Server) DataPlanes() []status.DataPlane {
	return s.streams.dataPlanes()
}

func (t *streamTracker) dataPlanes() []status.DataPlane {
	t.mu.Lock()
	defer t.mu.Unlock()
	type key struct{ node, addr string }
	byKey := map[key]*status.DataPlane{}
	for _, st := range t.streams {
		if st.node == nil {
			continue
		}
		k := key{st.node.GetId(), st.peer}
		dp := byKey[k]
		if dp == nil {
			dp = &status.DataPlane{
				NodeID: st.node.GetId(), Cluster: st.node.GetCluster(), Kind: Classify(st.node).String(),
				Address: st.peer, Connected: st.opened,
			}
			if ua := strings.TrimSpace(st.node.GetUserAgentName() + " " + st.node.GetUserAgentVersion()); ua != "" {
				dp.UserAgent = ua
			}
			if c, bad := CannotHash(st.node); bad {
				dp.NoHash = c.Message() + " (" + c.Issue + ")"
			}
			byKey[k] = dp
		}
		dp.Streams++
		dp.Delta = dp.Delta || st.delta
		if st.opened.Before(dp.Connected) {
			dp.Connected = st.opened
		}
		for typ, v := range st.acked {
			if dp.ACKed == nil {
				dp.ACKed = map[string]string{}
			}
			dp.ACKed[shortType(typ)] = v
		}
		if n := st.lastNACK; n != nil && (dp.LastNACK == nil || n.Time.After(dp.LastNACK.Time)) {
			c := *n
			dp.LastNACK = &c
		}
	}
	out := make([]status.DataPlane, 0, len(byKey))
	for _, dp := range byKey {
		out = append(out, *dp)
	}
	slices.SortFunc(out, func(a, b status.DataPlane) int {
		return cmp.Or(cmp.Compare(a.NodeID, b.NodeID), cmp.Compare(a.Address, b.Address))
	})
	return out
}

// Served returns the per-type versions served to each kind of client, by
// kind (envoy, grpc, grpc-js) then short type (cds, eds, lds, rds); nil
// before the first Update.
func (s *Server) Served() map[string]map[string]string {
	var out map[string]map[string]string
	for _, kind := range translate.Kinds {
		vs := s.Versions(kind)
		if len(vs) == 0 {
			continue
		}
		if out == nil {
			out = map[string]map[string]string{}
		}
		m := make(map[string]string, len(vs))
		for _, typ := range slices.Sorted(maps.Keys(vs)) {
			m[shortType(typ)] = vs[typ]
		}
		out[kind.String()] = m
	}
	return out
}
