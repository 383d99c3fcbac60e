package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// fastConfig runs simulated time 1000× faster than the wall clock.
func fastConfig() Config {
	return Config{ID: "replica-t", TimeScale: 1000}
}

func startReplica(t *testing.T, cfg Config) *Replica {
	t.Helper()
	r, err := Start(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func postJSON(t *testing.T, client *http.Client, url string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := client.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

type completionResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func decodeCompletion(t *testing.T, resp *http.Response) completionResponse {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var c completionResponse
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHTTPCompletions(t *testing.T) {
	r := startReplica(t, fastConfig())
	url := "http://" + r.Addr() + "/v1/completions"
	prompt := longText(500)
	body := map[string]any{"model": r.Config().Model, "prompt": prompt, "max_tokens": 5}

	resp := postJSON(t, http.DefaultClient, url, body)
	if got := resp.Header.Get(HeaderReplicaID); got != "replica-t" {
		t.Errorf("X-Replica-Id %q", got)
	}
	c := decodeCompletion(t, resp)
	if c.Object != "text_completion" || len(c.Choices) != 1 || *c.Choices[0].FinishReason != "length" {
		t.Fatalf("response %+v", c)
	}
	if want := OutputText(Tokenize(prompt), 5); c.Choices[0].Text != want {
		t.Errorf("text %q, want %q", c.Choices[0].Text, want)
	}
	if u := c.Usage; u.PromptTokens != 500 || u.CompletionTokens != 5 || u.TotalTokens != 505 || u.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("usage %+v", u)
	}

	resp = postJSON(t, http.DefaultClient, url, body)
	if got := resp.Header.Get(HeaderCachedTokens); got != "496" {
		t.Errorf("X-Cached-Tokens %q, want 496", got)
	}
	if ttft, err := strconv.ParseFloat(resp.Header.Get(HeaderTTFT), 64); err != nil || ttft <= 0 {
		t.Errorf("X-Ttft-Seconds %q", resp.Header.Get(HeaderTTFT))
	}
	if c := decodeCompletion(t, resp); c.Usage.PromptTokensDetails.CachedTokens != 496 {
		t.Errorf("second request cached_tokens %d, want 496", c.Usage.PromptTokensDetails.CachedTokens)
	}

	// Token-id prompts are accepted as they are.
	c = decodeCompletion(t, postJSON(t, http.DefaultClient, url, map[string]any{"prompt": Tokenize(prompt), "max_tokens": 1}))
	if c.Usage.PromptTokens != 500 || c.Usage.PromptTokensDetails.CachedTokens != 496 {
		t.Errorf("token-id prompt usage %+v", c.Usage)
	}

	for name, tc := range map[string]struct {
		body map[string]any
		code int
	}{
		"empty prompt": {map[string]any{"prompt": ""}, http.StatusBadRequest},
		"no prompt":    {map[string]any{"max_tokens": 3}, http.StatusBadRequest},
		"zero tokens":  {map[string]any{"prompt": "x", "max_tokens": 0}, http.StatusBadRequest},
		"too long":     {map[string]any{"prompt": "x", "max_tokens": 29000*16 + 1}, http.StatusBadRequest},
	} {
		resp := postJSON(t, http.DefaultClient, url, tc.body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s: status %d, want %d", name, resp.StatusCode, tc.code)
		}
	}
}

func TestHTTPChatCompletionsOverH2C(t *testing.T) {
	r := startReplica(t, fastConfig())
	// The same port speaks HTTP/2 with prior knowledge.
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	msgs := []Message{{Role: "system", Content: longText(100)}, {Role: "user", Content: "hello"}}
	resp := postJSON(t, client, "http://"+r.Addr()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 3})
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2", resp.Proto)
	}
	c := decodeCompletion(t, resp)
	prompt := Tokenize(RenderChat(msgs))
	if c.Object != "chat.completion" || c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content != OutputText(prompt, 3) {
		t.Errorf("response %+v", c)
	}
	if c.Usage.PromptTokens != len(prompt) {
		t.Errorf("prompt tokens %d, want %d", c.Usage.PromptTokens, len(prompt))
	}

	resp, err := client.Get("http://" + r.Addr() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "meta-llama/Llama-3.1-8B-Instruct" {
		t.Errorf("models %+v", models)
	}
}

// readSSE returns the data payloads of a server-sent event stream.
func readSSE(t *testing.T, body io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected SSE line %q", line)
		}
		out = append(out, data)
	}
	return out
}

