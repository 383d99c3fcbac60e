package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// pdReply is what a client of a decode replica sees of one request.
type pdReply struct {
	text           string
	prompt, cached int
	// ttft is the decode replica's; prefillTTFT the prefill replica's
	// own, as the decode replica reports it.
	ttft, prefillTTFT float64
	pd                pdResult
}

// pdCall sends prompt to the replica at addr, naming prefiller in
// x-prefiller-host-port unless it is empty, and waits for the whole reply.
type pdCall func(t *testing.T, ctx context.Context, addr, prompt string, maxTokens int, prefiller string) pdReply

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

func grpcPDCall(t *testing.T, ctx context.Context, addr, prompt string, maxTokens int, prefiller string) pdReply {
	t.Helper()
	if prefiller != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, PrefillerHeader, prefiller)
	}
	body, _ := json.Marshal(GenerateRequest{Prompt: prompt, MaxTokens: maxTokens})
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
	tr := stream.Trailer()
	one := func(k string) string {
		v := tr.Get(k)
		if len(v) != 1 {
			t.Fatalf("trailer %s = %q", k, v)
		}
		return v[0]
	}
	ttft, err := strconv.ParseFloat(one(MDTTFT), 64)
	if err != nil {
		t.Fatal(err)
	}
	pttft, err := strconv.ParseFloat(one(MDPrefillTTFT), 64)
	if err != nil {
		t.Fatal(err)
	}
	return pdReply{
		text: text.String(), prompt: atoi(t, one(MDPromptTokens)), cached: atoi(t, one(MDCachedTokens)), ttft: ttft, prefillTTFT: pttft,
		pd: pdResult{Replica: one(MDPrefillReplica), Cached: atoi(t, one(MDPrefillCached)),
			Prompt: atoi(t, one(MDPrefillPrompt)), Transferred: atoi(t, one(MDTransferred))},
	}
}

// httpPDCall posts to /v1/completions, streamed or not.
func httpPDCall(stream bool) pdCall {
	return func(t *testing.T, ctx context.Context, addr, prompt string, maxTokens int, prefiller string) pdReply {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens, "stream": stream,
			"stream_options": map[string]any{"include_usage": true}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/completions", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if prefiller != "" {
			req.Header.Set(PrefillerHeader, prefiller)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var rep pdReply
		var u *usage
		if stream {
			defer resp.Body.Close()
			for _, ev := range readSSE(t, resp.Body) {
				if ev == "[DONE]" {
					continue
				}
				var c completionResponse
				if err := json.Unmarshal([]byte(ev), &c); err != nil {
					t.Fatal(err)
				}
				if c.Usage != nil {
					u = c.Usage
				} else {
					rep.text += c.Choices[0].Text
				}
			}
		} else {
			c := decodeCompletion(t, resp)
			rep.text, u = c.Choices[0].Text, c.Usage
		}
		if u == nil {
			t.Fatal("no usage")
		}
		h := resp.Header
		rep.prompt, rep.cached = u.PromptTokens, u.PromptTokensDetails.CachedTokens
		if rep.cached != atoi(t, h.Get(HeaderCachedTokens)) || rep.prompt != atoi(t, h.Get(HeaderPromptTokens)) {
			t.Errorf("usage %+v, headers %v", u, h)
		}
		if rep.ttft, err = strconv.ParseFloat(h.Get(HeaderTTFT), 64); err != nil {
			t.Fatal(err)
		}
		if rep.prefillTTFT, err = strconv.ParseFloat(h.Get(HeaderPrefillTTFT), 64); err != nil {
			t.Fatal(err)
		}
		rep.pd = pdResult{Replica: h.Get(HeaderPrefillReplica), Cached: atoi(t, h.Get(HeaderPrefillCached)),
			Prompt: atoi(t, h.Get(HeaderPrefillPrompt)), Transferred: atoi(t, h.Get(HeaderTransferred))}
		return rep
	}
}

var pdCalls = []struct {
	name string
	call pdCall
}{
	{"grpc", grpcPDCall},
	{"http", httpPDCall(false)},
	{"http stream", httpPDCall(true)},
}

// scrape returns a replica's metric families.
func scrape(t *testing.T, r *Replica) map[string]*dto.MetricFamily {
	t.Helper()
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
	return families
}

