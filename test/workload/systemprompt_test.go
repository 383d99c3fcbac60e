package workload

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestSystemPrompt: about Shared of the requests start with the one
// shared system prompt under the shared application's key; each
// conversation has a first user message of its own and grows turn by
// turn; the others carry a system prompt of their own under a key of
// their own.
func TestSystemPrompt(t *testing.T) {
	w := SystemPrompt()
	const d = 10 * time.Minute
	reqs := w.Generate(3, 10, d)
	checkStream(t, "system-prompt", reqs, d)
	if len(reqs) < 4000 {
		t.Fatalf("%d requests at 10/s over %v", len(reqs), d)
	}
	var shared string
	sharedReqs := 0
	firsts := map[string]string{} // first user message → conversation
	ownApps := map[string]string{}
	for _, r := range reqs {
		sys := r.Prompt[:r.System]
		if r.Session == SharedApp {
			sharedReqs++
			if shared == "" {
				shared = sys
			}
			if sys != shared {
				t.Fatalf("request %d of %s: another system prompt", r.Seq, SharedApp)
			}
		} else {
			if r.Session != r.Tenant || !strings.HasPrefix(r.Session, "app-") {
				t.Fatalf("request %d: session %q, tenant %q", r.Seq, r.Session, r.Tenant)
			}
			if c, ok := ownApps[r.Session]; ok && c != r.Conversation {
				t.Fatalf("%s holds conversations %s and %s", r.Session, c, r.Conversation)
			}
			ownApps[r.Session] = r.Conversation
			if n := tokens(sys); n < w.OwnPromptLen.Min || n > w.OwnPromptLen.Max {
				t.Fatalf("request %d: own system prompt of %d tokens", r.Seq, n)
			}
		}
		first := r.Prompt[r.System:r.Lead]
		if c, ok := firsts[first]; ok && c != r.Conversation {
			t.Fatalf("conversations %s and %s share their first user message", c, r.Conversation)
		}
		firsts[first] = r.Conversation
		if r.DependsOn >= 0 {
			prev := reqs[r.DependsOn]
			if !strings.HasPrefix(r.Prompt, prev.Prompt+" ") || tokens(r.Prompt)-tokens(prev.Prompt) < prev.MaxTokens+1 {
				t.Fatalf("request %d does not extend request %d with its reply and a message", r.Seq, prev.Seq)
			}
		}
	}
	if n := tokens(shared); n != w.SystemPromptLen {
		t.Errorf("shared system prompt of %d tokens, want %d", n, w.SystemPromptLen)
	}
	// Conversations are shared with probability 0.9; their requests
	// cluster by conversation, so allow a wide margin.
	if got := float64(sharedReqs) / float64(len(reqs)); math.Abs(got-w.Shared) > 0.03 {
		t.Errorf("%.3f of the requests under the shared prompt, want %.2f", got, w.Shared)
	}
	if len(ownApps) < 20 {
		t.Errorf("%d conversations with their own prompt", len(ownApps))
	}
}
