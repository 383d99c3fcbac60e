package workload

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// The stateless variants are their keyed workloads without Session, byte
// for byte.
func TestStatelessVariants(t *testing.T) {
	const d = 3 * time.Minute
	for _, tc := range []struct{ keyed, stateless Generator }{
		{Chat(), ChatStateless()},
		{Agent(), AgentStateless()},
	} {
		a, b := tc.keyed.Generate(3, 8, d), tc.stateless.Generate(3, 8, d)
		if len(a) == 0 || len(a) != len(b) {
			t.Fatalf("%s: %d requests, %s: %d", tc.keyed.Name(), len(a), tc.stateless.Name(), len(b))
		}
		for i := range a {
			if b[i].Session != "" || a[i].Session == "" || b[i].Conversation != a[i].Session {
				t.Fatalf("%s: request %d: session %q, conversation %q", tc.stateless.Name(), i, b[i].Session, b[i].Conversation)
			}
			b[i].Session = a[i].Session
			if !reflect.DeepEqual(a[i], b[i]) {
				t.Fatalf("%s: request %d differs beyond Session", tc.stateless.Name(), i)
			}
		}
	}
}

// conversationKeys checks that every request of a conversation has one
// conversation key, computed as Envoy's filter would from its chat body,
// and returns the keys by conversation.
func conversationKeys(t *testing.T, name string, reqs []Request) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, r := range reqs {
		if r.Session != "" || r.Conversation == "" {
			t.Fatalf("%s: request %d: session %q, conversation %q", name, r.Seq, r.Session, r.Conversation)
		}
		k, ok := bodykey.Conversation(ChatBody("m", r))
		if !ok {
			t.Fatalf("%s: request %d has no conversation key", name, r.Seq)
		}
		if prev, seen := keys[r.Conversation]; seen && prev != k {
			t.Fatalf("%s: %s changed its conversation key at request %d", name, r.Conversation, r.Seq)
		}
		keys[r.Conversation] = k
	}
	return keys
}

func TestStatelessConversationKeys(t *testing.T) {
	for _, name := range []string{"chat-stateless", "branching", "agent-stateless", "retrieval"} {
		g, _ := ByName(name)
		reqs := g.Generate(5, 6, 4*time.Minute)
		keys := conversationKeys(t, name, reqs)
		distinct := map[string]bool{}
		for _, k := range keys {
			distinct[k] = true
		}
		// Conversations differ in their first user message (retrieval: in
		// the question after a shared document).
		if len(keys) < 20 || len(distinct) != len(keys) {
			t.Errorf("%s: %d conversations, %d distinct keys", name, len(keys), len(distinct))
		}
	}
}

func TestChatBody(t *testing.T) {
	r := Request{Prompt: "sys tem first user rest of it", System: 7, Lead: 18, MaxTokens: 3}
	want := `{"model":"m","messages":[{"role":"system","content":"sys tem"},{"role":"user","content":"first user"},{"role":"user","content":"rest of it"}],"max_tokens":3}`
	if got := string(ChatBody("m", r)); got != want {
		t.Errorf("ChatBody = %s, want %s", got, want)
	}
	r = Request{Prompt: "hello", Lead: 5, MaxTokens: 1}
	if got := string(ChatBody("m", r)); got != `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":1}` {
		t.Errorf("ChatBody = %s", got)
	}
}

func TestBranching(t *testing.T) {
	w := Branching()
	reqs := w.Generate(9, 6, 10*time.Minute)
	checkStream(t, "branching", reqs, 10*time.Minute)
	byTree := map[string][]Request{}
	for _, r := range reqs {
		byTree[r.Conversation] = append(byTree[r.Conversation], r)
	}
	var repeated, simultaneous, diverged int // trees with each kind of branch
	for _, rs := range byTree {
		prompts := map[string][]Request{}
		for _, r := range rs {
			prompts[r.Prompt] = append(prompts[r.Prompt], r)
		}
		rep, sim := false, false
		for _, same := range prompts {
			if len(same) > 1 {
				rep = true
				sim = sim || same[0].At == same[1].At
			}
		}
		// An edit: two requests whose prompts end in different user
		// messages after a shared history, neither extending the other.
		div := false
		for i := range rs {
			for j := i + 1; j < len(rs) && !div; j++ {
				a, b := rs[i].Prompt, rs[j].Prompt
				div = !strings.HasPrefix(a, b) && !strings.HasPrefix(b, a) && commonWords(a, b) > tokens(a[:rs[i].Lead])
			}
		}
		if rep && !sim {
			repeated++
		}
		if sim {
			simultaneous++
		}
		if div {
			diverged++
		}
	}
	if repeated == 0 || simultaneous == 0 || diverged == 0 {
		t.Errorf("%d trees: %d regenerated, %d sampled, %d diverging", len(byTree), repeated, simultaneous, diverged)
	}
	if n := float64(len(reqs)) / float64(len(byTree)); n < 5 {
		t.Errorf("%.1f requests per tree, want the main path and its branches", n)
	}
}

func TestRetrieval(t *testing.T) {
	w := Retrieval()
	reqs := w.Generate(4, 6, 5*time.Minute)
	checkStream(t, "retrieval", reqs, 5*time.Minute)
	convs := map[string]map[string]bool{} // document -> conversations
	for _, r := range reqs {
		if convs[r.Tenant] == nil {
			convs[r.Tenant] = map[string]bool{}
		}
		convs[r.Tenant][r.Conversation] = true
		if n := tokens(r.Prompt[:r.Lead]); n < w.SystemPromptLen+w.DocLen.Min {
			t.Fatalf("request %d: leading messages of %d tokens, want a document in them", r.Seq, n)
		}
	}
	total := 0
	for _, c := range convs {
		total += len(c)
	}
	// Zipf 1.0 over 32 documents: the first has 1/H(32) ≈ 25%.
	if hot := len(convs["doc-0"]); float64(hot) < 0.15*float64(total) || float64(hot) > 0.4*float64(total) {
		t.Errorf("doc-0 opens %d of %d conversations", hot, total)
	}
}
