package adsload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
)

// Options configure a Load.
type Options struct {
	// Target is the server's xDS address, host:port.
	Target string
	// Streams is the number of ADS streams, one node id each.
	Streams int
	// Delta uses the incremental protocol instead of state of the world.
	Delta bool
	// Conns is the number of gRPC connections the streams share; 0 gives
	// every stream its own connection, as every Envoy has its own.
	Conns int
	// Concurrency bounds the streams being opened at once; default 64.
	Concurrency int
	// NodePrefix names the nodes "<NodePrefix>-<i>"; default "envoy".
	NodePrefix string
	// Cluster is every node's cluster; default "adsload".
	Cluster string
	// NACK rejects every EDS response instead of acknowledging it.
	NACK bool
}

// Receipt is one response received on a stream.
type Receipt struct {
	Version string
	At      time.Time // monotonic, this process
}

// Load is a set of ADS streams.
type Load struct {
	opts    Options
	conns   []*grpc.ClientConn
	streams []*stream
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	// received counts EDS responses over every stream.
	received atomic.Int64
}

// stream is one node's ADS stream.
type stream struct {
	node *core.Node

	mu  sync.Mutex
	eds []Receipt // every EDS response, in order
	cds []Receipt
	err error // why the stream ended
}

// Start opens the streams and returns once every stream has been opened
// and has received its first ClusterLoadAssignment, or ctx is done, or a
// stream failed. The streams run until Close.
func Start(ctx context.Context, opts Options) (*Load, error) {
	if opts.Streams <= 0 {
		return nil, errors.New("adsload: Streams must be positive")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 64
	}
	if opts.NodePrefix == "" {
		opts.NodePrefix = "envoy"
	}
	if opts.Cluster == "" {
		opts.Cluster = "adsload"
	}
	runCtx, cancel := context.WithCancel(context.Background())
	l := &Load{opts: opts, cancel: cancel}
	nconns := opts.Conns
	if nconns <= 0 || nconns > opts.Streams {
		nconns = opts.Streams
	}
	for range nconns {
		cc, err := grpc.NewClient("passthrough:///"+opts.Target,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
		)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("adsload: dialing %s: %w", opts.Target, err)
		}
		l.conns = append(l.conns, cc)
	}
	l.streams = make([]*stream, opts.Streams)
	for i := range l.streams {
		l.streams[i] = &stream{node: &core.Node{
			Id:            fmt.Sprintf("%s-%d", opts.NodePrefix, i),
			Cluster:       opts.Cluster,
			UserAgentName: "envoy",
		}}
	}

	// Open with bounded concurrency: each opener waits for its stream's
	// first assignment before it takes the next stream.
	openCtx, stop := context.WithCancel(ctx)
	defer stop()
	sem := make(chan struct{}, opts.Concurrency)
	var openErr error
	var once sync.Once
	fail := func(err error) {
		once.Do(func() { openErr = err })
		stop()
	}
	var opening sync.WaitGroup
	for i, s := range l.streams {
		select {
		case sem <- struct{}{}:
		case <-openCtx.Done():
		}
		if openCtx.Err() != nil {
			break
		}
		cc := l.conns[i%len(l.conns)]
		first := make(chan struct{})
		ended := make(chan error, 1)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			err := l.run(runCtx, cc, s, first)
			if runCtx.Err() == nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
			}
			ended <- err
		}()
		opening.Add(1)
		go func() {
			defer opening.Done()
			defer func() { <-sem }()
			select {
			case <-first:
			case err := <-ended:
				fail(fmt.Errorf("stream %s: %w", s.node.Id, err))
			case <-openCtx.Done():
			}
		}()
	}
	opening.Wait()
	if openErr == nil {
		openErr = ctx.Err()
	}
	if openErr != nil {
		l.Close()
		return nil, fmt.Errorf("adsload: opening %d streams to %s: %w", opts.Streams, opts.Target, openErr)
	}
	return l, nil
}

// Close ends every stream and connection.
func (l *Load) Close() {
	l.cancel()
	for _, cc := range l.conns {
		cc.Close()
	}
	l.wg.Wait()
}

