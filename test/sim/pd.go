package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// Prefill/decode disaggregation, as llm-d runs it with vLLM's
// NixlConnector. The data plane sends a request to a decode replica and
// names the prefill replica it chose in PrefillerHeader (host:port). The
// decode pod's routing sidecar (llm-d's pd-sidecar, connector nixlv2)
// sends the same request to that replica with max_tokens = 1 and stream
// off, waits for its answer, then hands the request to its own engine,
// which pulls the prompt's KV blocks from the prefill replica (only those
// it does not already cache: NixlConnector.get_num_new_matched_tokens
// counts the prompt tokens beyond the local hit, and the worker reads only
// those blocks), recomputes the last prompt token and decodes. vLLM's
// examples/online_serving/disaggregated_serving proxy does the same.
//
// Without the header the sidecar passes the request to its engine as it
// is, which prefills locally. When the prefill replica fails (unreachable,
// or an error status), the sidecar answers the client with that error
// (502 Bad Gateway for an unreachable host); a decode engine whose KV
// transfer fails recomputes the prompt locally (vLLM's default
// kv_load_failure_policy). The simulated decode replica never fails the
// client for its prefill replica: it prefills locally, as a fail-static
// data plane wants, and counts it (sim:pd_local_prefills_total{reason}).
//
// The same happens over gRPC: the header is the call's metadata, and the
// prefill call is StreamingOutputCall.

// Clients that run the two steps themselves (vLLM's proxy pattern:
// examples/online_serving/disaggregated_serving) send the prompt to a
// prefill replica with max_tokens = 1, learn from its answer where its KV
// is (vLLM's kv_transfer_params: remote_host, remote_port; here the
// prefill replica's ReplicaAddrHeader), and send the request to a decode
// replica naming it in KVFromHeader: the decode replica pulls the KV from
// there without calling it.

// KVFromHeader names, as host:port, the prefill replica that already
// prefilled a request sent to a decode replica: an HTTP request header or
// gRPC metadata key. It wins over PrefillerHeader.
const KVFromHeader = "x-kv-transfer-from"

// ReplicaAddrHeader is a prefill replica's serving address (host:port) on
// every answer: an HTTP response header and gRPC header key.
const ReplicaAddrHeader = "x-replica-addr"

// pulled is the prefill of a request a client already prefilled on
// target: nothing to call, the KV is there.
func pulled(target string) prefillFunc {
	return func(context.Context) (remotePrefill, error) { return remotePrefill{replica: target}, nil }
}

// PrefillerHeader names, as host:port, the prefill replica that should
// prefill a request sent to a decode replica: an HTTP request header or
// gRPC metadata key. Of several values (or a comma-separated list) the
// first counts, as llm-d's sidecar takes it without sampling. Replicas
// other than RoleDecode ignore it.
const PrefillerHeader = "x-prefiller-host-port"

// gRPC trailer keys a decode replica adds to a generation call: the
// prefill replica's id (empty when prefilled locally), its prompt and
// cached tokens for the request (its x-prompt-tokens and x-cached-tokens),
// and the prompt tokens whose KV was transferred, so that a client can
// compute the prefill side's hit rate per request.
const (
	MDPrefillReplica = "x-prefill-replica-id"
	MDPrefillCached  = "x-prefill-cached-tokens"
	MDPrefillPrompt  = "x-prefill-prompt-tokens"
	MDTransferred    = "x-transferred-tokens"
	MDPrefillTTFT    = "x-prefill-ttft-seconds"
)

// The same as HTTP response headers of a decode replica.
const (
	HeaderPrefillReplica = "X-Prefill-Replica-Id"
	HeaderPrefillCached  = "X-Prefill-Cached-Tokens"
	HeaderPrefillPrompt  = "X-Prefill-Prompt-Tokens"
	HeaderTransferred    = "X-Transferred-Tokens"
	HeaderPrefillTTFT    = "X-Prefill-Ttft-Seconds" // simulated seconds
)

// pdResult is a decode replica's account of a request's prefill.
type pdResult struct {
	Replica     string // the prefill replica's id, "" when prefilled locally
	Cached      int    // its cached tokens for the request
	Prompt      int    // its prompt tokens for the request
	Transferred int    // prompt tokens whose KV came from it
	// TTFT is the prefill replica's own TTFT for the request (simulated
	// seconds: its queue and prefill), 0 when prefilled locally.
	TTFT float64
}

func (p pdResult) md() []string {
	return []string{
		MDPrefillReplica, p.Replica,
		MDPrefillCached, strconv.Itoa(p.Cached),
		MDPrefillPrompt, strconv.Itoa(p.Prompt),
		MDTransferred, strconv.Itoa(p.Transferred),
		MDPrefillTTFT, strconv.FormatFloat(p.TTFT, 'f', 6, 64),
	}
}

