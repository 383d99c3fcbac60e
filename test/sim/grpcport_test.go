package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// ListenGRPC's port serves gRPC with gRPC's own transport and HTTP/1.1
// with the API and /metrics, on one engine with the main port.
func TestListenGRPC(t *testing.T) {
	r := startReplica(t, fastConfig())
	addr, err := r.ListenGRPC("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prompt := longText(100)
	body, _ := json.Marshal(GenerateRequest{Prompt: prompt, MaxTokens: 5})
	stream, err := testpb.NewTestServiceClient(dialGRPC(t, addr)).StreamingOutputCall(ctx,
		&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		text.Write(msg.GetPayload().GetBody())
	}
	if want := OutputText(Tokenize(prompt), 5); text.String() != want {
		t.Errorf("streamed %q, want %q", text.String(), want)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(m), "vllm:prefix_cache_queries_total") {
		t.Errorf("/metrics: %s\n%.200s", resp.Status, m)
	}
	if s := r.Stats(); s.RequestsDone != 1 {
		t.Errorf("%d requests done, want 1", s.RequestsDone)
	}
	r.Close()
	if _, err := http.Get("http://" + addr + "/health"); err == nil {
		t.Error("the gRPC port still answers after Close")
	}
}