// counterOf is the value of a family's series with the given label value
// (any series if label is empty); -1 if there is none.
func counterOf(families map[string]*dto.MetricFamily, name, label, value string) float64 {
	for _, m := range families[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if label == "" || l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

func pdConfig(id string, role Role) Config {
	return Config{ID: id, Role: role, TimeScale: 1000}
}

// A decode replica prefills on the named prefill replica, receives the
// prompt's KV and decodes; its client's TTFT is the prefill replica's,
// plus the transfer, plus one step that computes the last prompt token.
// The next turn of the conversation hits the prefill replica's cache, and
// only what the decode replica does not hold is transferred.
func TestPDRemotePrefill(t *testing.T) {
	for _, tc := range pdCalls {
		t.Run(tc.name, func(t *testing.T) {
			p := startReplica(t, pdConfig("prefill-0", RolePrefill))
			d := startReplica(t, pdConfig("decode-0", RoleDecode))
			cfg := d.Config()
			perToken := cfg.TransferPerToken.Seconds()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			prompt1 := longText(400)
			rep := tc.call(t, ctx, d.Addr(), prompt1, 8, p.Addr())
			if want := OutputText(Tokenize(prompt1), 8); rep.text != want {
				t.Errorf("text %q, want %q", rep.text, want)
			}
			if want := (pdResult{Replica: "prefill-0", Cached: 0, Prompt: 400, Transferred: 400}); rep.pd != want {
				t.Errorf("prefill %+v, want %+v", rep.pd, want)
			}
			// vLLM's num_cached_tokens: all but the recomputed last token.
			if rep.prompt != 400 || rep.cached != 399 {
				t.Errorf("prompt %d cached %d, want 400 and 399", rep.prompt, rep.cached)
			}
			// Both engines are idle: the prefill replica's TTFT is one step
			// of 400 tokens; then 400 tokens move; then one step computes
			// the last prompt token and samples the first.
			want := cfg.stepSeconds(400, 0) + 400*perToken + cfg.stepSeconds(1, 0)
			if math.Abs(rep.ttft-want) > 2e-6 {
				t.Errorf("TTFT %.6f, want %.6f", rep.ttft, want)
			}
			// Of which the prefill replica's own, reported apart.
			if want := cfg.stepSeconds(400, 0); math.Abs(rep.prefillTTFT-want) > 2e-6 {
				t.Errorf("prefill TTFT %.6f, want %.6f", rep.prefillTTFT, want)
			}

			ps, ds := p.Stats(), d.Stats()
			if ps.RequestsDone != 1 || ps.GenerationTokens != 1 || ps.PrefixQueries != 400 || ps.PrefixHits != 0 ||
				ps.ExternalQueries != 400 || ps.ExternalHits != 0 || ps.RemotePrefills != 0 {
				t.Errorf("prefill replica %+v", ps)
			}
			if ds.RemotePrefills != 1 || ds.LocalPrefills != 0 || ds.TransferredTokens != 400 ||
				ds.PrefixQueries != 400 || ds.PrefixHits != 0 || ds.ExternalQueries != 400 || ds.ExternalHits != 400 ||
				ds.GenerationTokens != 8 || ds.RequestsDone != 1 || ds.KVUsage != 0 || ds.CachedBlocks != 25 {
				t.Errorf("decode replica %+v", ds)
			}

			// Turn 2: the history, the reply and a new question. The
			// prefill replica holds prompt 1 (25 blocks); so does the
			// decode replica (prompt 1 and 7 generated tokens: 25 full
			// blocks), which receives only the rest.
			prompt2 := prompt1 + OutputText(Tokenize(prompt1), 8) + " next " + longText(60)
			n2 := len(Tokenize(prompt2))
			rep = tc.call(t, ctx, d.Addr(), prompt2, 4, p.Addr())
			if want := (pdResult{Replica: "prefill-0", Cached: 400, Prompt: n2, Transferred: n2 - 400}); rep.pd != want {
				t.Errorf("turn 2 prefill %+v, want %+v", rep.pd, want)
			}
			want = cfg.stepSeconds(n2-400, 0) + float64(n2-400)*perToken + cfg.stepSeconds(1, 0)
			if math.Abs(rep.ttft-want) > 2e-6 {
				t.Errorf("turn 2 TTFT %.6f, want %.6f", rep.ttft, want)
			}
			ds2 := d.Stats()
			if hits := ds2.PrefixHits - ds.PrefixHits; hits != 400 {
				t.Errorf("turn 2 local hits on the decode replica %d, want 400", hits)
			}
			if ext := ds2.ExternalHits - ds.ExternalHits; ext != int64(n2-400) || ds2.TransferredTokens != int64(400+n2-400) {
				t.Errorf("turn 2 external hits %d, transferred %d", ext, ds2.TransferredTokens)
			}
			// Transferred blocks are the decode replica's own now.
			if ds2.CachedBlocks < n2/16 {
				t.Errorf("decode replica caches %d blocks after turn 2, want at least %d", ds2.CachedBlocks, n2/16)
			}

			// A decode replica holding nothing receives the whole prompt.
			d2 := startReplica(t, pdConfig("decode-1", RoleDecode))
			if rep := tc.call(t, ctx, d2.Addr(), prompt2, 1, p.Addr()); rep.pd.Transferred != n2 || rep.pd.Cached != n2/16*16 {
				t.Errorf("fresh decode replica: prefill %+v, want %d transferred", rep.pd, n2)
			}

			f := scrape(t, d)
			for name, want := range map[string]float64{
				MetricPDRemotePrefills:    2,
				MetricPDTransferredTokens: float64(n2),
				MetricExternalHits:        float64(n2),
				MetricPrefixHits:          400,
			} {
				if got := counterOf(f, name, "", ""); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			if got := counterOf(f, MetricPDLocalPrefills, "reason", localNoHeader); got != 0 {
				t.Errorf("local prefills %v", got)
			}
		})
	}
}

// A decode replica prefills locally, and counts why, when no prefill
// replica is named or the named one fails; the client never sees an
// error.
func TestPDLocalPrefill(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "engine dead", http.StatusInternalServerError)
	}))
	defer broken.Close()

	for _, tc := range pdCalls {
		for _, pc := range []struct {
			name, prefiller, reason string
		}{
			{"no header", "", localNoHeader},
			{"unreachable", refused, localFailed},
			{"error status", strings.TrimPrefix(broken.URL, "http://"), localFailed},
		} {
			t.Run(tc.name+"/"+pc.name, func(t *testing.T) {
				d := startReplica(t, pdConfig("decode-0", RoleDecode))
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				prompt := longText(400)
				rep := tc.call(t, ctx, d.Addr(), prompt, 5, pc.prefiller)
				if want := OutputText(Tokenize(prompt), 5); rep.text != want {
					t.Errorf("text %q, want %q", rep.text, want)
				}
				if rep.pd != (pdResult{}) || rep.prompt != 400 || rep.cached != 0 {
					t.Errorf("reply %+v", rep)
				}
				if want := d.Config().stepSeconds(400, 0); math.Abs(rep.ttft-want) > 2e-6 {
					t.Errorf("TTFT %.6f, want %.6f", rep.ttft, want)
				}
				s := d.Stats()
				failed := int64(0)
				if pc.reason == localFailed {
					failed = 1
				}
				if s.LocalPrefills != 1 || s.LocalPrefillsFailed != failed || s.RemotePrefills != 0 || s.TransferredTokens != 0 ||
					s.ExternalQueries != 400 || s.ExternalHits != 0 {
					t.Errorf("stats %+v", s)
				}
				f := scrape(t, d)
				for _, reason := range []string{localNoHeader, localFailed} {
					want := 0.0
					if reason == pc.reason {
						want = 1
					}
					if got := counterOf(f, MetricPDLocalPrefills, "reason", reason); got != want {
						t.Errorf("%s{reason=%q} = %v, want %v", MetricPDLocalPrefills, reason, got, want)
					}
				}
			})
		}
	}
}