func (p pdResult) setHeaders(h http.Header) {
	h.Set(HeaderPrefillReplica, p.Replica)
	h.Set(HeaderPrefillCached, strconv.Itoa(p.Cached))
	h.Set(HeaderPrefillPrompt, strconv.Itoa(p.Prompt))
	h.Set(HeaderTransferred, strconv.Itoa(p.Transferred))
	h.Set(HeaderPrefillTTFT, strconv.FormatFloat(p.TTFT, 'f', 6, 64))
}

// remotePrefill is what a prefill replica reported for its max_tokens = 1
// request: its id, its accounting and its TTFT (simulated seconds: its
// queue and prefill, as it measured them).
type remotePrefill struct {
	replica        string
	prompt, cached int
	ttft           float64
}

// prefillFunc prefills a request on a prefill replica over the API the
// request came in on.
type prefillFunc func(ctx context.Context) (remotePrefill, error)

// prefillerOf returns the prefill replica a header's values name.
func prefillerOf(values []string) string {
	if len(values) == 0 {
		return ""
	}
	first, _, _ := strings.Cut(values[0], ",")
	return strings.TrimSpace(first)
}

// generate submits a request. A decode replica given a prefill replica
// prefills there, receives the KV and then submits; otherwise, or if that
// fails, it prefills locally. The error is the client's: a bad request,
// the replica closing, or the client gone.
func (r *Replica) generate(ctx context.Context, prompt []int, maxTokens int, adapter, prefiller string, call prefillFunc) (*request, error) {
	if r.cfg.Role != RoleDecode {
		return r.submit(prompt, maxTokens, adapter)
	}
	q, err := r.newRequest(prompt, maxTokens, adapter)
	if err != nil {
		return nil, err
	}
	reason := localNoHeader
	if prefiller != "" {
		rp, err := call(ctx)
		if err == nil {
			if err := r.receiveKV(ctx, q, rp); err != nil {
				return nil, err
			}
			return q, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		reason = localFailed
	}
	r.mu.Lock()
	r.e.stats.LocalPrefills++
	if reason == localFailed {
		r.e.stats.LocalPrefillsFailed++
	}
	r.m.pdLocal[reason].Inc()
	r.mu.Unlock()
	if err := r.enqueue(q); err != nil {
		return nil, err
	}
	return q, nil
}

// receiveKV models the KV transfer of a request a prefill replica has
// prefilled, then hands it to the engine. The request arrives at the
// engine now (vLLM's own latencies start here), holds the blocks this
// replica already caches, and is admitted once the rest has moved:
// TransferPerToken per prompt token not cached here. The wait is in
// simulated time, on the handler's goroutine, so the engine loop runs on.
func (r *Replica) receiveKV(ctx context.Context, q *request, rp remotePrefill) error {
	bs := r.cfg.BlockSize
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return errClosed
	}
	q.arrival = max(r.simNow(), r.e.now)
	// The local hit as admission computes it, never the last token; the
	// blocks stay referenced until admission, as vLLM allocates them when
	// it starts the transfer.
	maxHit := min(len(q.hashes), (len(q.tokens)-1)/bs)
	hit, _ := r.e.cache.Match(q.hashes[:maxHit])
	r.e.cache.Acquire(&q.blocks, q.hashes[:hit])
	r.e.stats.RemotePrefills++
	r.m.pdRemote.Inc()
	r.mu.Unlock()

	q.prior = rp.ttft
	q.transferred = len(q.tokens) - hit*bs
	q.readyAt = q.arrival + float64(q.transferred)*r.cfg.TransferPerToken.Seconds()
	q.remoteKV = true
	q.out.mu.Lock()
	q.out.pd = pdResult{Replica: rp.replica, Cached: rp.cached, Prompt: rp.prompt, Transferred: q.transferred, TTFT: rp.ttft}
	q.out.mu.Unlock()

	timer := time.NewTimer(time.Until(r.wallAt(q.readyAt)))
	defer timer.Stop()
	var err error
	select {
	case <-timer.C:
	case <-ctx.Done():
		err = ctx.Err()
	case <-r.quit:
		err = errClosed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.closed {
		err = errClosed
	}
	if err != nil {
		r.e.cache.Release(&q.blocks)
		if !errors.Is(err, errClosed) {
			// vLLM counts a request aborted while its KV is on the way.
			r.e.stats.RequestsAborted++
			r.m.success[finishAbort].Inc()
		}
		return err
	}
	r.e.stats.TransferredTokens += int64(q.transferred)
	r.m.pdTransferred.Add(float64(q.transferred))
	r.e.enqueue(q)
	r.wake()
	return nil
}

// pdClients are a decode replica's connections to prefill replicas.
type pdClients struct {
	http *http.Client // nil unless RoleDecode

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newPDHTTPClient(cfg Config) *http.Client {
	if cfg.Role != RoleDecode {
		return nil
	}
	return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
}

// conn returns the gRPC client of a prefill replica, dialled once.
func (p *pdClients) conn(target string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if cc := p.conns[target]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("prefill replica %s: %w", target, err)
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[target] = cc
	return cc, nil
}

func (p *pdClients) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cc := range p.conns {
		cc.Close()
	}
	p.conns = nil
	if p.http != nil {
		p.http.CloseIdleConnections()
	}
}

// grpcPrefill prefills g on target with StreamingOutputCall, max tokens
// 1, under the same adapter, and waits for its one token and trailer.
func (r *Replica) grpcPrefill(g GenerateRequest, adapter, target string) prefillFunc {
	return func(ctx context.Context) (remotePrefill, error) {
		cc, err := r.pd.conn(target)
		if err != nil {
			return remotePrefill{}, err
		}
		g.MaxTokens = 1
		body, err := json.Marshal(g)
		if err != nil {
			return remotePrefill{}, err
		}
		// A fresh outgoing context: the incoming metadata (the prefiller
		// header among it) is not forwarded, only the adapter.
		out := metadata.NewOutgoingContext(ctx, metadata.MD{})
		if adapter != "" {
			out = metadata.AppendToOutgoingContext(out, MDAdapter, adapter)
		}
		stream, err := testpb.NewTestServiceClient(cc).StreamingOutputCall(out,
			&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})
		if err != nil {
			return remotePrefill{}, fmt.Errorf("prefill on %s: %w", target, err)
		}
		for {
			if _, err := stream.Recv(); err == io.EOF {
				break
			} else if err != nil {
				return remotePrefill{}, fmt.Errorf("prefill on %s: %w", target, err)
			}
		}
		hdr, err := stream.Header()
		if err != nil {
			return remotePrefill{}, fmt.Errorf("prefill on %s: %w", target, err)
		}
		tr := stream.Trailer()
		last := func(md metadata.MD, k string) string {
			if v := md.Get(k); len(v) > 0 {
				return v[len(v)-1]
			}
			return ""
		}
		return parseRemote(target, last(hdr, MDReplicaID), last(tr, MDPromptTokens), last(tr, MDCachedTokens), last(tr, MDTTFT))
	}
}

