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

// The spread sub-key is the first SpreadBits bits of the sub-key's hash,
// most significant first, so a route's regex_rewrite ^([01]{b})[01]*$
// keeps the hash's first b bits: the bucket of a spread of 2^b.
func TestSpreadBits(t *testing.T) {
	for _, tc := range []struct{ hash, want string }{
		{"00ff00ff00ff00ff", "00000000"},
		{"ff00000000000000", "11111111"},
		{"9f3c000000000000", "10011111"},
		{"0a", "00001010"},
		{"5", ""},
		{"zz00000000000000", ""},
		{"", ""},
	} {
		if got := SpreadBits(tc.hash); got != tc.want {
			t.Errorf("SpreadBits(%q) = %q, want %q", tc.hash, got, tc.want)
		}
	}
	for i := range 200 {
		h := bodykey.Hash([]byte(fmt.Sprintf("conversation %d", i)))
		s := SpreadBits(h)
		if len(s) != fleet.SpreadBits {
			t.Fatalf("SpreadBits(%s) = %q", h, s)
		}
		top, _ := strconv.ParseUint(h[:2], 16, 8)
		for b := 1; b <= fleet.SpreadBits; b++ {
			bucket := regexp.MustCompile(fmt.Sprintf(`^([01]{%d})[01]*$`, b)).ReplaceAllString(s, `$1`)
			v, err := strconv.ParseUint(bucket, 2, 8)
			if err != nil || v != top>>(fleet.SpreadBits-b) {
				t.Fatalf("hash %s: spread %s keeps bucket %q at %d bits, want %d", h, s, bucket, b, top>>(fleet.SpreadBits-b))
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
