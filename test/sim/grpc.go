package sim

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// gRPC metadata keys a replica sets: the replica id in the response header,
// per-request accounting in the trailer (x-ttft-seconds in simulated
// seconds).
const (
	MDReplicaID    = "x-replica-id"
	MDPromptTokens = "x-prompt-tokens"
	MDCachedTokens = "x-cached-tokens"
	MDTTFT         = "x-ttft-seconds"

	// MDAdapter, a request header, names the LoRA adapter to run under
	// (absent or empty: the base model). It is a header rather than a
	// field of the payload so that a client's route can hash on it.
	MDAdapter = "x-kvxds-adapter"
)

// adapterOf returns the adapter a call's x-kvxds-adapter header names.
func adapterOf(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, MDAdapter); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// GenerateRequest is the JSON body of a generation request over gRPC, in
// Payload.Body of StreamingOutputCallRequest or SimpleRequest. Messages, if
// set, are rendered with RenderChat and take the place of Prompt.
type GenerateRequest struct {
	Prompt    string    `json:"prompt,omitempty"`
	Messages  []Message `json:"messages,omitempty"`
	MaxTokens int       `json:"max_tokens,omitempty"`
}

// Tokens is the request's prompt as token ids.
func (g GenerateRequest) Tokens() []int {
	if len(g.Messages) > 0 {
		return Tokenize(RenderChat(g.Messages))
	}
	return Tokenize(g.Prompt)
}

// parseGenerate decodes a payload body; ok is false if it is not a
// generation request.
func parseGenerate(p *testpb.Payload) (g GenerateRequest, ok bool) {
	if p == nil || len(p.Body) == 0 {
		return g, false
	}
	if err := json.Unmarshal(p.Body, &g); err != nil {
		return g, false
	}
	if g.Prompt == "" && len(g.Messages) == 0 {
		return g, false
	}
	if g.MaxTokens == 0 {
		g.MaxTokens = defaultMaxTokens
	}
	return g, true
}

// testService serves grpc.testing.TestService:
//
//   - StreamingOutputCall generates: Payload.Body holds a GenerateRequest,
//     and each generated token comes back as one response whose
//     Payload.Body is the token's text (" word"). The first message marks
//     the first token.
//   - UnaryCall returns ServerId and Hostname = the replica id, and, if the
//     payload holds a GenerateRequest, the whole generated text.
//   - EmptyCall answers at once.
//
// Every call carries "x-replica-id" in its response header; generation
// calls carry "x-prompt-tokens", "x-cached-tokens" and "x-ttft-seconds" in
// the trailer.
type testService struct {
	testpb.UnimplementedTestServiceServer
	r *Replica
}

func (s *testService) header() metadata.MD {
	if s.r.cfg.Role == RolePrefill {
		return metadata.Pairs(MDReplicaID, s.r.cfg.ID, ReplicaAddrHeader, s.r.Addr())
	}
	return metadata.Pairs(MDReplicaID, s.r.cfg.ID)
}

func (s *testService) trailer(res result) metadata.MD {
	kv := []string{
		MDPromptTokens, strconv.Itoa(res.PromptTokens),
		MDCachedTokens, strconv.Itoa(res.CachedTokens),
		MDTTFT, strconv.FormatFloat(res.TTFT, 'f', 6, 64),
	}
	if s.r.cfg.Role == RoleDecode {
		kv = append(kv, res.PD.md()...)
	}
	return metadata.Pairs(kv...)
}

// generate submits a call's request, prefilling it on the prefill
// replica its metadata names if this is a decode replica.
func (s *testService) generate(ctx context.Context, g GenerateRequest) (*request, error) {
	adapter := adapterOf(ctx)
	var prefiller string
	if s.r.cfg.Role == RoleDecode {
		if from := prefillerOf(metadata.ValueFromIncomingContext(ctx, KVFromHeader)); from != "" {
			return s.r.generate(ctx, g.Tokens(), g.MaxTokens, adapter, from, pulled(from))
		}
		prefiller = prefillerOf(metadata.ValueFromIncomingContext(ctx, PrefillerHeader))
	}
	return s.r.generate(ctx, g.Tokens(), g.MaxTokens, adapter, prefiller, s.r.grpcPrefill(g, adapter, prefiller))
}

func submitStatus(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, errClosed) {
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

func followStatus(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

func (s *testService) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	grpc.SetHeader(ctx, s.header())
	return &testpb.Empty{}, nil
}

func (s *testService) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	grpc.SetHeader(ctx, s.header())
	resp := &testpb.SimpleResponse{ServerId: s.r.cfg.ID, Hostname: s.r.cfg.ID}
	g, ok := parseGenerate(in.GetPayload())
	if !ok {
		return resp, nil
	}
	q, err := s.generate(ctx, g)
	if err != nil {
		return nil, submitStatus(ctx, err)
	}
	var text strings.Builder
	res, err := s.r.follow(ctx, q, appendWords(&text))
	if err != nil {
		return nil, followStatus(ctx, err)
	}
	grpc.SetTrailer(ctx, s.trailer(res))
	resp.Payload = &testpb.Payload{Body: []byte(text.String())}
	return resp, nil
}

func (s *testService) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	ctx := stream.Context()
	stream.SetHeader(s.header())
	g, ok := parseGenerate(in.GetPayload())
	if !ok {
		return status.Error(codes.InvalidArgument, `payload body must be JSON {"prompt": "...", "max_tokens": N}`)
	}
	q, err := s.generate(ctx, g)
	if err != nil {
		return submitStatus(ctx, err)
	}
	res, err := s.r.follow(ctx, q, func(words []uint8, _ result) error {
		for _, w := range words {
			if err := stream.Send(&testpb.StreamingOutputCallResponse{
				Payload: &testpb.Payload{Body: []byte(" " + outputWords[w])},
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return followStatus(ctx, err)
	}
	stream.SetTrailer(s.trailer(res))
	return nil
}