// httpPrefill posts the request body raw to target's path as llm-d's
// sidecar does: max_tokens and max_completion_tokens 1, stream off,
// stream_options removed, everything else (the model, so the adapter)
// as sent.
func (r *Replica) httpPrefill(path string, raw []byte, target string) prefillFunc {
	return func(ctx context.Context) (remotePrefill, error) {
		var body map[string]any
		if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&body); err != nil {
			return remotePrefill{}, err
		}
		body["max_tokens"] = 1
		if _, ok := body["max_completion_tokens"]; ok {
			body["max_completion_tokens"] = 1
		}
		body["stream"] = false
		delete(body, "stream_options")
		b, err := json.Marshal(body)
		if err != nil {
			return remotePrefill{}, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+target+path, bytes.NewReader(b))
		if err != nil {
			return remotePrefill{}, fmt.Errorf("prefill on %s: %w", target, err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.pd.http.Do(req)
		if err != nil {
			return remotePrefill{}, fmt.Errorf("prefill on %s: %w", target, err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return remotePrefill{}, fmt.Errorf("prefill on %s: %w", target, err)
		}
		if resp.StatusCode/100 != 2 {
			return remotePrefill{}, fmt.Errorf("prefill on %s: status %s", target, resp.Status)
		}
		h := resp.Header
		return parseRemote(target, h.Get(HeaderReplicaID), h.Get(HeaderPromptTokens), h.Get(HeaderCachedTokens), h.Get(HeaderTTFT))
	}
}

// parseRemote reads a prefill replica's accounting; a replica that does
// not report it has failed.
func parseRemote(target, id, prompt, cached, ttft string) (remotePrefill, error) {
	rp := remotePrefill{replica: id}
	var errs []error
	var err error
	if rp.prompt, err = strconv.Atoi(prompt); err != nil {
		errs = append(errs, err)
	}
	if rp.cached, err = strconv.Atoi(cached); err != nil {
		errs = append(errs, err)
	}
	if rp.ttft, err = strconv.ParseFloat(ttft, 64); err != nil || rp.ttft < 0 {
		errs = append(errs, fmt.Errorf("ttft %q", ttft))
	}
	if id == "" {
		errs = append(errs, errors.New("no replica id"))
	}
	if err := errors.Join(errs...); err != nil {
		return remotePrefill{}, fmt.Errorf("prefill on %s: bad accounting: %w", target, err)
	}
	return rp, nil
}