func TestHTTPStreaming(t *testing.T) {
	r := startReplica(t, fastConfig())
	prompt := longText(300)
	for _, chat := range []bool{false, true} {
		path, body := "/v1/completions", map[string]any{"prompt": prompt}
		wantPrompt := Tokenize(prompt)
		if chat {
			path, body = "/v1/chat/completions", map[string]any{"messages": []Message{{Role: "user", Content: prompt}}}
			wantPrompt = Tokenize(RenderChat([]Message{{Role: "user", Content: prompt}}))
		}
		body["max_tokens"] = 6
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
		resp := postJSON(t, http.DefaultClient, "http://"+r.Addr()+path, body)
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		if resp.Header.Get(HeaderPromptTokens) != strconv.Itoa(len(wantPrompt)) || resp.Header.Get(HeaderReplicaID) != "replica-t" {
			t.Errorf("headers %v", resp.Header)
		}
		events := readSSE(t, resp.Body)
		resp.Body.Close()
		if events[len(events)-1] != "[DONE]" {
			t.Fatalf("stream does not end with [DONE]: %q", events)
		}
		var text strings.Builder
		tokens, finishes := 0, 0
		var u *usage
		for i, ev := range events[:len(events)-1] {
			var c completionResponse
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatalf("event %d %q: %v", i, ev, err)
			}
			if c.Usage != nil {
				u = c.Usage
				continue
			}
			ch := c.Choices[0]
			piece := ch.Text
			if chat {
				piece = ch.Delta.Content
				if i == 0 && ch.Delta.Role != "assistant" {
					t.Errorf("first chat chunk %q has no role", ev)
				}
			}
			if piece != "" {
				tokens++
				text.WriteString(piece)
			}
			if ch.FinishReason != nil {
				finishes++
				if *ch.FinishReason != "length" {
					t.Errorf("finish reason %q", *ch.FinishReason)
				}
			}
		}
		if tokens != 6 || finishes != 1 || text.String() != OutputText(wantPrompt, 6) {
			t.Errorf("chat=%v: %d token chunks, %d finish reasons, text %q", chat, tokens, finishes, text.String())
		}
		if u == nil || u.CompletionTokens != 6 || u.PromptTokens != len(wantPrompt) {
			t.Errorf("chat=%v: usage %+v", chat, u)
		}
	}
}

