package bench

import (
	"testing"
	"time"

	"github.com/kvxds/kvxds/test/workload"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// The conversation key survives the echoed replies: after PrepareRequests
// rewrites the later turns, every request of a conversation (a branching
// tree included) still carries its conversation's one key, and no two
// conversations share one.
func TestConversationKeyAfterEcho(t *testing.T) {
	for _, name := range []string{"chat", "chat-stateless", "branching", "agent-stateless", "retrieval"} {
		g, _ := workload.ByName(name)
		reqs, err := PrepareRequests(g.Generate(3, 6, 4*time.Minute), true)
		if err != nil {
			t.Fatal(err)
		}
		p := withBodyKey(&workloadPlan{Requests: reqs}, ConversationKey())
		byConv := map[string]string{}
		owner := map[string]string{}
		for _, r := range p.Requests {
			if r.Session == "" {
				t.Fatalf("%s: request %d has no conversation key", name, r.Seq)
			}
			if k, ok := byConv[r.Conversation]; ok && k != r.Session {
				t.Fatalf("%s: conversation %s has keys %s and %s", name, r.Conversation, k, r.Session)
			}
			byConv[r.Conversation] = r.Session
			if c, ok := owner[r.Session]; ok && c != r.Conversation {
				t.Fatalf("%s: conversations %s and %s share key %s", name, c, r.Conversation, r.Session)
			}
			owner[r.Session] = r.Conversation
		}
		if p.Sessions != len(byConv) || p.Sessions < 20 {
			t.Errorf("%s: %d keys for %d conversations", name, p.Sessions, len(byConv))
		}
	}
}

// A request without chat structure (a trace replay) is one user message,
// keyed as the body a chat client sends.
func TestKeyBodyOneMessage(t *testing.T) {
	r := &Request{Request: workload.Request{Prompt: "aaaa bbbb", MaxTokens: 7}}
	want := `{"model":"bench","messages":[{"role":"user","content":"aaaa bbbb"}],"max_tokens":7}`
	if got := string(KeyBody(r)); got != want {
		t.Fatalf("KeyBody = %s, want %s", got, want)
	}
	k, ok := PrefixKey(len(messagesHead) + 4).Of(r)
	if want := bodykey.Hash([]byte(messagesHead + "aaaa")); !ok || k != want {
		t.Errorf("prompt_prefix key %s, want %s", k, want)
	}
}
