package bench

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/test/workload"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// A request's spread sub-key is bodykey.Spread of its spread_by bytes:
// the first fleet.SpreadBits bits of their hash, most significant first,
// so a hot route's rewrite, which cuts the last SpreadBits - b of them,
// keeps the hash's first b bits: the bucket of a spread of 2^b.
func TestSpreadOf(t *testing.T) {
	g, _ := workload.ByName("system-prompt")
	reqs, err := PrepareRequests(g.Generate(1, 4, time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	k := ConversationKey()
	for _, r := range reqs[:min(len(reqs), 200)] {
		s, ok := k.SpreadOf(&r)
		b, _ := bodykey.ConversationBytes(KeyBody(&r))
		if !ok || s != bodykey.Spread(b) {
			t.Fatalf("request %d: spread %q, %v; bodykey.Spread gives %q", r.Seq, s, ok, bodykey.Spread(b))
		}
		h, _ := k.Of(&r)
		top, _ := strconv.ParseUint(h[:2], 16, 8)
		for bits := 1; bits <= fleet.SpreadBits; bits++ {
			cut := fleet.SpreadBits - bits
			bucket := regexp.MustCompile(fmt.Sprintf(`[01]{%d}$`, cut)).ReplaceAllString(s, "")
			v, err := strconv.ParseUint(bucket, 2, 8)
			if err != nil || v != top>>cut {
				t.Fatalf("key %s: spread %s keeps bucket %q at %d bits, want %d", h, s, bucket, bits, top>>cut)
			}
		}
	}
}

// A gRPC client sends each request's spread sub-key computed from its
// conversation key: the same for every turn of a conversation, and
// different conversations under one system prompt spread over the buckets.
func TestSpreadKeysFollowConversations(t *testing.T) {
	g, _ := workload.ByName("system-prompt")
	reqs, err := PrepareRequests(g.Generate(1, 4, 3*time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	plan := withSpreads(&workloadPlan{Requests: reqs}, ConversationKey())
	byConv := map[string]string{}
	buckets := map[string]bool{}
	for _, r := range plan.Requests {
		s := r.Spread
		if len(s) != fleet.SpreadBits {
			t.Fatalf("request %d: spread %q", r.Seq, s)
		}
		if prev, ok := byConv[r.Conversation]; ok && prev != s {
			t.Fatalf("conversation %s: spreads %s and %s", r.Conversation, prev, s)
		}
		byConv[r.Conversation] = s
		buckets[s[:3]] = true
	}
	if len(byConv) < 30 || len(buckets) < 6 {
		t.Errorf("%d conversations over %d of 8 three-bit buckets", len(byConv), len(buckets))
	}
}

// A request with a spread sub-key sends it in x-kvxds-spread; one
// without sends none.
func TestSendSpreadHeader(t *testing.T) {
	for _, spread := range []string{"01101001", ""} {
		cl := &captureClient{}
		r := &Request{Request: workload.Request{Session: "app-0", MaxTokens: 1, DependsOn: -1}, Spread: spread}
		(&dispatcher{}).send(context.Background(), cl, r, time.Now())
		want := []string{spread}
		if spread == "" {
			want = nil
		}
		if got := cl.md.Get(SpreadHeader); !slices.Equal(got, want) || cl.md.Get(SessionHeader)[0] != "app-0" {
			t.Errorf("spread %q: sent %v", spread, cl.md)
		}
	}
}