func TestHTTPStreamAbortFreesTheRequest(t *testing.T) {
	r := startReplica(t, Config{TimeScale: 10})
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"prompt": longText(100), "max_tokens": 100000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+r.Addr()+"/v1/completions", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, func() bool {
		s := r.Stats()
		return s.RequestsAborted == 1 && s.Running == 0 && s.KVUsage == 0
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMetricsPage(t *testing.T) {
	r := startReplica(t, fastConfig())
	url := "http://" + r.Addr() + "/v1/completions"
	prompt := longText(200)
	for i := 0; i < 3; i++ {
		decodeCompletion(t, postJSON(t, http.DefaultClient, url, map[string]any{"prompt": prompt, "max_tokens": 4}))
	}
	resp, err := http.Get("http://" + r.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Stats()
	want := map[string]struct {
		typ   dto.MetricType
		value float64 // counter or gauge value, histogram count; -1 = unchecked
	}{
		MetricRunning:          {dto.MetricType_GAUGE, 0},
		MetricWaiting:          {dto.MetricType_GAUGE, 0},
		MetricKVUsage:          {dto.MetricType_GAUGE, 0},
		MetricPreemptions:      {dto.MetricType_COUNTER, 0},
		MetricPrefixQueries:    {dto.MetricType_COUNTER, 600},
		MetricPrefixHits:       {dto.MetricType_COUNTER, float64(s.PrefixHits)},
		MetricPromptTokens:     {dto.MetricType_COUNTER, 600},
		MetricGenerationTokens: {dto.MetricType_COUNTER, 12},
		MetricRequestSuccess:   {dto.MetricType_COUNTER, -1},
		MetricTTFT:             {dto.MetricType_HISTOGRAM, 3},
		MetricE2E:              {dto.MetricType_HISTOGRAM, 3},
		MetricQueueTime:        {dto.MetricType_HISTOGRAM, 3},
		MetricInterToken:       {dto.MetricType_HISTOGRAM, 9},
		MetricCacheConfig:      {dto.MetricType_GAUGE, 1},
	}
	if s.PrefixHits != 2*192 {
		t.Errorf("prefix hits %d, want %d", s.PrefixHits, 2*192)
	}
	for name, w := range want {
		mf, ok := families[name]
		if !ok {
			t.Errorf("metric %s missing", name)
			continue
		}
		if mf.GetType() != w.typ {
			t.Errorf("%s has type %v, want %v", name, mf.GetType(), w.typ)
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["engine"] != "0" {
				t.Errorf("%s: engine label %q", name, labels["engine"])
			}
			if name == MetricCacheConfig {
				if labels["block_size"] != "16" || labels["num_gpu_blocks"] != "29000" {
					t.Errorf("cache_config_info labels %v", labels)
				}
			} else if labels["model_name"] != "meta-llama/Llama-3.1-8B-Instruct" {
				t.Errorf("%s: model_name label %q", name, labels["model_name"])
			}
			if name == MetricRequestSuccess {
				v := m.GetCounter().GetValue()
				if (labels["finished_reason"] == "length") != (v == 3) {
					t.Errorf("request_success{finished_reason=%q} = %v", labels["finished_reason"], v)
				}
			}
		}
		if w.value < 0 {
			continue
		}
		m := mf.GetMetric()[0]
		var got float64
		switch w.typ {
		case dto.MetricType_COUNTER:
			got = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			got = m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			got = float64(m.GetHistogram().GetSampleCount())
		}
		if got != w.value {
			t.Errorf("%s = %v, want %v", name, got, w.value)
		}
	}
	ttft := families[MetricTTFT].GetMetric()[0].GetHistogram()
	var bounds []float64
	for _, b := range ttft.GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) {
			bounds = append(bounds, b.GetUpperBound())
		}
	}
	if fmt.Sprint(bounds) != fmt.Sprint(ttftBuckets) {
		t.Errorf("TTFT buckets %v, want vLLM's %v", bounds, ttftBuckets)
	}
}

func dialGRPC(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestGRPCStreamingOutputCall(t *testing.T) {
	r := startReplica(t, fastConfig())
	client := testpb.NewTestServiceClient(dialGRPC(t, r.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prompt := longText(400)
	body, _ := json.Marshal(GenerateRequest{Prompt: prompt, MaxTokens: 7})

	call := func() (tokens int, text string, header, trailer metadata.MD) {
		stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for {
			msg, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			tokens++
			b.Write(msg.GetPayload().GetBody())
		}
		header, _ = stream.Header()
		return tokens, b.String(), header, stream.Trailer()
	}

	n, text, header, trailer := call()
	if n != 7 || text != OutputText(Tokenize(prompt), 7) {
		t.Errorf("got %d messages %q", n, text)
	}
	if got := header.Get(MDReplicaID); len(got) != 1 || got[0] != "replica-t" {
		t.Errorf("header x-replica-id %v", got)
	}
	if trailer.Get(MDPromptTokens)[0] != "400" || trailer.Get(MDCachedTokens)[0] != "0" {
		t.Errorf("first trailer %v", trailer)
	}
	_, _, _, trailer = call()
	if got := trailer.Get(MDCachedTokens); len(got) != 1 || got[0] != "384" {
		t.Errorf("second call x-cached-tokens %v, want 384", got)
	}
	if ttft, err := strconv.ParseFloat(trailer.Get(MDTTFT)[0], 64); err != nil || ttft <= 0 || ttft > 1 {
		t.Errorf("x-ttft-seconds %v", trailer.Get(MDTTFT))
	}

	// UnaryCall names the replica; with a generation payload it generates.
	var hdr metadata.MD
	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{FillServerId: true}, grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetServerId() != "replica-t" || resp.GetHostname() != "replica-t" || hdr.Get(MDReplicaID)[0] != "replica-t" {
		t.Errorf("UnaryCall %v header %v", resp, hdr)
	}
	var tr metadata.MD
	resp, err = client.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}, grpc.Trailer(&tr))
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.GetPayload().GetBody()) != OutputText(Tokenize(prompt), 7) || tr.Get(MDCachedTokens)[0] != "384" {
		t.Errorf("generating UnaryCall %q trailer %v", resp.GetPayload().GetBody(), tr)
	}

	// Bad payloads are InvalidArgument.
	stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("nope")}})
	if err == nil {
		_, err = stream.Recv()
	}
	if err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Errorf("bad payload: %v", err)
	}

	hc, err := healthpb.NewHealthClient(dialGRPC(t, r.Addr())).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health %v %v", hc, err)
	}
}