// Replicas that are not decode replicas ignore the header; one with no
// role exports nothing of P/D and answers as before.
func TestPDHeaderIgnoredOffDecode(t *testing.T) {
	p := startReplica(t, pdConfig("prefill-0", RolePrefill))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, role := range []Role{RoleBoth, RolePrefill} {
		r := startReplica(t, pdConfig("replica-"+role.String(), role))
		body, _ := json.Marshal(GenerateRequest{Prompt: longText(100), MaxTokens: 2})
		stream, err := testpb.NewTestServiceClient(dialGRPC(t, r.Addr())).StreamingOutputCall(
			metadata.AppendToOutgoingContext(ctx, PrefillerHeader, p.Addr()),
			&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := stream.Recv(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		if tr := stream.Trailer(); len(tr.Get(MDPrefillReplica)) != 0 || len(tr.Get(MDTransferred)) != 0 || len(tr) != 3 {
			t.Errorf("%s: trailer %v", role, tr)
		}
		resp := postJSON(t, http.DefaultClient, "http://"+r.Addr()+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1})
		if _, ok := resp.Header[HeaderPrefillReplica]; ok {
			t.Errorf("%s: HTTP headers %v", role, resp.Header)
		}
		decodeCompletion(t, resp)
		s := r.Stats()
		if s.RequestsDone != 2 || s.LocalPrefills != 0 || s.RemotePrefills != 0 {
			t.Errorf("%s: stats %+v", role, s)
		}
		f := scrape(t, r)
		for _, name := range []string{MetricPDRemotePrefills, MetricPDLocalPrefills, MetricPDTransferredTokens, MetricExternalQueries, MetricExternalHits} {
			if _, ok := f[name]; ok != (role != RoleBoth) {
				t.Errorf("%s: %s exported: %v", role, name, ok)
			}
		}
	}
	if s := p.Stats(); s.RequestsDone != 0 {
		t.Errorf("the prefill replica was called: %+v", s)
	}
}

// A client that goes away while its KV is on the way aborts the request,
// and the decode replica's blocks held for it are released.
func TestPDAbortDuringTransfer(t *testing.T) {
	p := startReplica(t, Config{ID: "prefill-0", Role: RolePrefill, TimeScale: 10})
	// 50 ms a token: 16 tokens to move take 0.8 simulated seconds, 80 ms.
	d := startReplica(t, Config{ID: "decode-0", Role: RoleDecode, TimeScale: 10, TransferPerToken: 50 * time.Millisecond})
	prompt := longText(400)
	ctx := context.Background()
	// Cache the prompt on the decode replica, then ask for it again with a
	// prefill replica: 384 tokens are held, 16 transferred.
	grpcPDCall(t, ctx, d.Addr(), prompt, 1, "")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1})
		req, _ := http.NewRequestWithContext(cctx, http.MethodPost, "http://"+d.Addr()+"/v1/completions", bytes.NewReader(body))
		req.Header.Set(PrefillerHeader, p.Addr())
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, func() bool { return d.Stats().RemotePrefills == 1 })
	if u := d.Stats().KVUsage; u == 0 {
		t.Error("no blocks held during the transfer")
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("the cancelled request succeeded")
	}
	waitFor(t, func() bool {
		s := d.Stats()
		return s.RequestsAborted == 1 && s.KVUsage == 0
	})
	if s := d.Stats(); s.TransferredTokens != 0 || s.Waiting != 0 || s.Running != 0 {
		t.Errorf("stats after abort %+v", s)
	}
}