// Streams is the number of streams.
func (l *Load) Streams() int { return len(l.streams) }

// Received counts the EDS responses received so far over every stream.
func (l *Load) Received() int64 { return l.received.Load() }

// Failed returns the first error of a stream that ended, if any.
func (l *Load) Failed() error {
	for _, s := range l.streams {
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("stream %s: %w", s.node.Id, err)
		}
	}
	return nil
}

// EDS returns a copy of every stream's EDS receipts from index from[i] on
// (nil from: all).
func (l *Load) EDS(from []int) [][]Receipt {
	out := make([][]Receipt, len(l.streams))
	for i, s := range l.streams {
		s.mu.Lock()
		k := 0
		if from != nil {
			k = min(from[i], len(s.eds))
		}
		out[i] = slices.Clone(s.eds[k:])
		s.mu.Unlock()
	}
	return out
}

// Marks returns how many EDS receipts every stream holds, and the version
// of its last one ("" before the first).
func (l *Load) Marks() (counts []int, current []string) {
	counts = make([]int, len(l.streams))
	current = make([]string, len(l.streams))
	for i, s := range l.streams {
		s.mu.Lock()
		counts[i] = len(s.eds)
		if n := len(s.eds); n > 0 {
			current[i] = s.eds[n-1].Version
		}
		s.mu.Unlock()
	}
	return counts, current
}

func (s *stream) record(eds bool, version string, at time.Time) {
	s.mu.Lock()
	if eds {
		s.eds = append(s.eds, Receipt{Version: version, At: at})
	} else {
		s.cds = append(s.cds, Receipt{Version: version, At: at})
	}
	s.mu.Unlock()
}

func (l *Load) run(ctx context.Context, cc *grpc.ClientConn, s *stream, first chan struct{}) error {
	client := discovery.NewAggregatedDiscoveryServiceClient(cc)
	if l.opts.Delta {
		return l.runDelta(ctx, client, s, first)
	}
	return l.runSotW(ctx, client, s, first)
}

// rejection is the error detail of a NACK.
var rejection = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: "rejected by the load generator"}

// runSotW speaks state-of-the-world ADS as Envoy does: the node in the
// first request only, wildcard CDS, then EDS for the EDS clusters' service
// names, every response acknowledged with its version and nonce.
func (l *Load) runSotW(ctx context.Context, client discovery.AggregatedDiscoveryServiceClient, s *stream, first chan struct{}) error {
	st, err := client.StreamAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("opening ADS stream: %w", err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: s.node, TypeUrl: resourcev3.ClusterType}); err != nil {
		return fmt.Errorf("sending CDS request: %w", err)
	}
	var edsNames []string
	var edsVersion, edsNonce string
	for {
		resp, err := st.Recv()
		if err != nil {
			return fmt.Errorf("receiving: %w", err)
		}
		at := time.Now()
		switch resp.GetTypeUrl() {
		case resourcev3.ClusterType:
			s.record(false, resp.GetVersionInfo(), at)
			names, err := edsServiceNames(resp.GetResources())
			if err != nil {
				return err
			}
			if err := st.Send(&discovery.DiscoveryRequest{
				TypeUrl: resourcev3.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
			}); err != nil {
				return fmt.Errorf("acknowledging CDS: %w", err)
			}
			if !slices.Equal(names, edsNames) {
				edsNames = names
				if err := st.Send(&discovery.DiscoveryRequest{
					TypeUrl: resourcev3.EndpointType, ResourceNames: edsNames,
					VersionInfo: edsVersion, ResponseNonce: edsNonce,
				}); err != nil {
					return fmt.Errorf("subscribing to EDS: %w", err)
				}
			}
		case resourcev3.EndpointType:
			s.record(true, resp.GetVersionInfo(), at)
			l.received.Add(1)
			edsNonce = resp.GetNonce()
			req := &discovery.DiscoveryRequest{
				TypeUrl: resourcev3.EndpointType, ResourceNames: edsNames, ResponseNonce: edsNonce,
			}
			if l.opts.NACK {
				req.VersionInfo, req.ErrorDetail = edsVersion, rejection
			} else {
				edsVersion = resp.GetVersionInfo()
				req.VersionInfo = edsVersion
			}
			if err := st.Send(req); err != nil {
				return fmt.Errorf("acknowledging EDS: %w", err)
			}
			if first != nil {
				close(first)
				first = nil
			}
		default:
			// Not subscribed: acknowledge whatever else arrives.
			if err := st.Send(&discovery.DiscoveryRequest{
				TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
			}); err != nil {
				return fmt.Errorf("acknowledging %s: %w", resp.GetTypeUrl(), err)
			}
		}
	}
}