func TestTimeScaleShortensWallTime(t *testing.T) {
	// 50 tokens: one prefill step and 49 decode steps ≈ 0.6 simulated
	// seconds, run 20× faster than real time.
	r := startReplica(t, Config{TimeScale: 20})
	q, err := r.submit(seq(1, 10), 50, "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := r.follow(context.Background(), q, nil); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	sim := r.Stats().SimTime - q.arrival
	if !(sim > 0.6) {
		t.Fatalf("simulated duration %v", sim)
	}
	if lo, hi := time.Duration(sim/20*0.9*1e9), time.Duration(sim/2*1e9); wall < lo || wall > hi {
		t.Errorf("wall %v for %.3f simulated seconds at 20×: want within [%v, %v]", wall, sim, lo, hi)
	}
}

func TestFleetAndClose(t *testing.T) {
	fleet, err := StartFleet(3, Config{TimeScale: 10})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, r := range fleet {
		if r.ID() != fmt.Sprintf("replica-%d", i) || seen[r.Addr()] {
			t.Errorf("replica %d: id %s addr %s", i, r.ID(), r.Addr())
		}
		seen[r.Addr()] = true
	}
	// A long request in flight fails promptly when its replica closes.
	client := testpb.NewTestServiceClient(dialGRPC(t, fleet[0].Addr()))
	body, _ := json.Marshal(GenerateRequest{Prompt: "hello", MaxTokens: 100000})
	stream, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, r := range fleet {
		if err := r.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closing took %v", d)
	}
	if err := fleet[0].Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// A replica served on the caller's listener shuts down gracefully: the
// request in flight streams to its end, new connections are refused, and
// the listener is closed.
func TestServeAndShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Serve(Config{ID: "replica-s", TimeScale: 20}, ln)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Addr() != ln.Addr().String() {
		t.Errorf("Addr() = %s, want the listener's %s", r.Addr(), ln.Addr())
	}
	client := testpb.NewTestServiceClient(dialGRPC(t, r.Addr()))
	const want = 200 // ≈ 2.5 simulated seconds of decoding, ≈ 0.13 s of wall time
	body, _ := json.Marshal(GenerateRequest{Prompt: "hello there", MaxTokens: want})
	stream, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Shutdown(ctx) }()
	got := 1
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the request in flight failed after %d tokens: %v", got, err)
		}
		got++
	}
	if got != want {
		t.Errorf("streamed %d tokens, want %d", got, want)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if c, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		c.Close()
		t.Error("the replica still accepts connections after Shutdown")
	}
}

// Streamed chunks are appended by hand; they must be what encoding/json
// writes for the same maps.
func TestChunkBytes(t *testing.T) {
	for _, chat := range []bool{false, true} {
		for _, tc := range []struct {
			text         string
			role, finish bool
		}{{" cache", false, false}, {"", true, false}, {" kv", false, true}, {`a "<q>" & \`, false, false}} {
			object := "text_completion"
			if chat {
				object = "chat.completion.chunk"
			}
			choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": nil}
			if tc.finish {
				choice["finish_reason"] = finishLength
			}
			if chat {
				delta := map[string]any{"content": tc.text}
				if tc.role {
					delta["role"] = "assistant"
				}
				choice["delta"] = delta
			} else {
				choice["text"] = tc.text
			}
			var want bytes.Buffer
			want.WriteString("data: ")
			json.NewEncoder(&want).Encode(map[string]any{"id": "cmpl-r-1", "object": object, "created": int64(1700000000),
				"model": "m<1>", "choices": []any{choice}})
			want.WriteString("\n")
			got := appendChunk(nil, chat, tc.text, tc.role, tc.finish, jsonTail(1700000000, "cmpl-r-1", "m<1>", object))
			if string(got) != want.String() {
				t.Errorf("chat %v, %+v:\n got %s\nwant %s", chat, tc, got, want.String())
			}
		}
	}
}