func TestPDConfig(t *testing.T) {
	d := DefaultConfig()
	if d.Role != RoleBoth || d.TransferPerToken != 4*time.Microsecond {
		t.Errorf("defaults %+v", d)
	}
	for _, bad := range []Config{{TransferPerToken: -1}, {Role: RoleDecode + 1}} {
		if _, err := Start(bad, "127.0.0.1:0"); err == nil {
			t.Errorf("%+v started", bad)
		}
	}
	for role, name := range map[Role]string{RoleBoth: "both", RolePrefill: "prefill", RoleDecode: "decode", 7: "Role(7)"} {
		if role.String() != name {
			t.Errorf("%d: %q, want %q", role, role.String(), name)
		}
	}
}

// The prefill call carries the request's adapter and prompt: over HTTP
// the body as sent (here a chat request naming an adapter as its model),
// over gRPC the x-kvxds-adapter header.
func TestPDPrefillKeepsAdapter(t *testing.T) {
	msgs := []Message{{Role: "system", Content: longText(200)}, {Role: "user", Content: "hello"}}
	n := len(Tokenize(RenderChat(msgs)))
	for _, api := range []string{"http", "grpc"} {
		t.Run(api, func(t *testing.T) {
			p := startReplica(t, pdConfig("prefill-0", RolePrefill))
			d := startReplica(t, pdConfig("decode-0", RoleDecode))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var pd pdResult
			if api == "http" {
				b, _ := json.Marshal(map[string]any{"model": "ad-1", "messages": msgs, "max_completion_tokens": 3})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.Addr()+"/v1/chat/completions", bytes.NewReader(b))
				req.Header.Set(PrefillerHeader, p.Addr()+", 127.0.0.1:1")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				c := decodeCompletion(t, resp)
				if c.Model != "ad-1" || c.Choices[0].Message.Content != OutputText(Tokenize(RenderChat(msgs)), 3) {
					t.Errorf("reply %+v", c)
				}
				pd.Replica, pd.Prompt = resp.Header.Get(HeaderPrefillReplica), atoi(t, resp.Header.Get(HeaderPrefillPrompt))
			} else {
				body, _ := json.Marshal(GenerateRequest{Messages: msgs, MaxTokens: 3})
				var tr metadata.MD
				_, err := testpb.NewTestServiceClient(dialGRPC(t, d.Addr())).UnaryCall(
					metadata.AppendToOutgoingContext(ctx, PrefillerHeader, p.Addr(), MDAdapter, "ad-1"),
					&testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}, grpc.Trailer(&tr))
				if err != nil {
					t.Fatal(err)
				}
				pd.Replica, pd.Prompt = tr.Get(MDPrefillReplica)[0], atoi(t, tr.Get(MDPrefillPrompt)[0])
			}
			if pd.Replica != "prefill-0" || pd.Prompt != n {
				t.Errorf("prefill %+v, want prefill-0 with %d prompt tokens", pd, n)
			}
			for _, r := range []*Replica{p, d} {
				if s := r.Stats(); len(s.LoRALoaded) != 1 || s.LoRALoaded[0] != "ad-1" || s.LoRASwapIns != 1 {
					t.Errorf("%s: adapters %v, %d swap-ins", r.ID(), s.LoRALoaded, s.LoRASwapIns)
				}
			}
		})
	}
}

