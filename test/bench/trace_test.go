package bench

import (
	"os"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/test/workload"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

func sampleTrace(t *testing.T) []workload.Request {
	t.Helper()
	f, err := os.Open("testdata/mooncake_conversation_trace.sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := workload.ReadTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	return workload.TraceRequests(recs, 1)
}

// TestPrefixBytesCoversBlocks: the prompt_prefix of PrefixBytes(b) ends
// exactly at the end of the b-th trace block of a chat body.
func TestPrefixBytesCoversBlocks(t *testing.T) {
	reqs := sampleTrace(t)
	prompt := reqs[0].Prompt // 14 blocks
	words := strings.Split(prompt, " ")
	for _, b := range []int{1, 2, 4} {
		body := `{"model":"bench","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":1}`
		got, ok := bodykey.PromptPrefixBytes([]byte(body), PrefixBytes(b))
		want := messagesHead + strings.Join(words[:b*workload.TraceBlockTokens], " ")
		if !ok || string(got) != want {
			t.Errorf("%d blocks: keyed %d bytes ending %q, want %d ending %q", b, len(got), tail(got), len(want), tail([]byte(want)))
		}
	}
}

func tail(b []byte) string { return string(b[max(0, len(b)-12):]) }

// TestPrefixKeysOnTrace: every request of Mooncake's conversation trace
// starts with block 0, so a one-block key is one key for all of them (the
// trap), while four blocks tell requests apart.
func TestPrefixKeysOnTrace(t *testing.T) {
	reqs := sampleTrace(t)
	for _, tc := range []struct {
		blocks   int
		distinct func(n int) bool
	}{
		{1, func(n int) bool { return n == 1 }},
		{4, func(n int) bool { return n == len(reqs) }},
	} {
		keys := map[string]bool{}
		for _, r := range reqs {
			k, ok := PrefixKey(PrefixBytes(tc.blocks)).Of(&Request{Request: r})
			if !ok {
				t.Fatalf("no key for %.80s", r.Prompt)
			}
			keys[k] = true
		}
		if !tc.distinct(len(keys)) {
			t.Errorf("%d blocks: %d distinct keys over %d requests", tc.blocks, len(keys), len(reqs))
		}
	}
}

// TestPlanTraceGzip plans the compressed conversation trace: the file is
// read through gzip, and its multi-turn conversations share prefixes
// longer than block 0, so four blocks give fewer keys than requests.
func TestPlanTraceGzip(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and keys 3,894 prompts of 13,000 tokens on average")
	}
	c := Config{Trace: "testdata/mooncake_conversation_trace.jsonl.gz"}.Defaults()
	p, err := planTrace(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Requests) != 3894 {
		t.Fatalf("%d requests, want 3894", len(p.Requests))
	}
	for _, tc := range []struct {
		blocks   int
		min, max int
	}{
		{1, 1, 1},
		{4, 2000, 3500},
	} {
		q := withBodyKey(p, PrefixKey(PrefixBytes(tc.blocks)))
		if q.Sessions < tc.min || q.Sessions > tc.max {
			t.Errorf("%d blocks: %d distinct keys over %d requests, want %d to %d", tc.blocks, q.Sessions, len(q.Requests), tc.min, tc.max)
		}
	}
}
