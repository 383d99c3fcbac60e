package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/peer"

	"github.com/kvxds/kvxds/status"
	"github.com/kvxds/kvxds/xds/translate"
)

// streamTracker implements go-control-plane's server callbacks: it counts
// streams, detects and contains NACKs, and remembers each open stream's
// node, peer and acknowledged versions for the status (see DataPlanes).
//
// go-control-plane has no NACK hook, and its snapshot cache answers a NACK
// (a request that still carries the previously accepted version) by
// sending the rejected version straight back, which a client rejects
// again, in a tight loop. The tracker remembers the version last sent on
// each stream for each type; when a request rejects it, the request is
// rewritten to claim that version before the cache sees it, so the cache
// holds the watch open until a different version exists.
//
// Envoy replaces a cluster whose Cluster changed and keeps the new one
// warming until an assignment arrives after it. On a state-of-the-world
// stream the new cluster asks for the assignments again, with the version
// and nonce Envoy already holds and before it ACKs the Cluster (it holds
// that ACK while any cluster warms), and the cache answers such a request
// with nothing. The cache sends a push's Cluster and assignment in no
// fixed order, and a policy edit changes the Cluster alone, so after a
// Cluster response the tracker has the cache answer that request in full
// again (see OnStreamRequest). A delta stream asks for nothing: see
// assignmentsAfter.
type streamTracker struct {
	log hclog.Logger
	m   *metrics
	now func() time.Time

	mu      sync.Mutex
	streams map[int64]*streamState
	// warned are the nodes already logged as unable to hash.
	warned map[string]bool
}

type streamState struct {
	node     *core.Node
	noHash   string            // the known crash of its client, counted in the metric
	lastSent map[string]string // type URL → version last sent
	// clusterAfterEndpoints: a Cluster response went out after the last
	// assignment response, so a warming Envoy cluster may wait for one.
	// edsNonce is the last assignment response's nonce, and edsNonceUsed
	// says a request named it already: the first to name it is its ACK
	// (or NACK), which may cross a Cluster response on the wire; a
	// replaced cluster's request names it again.
	clusterAfterEndpoints bool
	edsNonce              string
	edsNonceUsed          bool

	// For the status.
	peer     string
	opened   time.Time
	delta    bool
	acked    map[string]string    // type URL → version last accepted
	sentLast map[string]deltaSent // delta: type URL → last response
	lastNACK *status.NACK

	// Delta: the assignments the client holds, and how many kvxds sent
	// again after a Cluster (see assignmentsAfter).
	edsHeld map[string]bool
	resends int
}

// deltaSent is a delta response, whose ACK names only its nonce.
type deltaSent struct{ nonce, version string }

func newStreamTracker(log hclog.Logger, m *metrics, now func() time.Time) *streamTracker {
	return &streamTracker{log: log, m: m, now: now, streams: map[int64]*streamState{}, warned: map[string]bool{}}
}

func (t *streamTracker) open(ctx context.Context, id int64, delta bool) {
	st := &streamState{lastSent: map[string]string{}, opened: t.now(), delta: delta, acked: map[string]string{}}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		st.peer = p.Addr.String()
	}
	if delta {
		st.sentLast = map[string]deltaSent{}
		st.edsHeld = map[string]bool{}
	}
	t.mu.Lock()
	t.streams[id] = st
	t.mu.Unlock()
	t.m.streams.Inc()
}

func (t *streamTracker) closed(id int64, node *core.Node) {
	t.mu.Lock()
	if st := t.streams[id]; st != nil && st.noHash != "" {
		t.m.noHash.WithLabelValues(st.noHash).Dec()
	}
	delete(t.streams, id)
	t.mu.Unlock()
	t.m.streams.Dec()
	t.log.Debug("stream closed", "stream", id, "node", node.GetId())
}

func (t *streamTracker) nack(id int64, node *core.Node, typeURL, version, nonce, detail string) {
	t.mu.Lock()
	if st := t.streams[id]; st != nil {
		st.lastNACK = &status.NACK{Type: shortType(typeURL), Version: version, Message: detail, Time: t.now()}
	}
	t.mu.Unlock()
	clients := Classify(node).String()
	t.m.nacks.WithLabelValues(clients, shortType(typeURL)).Inc()
	t.log.Warn("client rejected configuration; not re-sending it until it changes",
		"node", node.GetId(), "clients", clients, "type", shortType(typeURL),
		"version", version, "nonce", nonce, "error", detail)
}

// setNode records the node a stream names; a client version that cannot
// hash is counted while its stream is open and logged once per node.
// Called with t.mu held.
func (t *streamTracker) setNode(st *streamState, n *core.Node) {
	if n == nil {
		return
	}
	st.node = n
	c, bad := CannotHash(n)
	if !bad || st.noHash != "" {
		return
	}
	st.noHash = c.Client
	t.m.noHash.WithLabelValues(c.Client).Inc()
	if !t.warned[n.GetId()] {
		t.warned[n.GetId()] = true
		t.log.Warn(fmt.Sprintf("node %s: %s", n.GetId(), c.Message()),
			"user_agent", n.GetUserAgentName()+" "+n.GetUserAgentVersion(), "issue", c.Issue,
			"served", "round robin or least request instead of ring hash: no session affinity")
	}
}