// runDelta speaks incremental ADS: wildcard CDS, then a subscription to
// the EDS clusters' service names, every response acknowledged by nonce.
// A response's version is its system_version_info.
func (l *Load) runDelta(ctx context.Context, client discovery.AggregatedDiscoveryServiceClient, s *stream, first chan struct{}) error {
	st, err := client.DeltaAggregatedResources(ctx)
	if err != nil {
		return fmt.Errorf("opening delta ADS stream: %w", err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: s.node, TypeUrl: resourcev3.ClusterType}); err != nil {
		return fmt.Errorf("sending CDS request: %w", err)
	}
	clusters := map[string]*anypb.Any{}
	var edsNames []string
	for {
		resp, err := st.Recv()
		if err != nil {
			return fmt.Errorf("receiving: %w", err)
		}
		at := time.Now()
		switch resp.GetTypeUrl() {
		case resourcev3.ClusterType:
			s.record(false, resp.GetSystemVersionInfo(), at)
			for _, r := range resp.GetResources() {
				clusters[r.GetName()] = r.GetResource()
			}
			for _, name := range resp.GetRemovedResources() {
				delete(clusters, name)
			}
			all := make([]*anypb.Any, 0, len(clusters))
			for _, c := range clusters {
				all = append(all, c)
			}
			names, err := edsServiceNames(all)
			if err != nil {
				return err
			}
			if err := st.Send(&discovery.DeltaDiscoveryRequest{
				TypeUrl: resourcev3.ClusterType, ResponseNonce: resp.GetNonce(),
			}); err != nil {
				return fmt.Errorf("acknowledging CDS: %w", err)
			}
			if !slices.Equal(names, edsNames) {
				sub, unsub := diff(edsNames, names)
				edsNames = names
				if err := st.Send(&discovery.DeltaDiscoveryRequest{
					TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub,
				}); err != nil {
					return fmt.Errorf("subscribing to EDS: %w", err)
				}
			}
		case resourcev3.EndpointType:
			s.record(true, resp.GetSystemVersionInfo(), at)
			l.received.Add(1)
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: resp.GetNonce()}
			if l.opts.NACK {
				req.ErrorDetail = rejection
			}
			if err := st.Send(req); err != nil {
				return fmt.Errorf("acknowledging EDS: %w", err)
			}
			if first != nil {
				close(first)
				first = nil
			}
		default:
			if err := st.Send(&discovery.DeltaDiscoveryRequest{
				TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(),
			}); err != nil {
				return fmt.Errorf("acknowledging %s: %w", resp.GetTypeUrl(), err)
			}
		}
	}
}

// edsServiceNames returns the sorted, distinct EDS service names of the
// EDS clusters among resources, as Envoy subscribes to them.
func edsServiceNames(resources []*anypb.Any) ([]string, error) {
	var names []string
	for _, a := range resources {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			return nil, fmt.Errorf("decoding cluster: %w", err)
		}
		if c.GetType() != clusterv3.Cluster_EDS {
			continue
		}
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// diff returns the names in next and not in prev, and those in prev and
// not in next; both inputs are sorted.
func diff(prev, next []string) (added, removed []string) {
	for _, n := range next {
		if _, ok := slices.BinarySearch(prev, n); !ok {
			added = append(added, n)
		}
	}
	for _, p := range prev {
		if _, ok := slices.BinarySearch(next, p); !ok {
			removed = append(removed, p)
		}
	}
	return added, removed
}