// A client that runs the two steps itself (vLLM's proxy pattern) learns
// the prefill replica's address from its answer and names it in
// x-kv-transfer-from: the decode replica pulls the KV without calling it,
// over gRPC and HTTP.
func TestPDClientOrchestrated(t *testing.T) {
	for _, api := range []string{"grpc", "http"} {
		t.Run(api, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pre, err := Start(pdConfig("prefill-0", RolePrefill), "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer pre.Close()
			dec, err := Start(pdConfig("decode-0", RoleDecode), "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer dec.Close()
			prompt := strings.Repeat("the cache is a routing property ", 40)
			body, _ := json.Marshal(GenerateRequest{Prompt: prompt, MaxTokens: 1})
			var from string
			switch api {
			case "grpc":
				var hdr metadata.MD
				if _, err := testpb.NewTestServiceClient(dialGRPC(t, pre.Addr())).UnaryCall(ctx,
					&testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}}, grpc.Header(&hdr)); err != nil {
					t.Fatal(err)
				}
				if v := hdr.Get(ReplicaAddrHeader); len(v) == 1 {
					from = v[0]
				}
			case "http":
				b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1})
				resp, err := http.Post("http://"+pre.Addr()+"/v1/completions", "application/json", bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				from = resp.Header.Get(ReplicaAddrHeader)
			}
			if from != pre.Addr() {
				t.Fatalf("the prefill replica says its address is %q, want %q", from, pre.Addr())
			}
			var rep pdReply
			switch api {
			case "grpc":
				rep = grpcPDCall(t, metadata.AppendToOutgoingContext(ctx, KVFromHeader, from), dec.Addr(), prompt, 8, "")
			case "http":
				rep = httpKVFromCall(t, ctx, dec.Addr(), prompt, 8, from)
			}
			if rep.pd.Replica != from || rep.pd.Transferred != rep.prompt || rep.cached != rep.prompt-1 {
				t.Errorf("decode reply %+v, want the whole prompt (%d tokens) pulled from %s", rep, rep.prompt, from)
			}
			ps, ds := pre.Stats(), dec.Stats()
			if ps.RequestsDone != 1 || ds.RemotePrefills != 1 || ds.LocalPrefills != 0 {
				t.Errorf("prefill replica finished %d requests (want 1: no second call); decode remote %d, local %d",
					ps.RequestsDone, ds.RemotePrefills, ds.LocalPrefills)
			}
		})
	}
}

// httpKVFromCall posts a non-streamed completion naming the prefill
// replica that already holds the prompt's KV.
func httpKVFromCall(t *testing.T, ctx context.Context, addr, prompt string, maxTokens int, from string) pdReply {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(KVFromHeader, from)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c completionResponse
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	h := resp.Header
	return pdReply{prompt: c.Usage.PromptTokens, cached: c.Usage.PromptTokensDetails.CachedTokens,
		pd: pdResult{Replica: h.Get(HeaderPrefillReplica), Transferred: atoi(t, h.Get(HeaderTransferred))}}
}
