package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/kvxds/kvxds/test/sim"
)

// A proxyless gRPC client that runs prefill/decode itself (vLLM's proxy
// pattern) addresses the two pools of a disaggregated fleet as two
// targets: it prefills on xds:///chat-prefill, hashed on the session, then
// decodes on xds:///chat, balanced by load, naming where the KV is. Every
// turn of a session prefills on one prefill replica and its later turns
// hit that replica's cache; the decode replicas share the sessions.
func TestPrefillDecodeTwoTargets(t *testing.T) {
	var prefill, decode []*sim.Replica
	for i := range 3 {
		p, err := sim.Start(sim.Config{ID: fmt.Sprintf("prefill-%d", i), Role: sim.RolePrefill, TimeScale: 1000}, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		prefill = append(prefill, p)
		d, err := sim.Start(sim.Config{ID: fmt.Sprintf("decode-%d", i), Role: sim.RoleDecode, TimeScale: 1000}, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		decode = append(decode, d)
	}
	quote := func(rs []*sim.Replica) string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%q", r.Addr()))
		}
		return strings.Join(out, ", ")
	}
	dir := t.TempDir()
	path, xdsAddr, adminAddr := filepath.Join(dir, "policy.hcl"), freeAddr(t), freeAddr(t)
	writeAtomic(t, path, fmt.Sprintf(`
xds { address = %q }
admin { address = %q }
pool "chat" {
  port           = 10000
  load_balancing = "least_request"
  prefill { pool = "chat-prefill" }
  static { endpoints = [%s] }
}
pool "chat-prefill" {
  port = 10001
  hash {
    key { header = "x-session-id" }
  }
  static { endpoints = [%s] }
}
`, xdsAddr, adminAddr, quote(decode), quote(prefill)))
	inst := startInProcess(t, path, xdsAddr, adminAddr)
	defer inst.stop()
	pre, dec := newClientOf(t, xdsAddr, "chat-prefill"), newClientOf(t, xdsAddr, "chat")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	turn := func(session, prompt string) (from string, prefillCached int, decoder string) {
		t.Helper()
		body, _ := json.Marshal(sim.GenerateRequest{Prompt: prompt, MaxTokens: 1})
		var hdr, tr metadata.MD
		if _, err := pre.UnaryCall(metadata.AppendToOutgoingContext(ctx, "x-session-id", session),
			&testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: body}}, grpc.Header(&hdr), grpc.Trailer(&tr)); err != nil {
			t.Fatalf("prefill: %v", err)
		}
		from = one(t, hdr, sim.ReplicaAddrHeader)
		fmt.Sscan(one(t, tr, sim.MDCachedTokens), &prefillCached)
		body, _ = json.Marshal(sim.GenerateRequest{Prompt: prompt, MaxTokens: 4})
		var dh, dt metadata.MD
		if _, err := dec.UnaryCall(metadata.AppendToOutgoingContext(ctx, sim.KVFromHeader, from),
			&testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: body}}, grpc.Header(&dh), grpc.Trailer(&dt)); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got := one(t, dt, sim.MDPrefillReplica); got != from {
			t.Fatalf("the decode replica pulled from %q, want %q", got, from)
		}
		return from, prefillCached, one(t, dh, sim.MDReplicaID)
	}
	decoders := map[string]int{}
	prefillers := map[string]int{}
	for s := range 30 {
		session := fmt.Sprintf("session-%d", s)
		prompt := strings.Repeat(fmt.Sprintf("conversation %d says hello to the cache. ", s), 12)
		first, _, d := turn(session, prompt)
		decoders[d]++
		prefillers[first]++
		for k := range 2 {
			prompt += strings.Repeat(fmt.Sprintf(" turn %d goes on.", k), 8)
			from, cached, d := turn(session, prompt)
			decoders[d]++
			if from != first {
				t.Errorf("%s: turn %d prefilled on %s, its first on %s", session, k+2, from, first)
			}
			if cached == 0 {
				t.Errorf("%s: turn %d missed the prefill replica's cache", session, k+2)
			}
		}
	}
	if len(prefillers) < 2 || len(decoders) < 2 {
		t.Errorf("sessions by prefill replica %v, requests by decode replica %v: want both sides shared", prefillers, decoders)
	}
	t.Logf("sessions by prefill replica %v; requests by decode replica %v", prefillers, decoders)
}

func one(t *testing.T, md metadata.MD, k string) string {
	t.Helper()
	v := md.Get(k)
	if len(v) != 1 {
		t.Fatalf("%s = %q", k, v)
	}
	return v[0]
}