func (t *streamTracker) OnStreamOpen(ctx context.Context, id int64, typeURL string) error {
	t.open(ctx, id, false)
	t.log.Debug("stream opened", "stream", id, "type", typeURL)
	return nil
}

func (t *streamTracker) OnStreamClosed(id int64, node *core.Node) { t.closed(id, node) }

func (t *streamTracker) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	t.mu.Lock()
	st := t.streams[id]
	if st == nil {
		t.mu.Unlock()
		return nil
	}
	t.setNode(st, req.GetNode())
	node := st.node
	rejected := ""
	if req.GetErrorDetail() == nil && req.GetVersionInfo() != "" {
		// An ACK, or a reconnecting client naming what it runs.
		st.acked[req.GetTypeUrl()] = req.GetVersionInfo()
	}
	if req.GetTypeUrl() == resourcev3.EndpointType && req.GetResponseNonce() != "" && req.GetResponseNonce() == st.edsNonce {
		again := st.edsNonceUsed
		st.edsNonceUsed = true
		if again && req.GetErrorDetail() == nil && st.clusterAfterEndpoints &&
			req.GetVersionInfo() != "" && req.GetVersionInfo() == st.lastSent[req.GetTypeUrl()] && Classify(node) == translate.Envoy {
			// Envoy's request for the assignments of a cluster it replaced
			// after receiving them: claim none, so the cache sends them again.
			req.VersionInfo = ""
			st.clusterAfterEndpoints = false
		}
	}
	if req.GetErrorDetail() != nil {
		rejected = st.lastSent[req.GetTypeUrl()]
		if rejected != "" {
			// The cache only answers a request whose version differs
			// from the snapshot's: claim the rejected one.
			req.VersionInfo = rejected
		}
	}
	t.mu.Unlock()
	if req.GetErrorDetail() != nil {
		t.nack(id, node, req.GetTypeUrl(), rejected, req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
	}
	return nil
}

func (t *streamTracker) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.streams[id]; st != nil {
		st.lastSent[resp.GetTypeUrl()] = resp.GetVersionInfo()
		switch resp.GetTypeUrl() {
		case resourcev3.ClusterType:
			st.clusterAfterEndpoints = st.lastSent[resourcev3.EndpointType] != ""
		case resourcev3.EndpointType:
			st.clusterAfterEndpoints = false
			st.edsNonce, st.edsNonceUsed = resp.GetNonce(), false
		}
	}
}

func (t *streamTracker) OnDeltaStreamOpen(ctx context.Context, id int64, typeURL string) error {
	if p, ok := ctx.Value(deltaStreamKey{}).(*int64); ok {
		*p = id
	}
	t.open(ctx, id, true)
	t.log.Debug("delta stream opened", "stream", id, "type", typeURL)
	return nil
}

func (t *streamTracker) OnDeltaStreamClosed(id int64, node *core.Node) { t.closed(id, node) }

// OnStreamDeltaRequest reports NACKs (the delta cache compares
// per-resource versions with what it already sent, so it does not re-send
// a rejected resource by itself) and follows the assignments a client
// holds.
func (t *streamTracker) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	t.mu.Lock()
	st := t.streams[id]
	if st != nil {
		t.setNode(st, req.GetNode())
	}
	var node *core.Node
	rejected := ""
	if st != nil {
		node = st.node
		if req.GetTypeUrl() == resourcev3.EndpointType {
			// A reconnecting Envoy names what it holds, which the cache
			// does not send again.
			for n := range req.GetInitialResourceVersions() {
				st.edsHeld[n] = true
			}
			for _, n := range req.GetResourceNamesUnsubscribe() {
				delete(st.edsHeld, n)
			}
		}
		// A delta ACK or NACK names the response by its nonce.
		if sent, ok := st.sentLast[req.GetTypeUrl()]; ok && req.GetResponseNonce() != "" && sent.nonce == req.GetResponseNonce() {
			if req.GetErrorDetail() == nil {
				st.acked[req.GetTypeUrl()] = sent.version
			} else {
				rejected = sent.version
			}
		}
	}
	t.mu.Unlock()
	if req.GetErrorDetail() != nil {
		t.nack(id, node, req.GetTypeUrl(), rejected, req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
	}
	return nil
}

func (t *streamTracker) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.streams[id]; st != nil && st.sentLast != nil {
		st.sentLast[resp.GetTypeUrl()] = deltaSent{nonce: resp.GetNonce(), version: resp.GetSystemVersionInfo()}
		if resp.GetTypeUrl() == resourcev3.EndpointType {
			for _, r := range resp.GetResources() {
				st.edsHeld[r.GetName()] = true
			}
			for _, n := range resp.GetRemovedResources() {
				delete(st.edsHeld, n)
			}
		}
	}
}

func (t *streamTracker) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error {
	return nil
}

func (t *streamTracker) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}
