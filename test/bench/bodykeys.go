package bench

import (
	"fmt"
	"strconv"

	"github.com/kvxds/kvxds/test/workload"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// chatModel is the base model name the bench's chat bodies carry; a
// request under a LoRA adapter names the adapter instead.
const chatModel = "bench"

// KeyBody is the OpenAI chat-completions body a client sends for r
// (workload.ChatBody), which Envoy's filters read: its model (r's adapter,
// else chatModel), its system prompt and first user message as messages
// of their own, the rest of its prompt as one more. A request without
// chat structure (a trace replay, a single-shot call) is one user
// message.
func KeyBody(r *Request) []byte {
	w := r.Request
	if w.Lead == 0 {
		w.System, w.Lead = 0, len(w.Prompt)
	}
	return workload.ChatBody(w.Model(chatModel), w)
}

// BodyKey is the key of a body-keyed kvxds mode: the policy's key block
// and the Go function that computes what Envoy's generated filter does.
type BodyKey struct {
	// HCL is the key block's body: "prompt_prefix = 512",
	// "conversation = true".
	HCL string
	// Label names the key in reports.
	Label string
	// bytes are the keyed bytes of a body, false if it has none.
	bytes func(body []byte) ([]byte, bool)
}

// PrefixKey is the prompt_prefix key of n bytes.
func PrefixKey(n int) BodyKey {
	return BodyKey{HCL: "prompt_prefix = " + strconv.Itoa(n), Label: fmt.Sprintf("prompt_prefix=%d", n),
		bytes: func(b []byte) ([]byte, bool) { return bodykey.PromptPrefixBytes(b, n) }}
}

// ConversationKey is the conversation key: the leading messages.
func ConversationKey() BodyKey {
	return BodyKey{HCL: "conversation = true", Label: "conversation", bytes: bodykey.ConversationBytes}
}

// Of returns the key of r's KeyBody (bodykey.Hash of its keyed bytes, the
// header value Envoy's filter sets), or false if the body has none.
func (k BodyKey) Of(r *Request) (string, bool) {
	b, ok := k.bytes(KeyBody(r))
	if !ok {
		return "", false
	}
	return bodykey.Hash(b), true
}

// SpreadOf returns the spread sub-key of r's KeyBody when k is the
// pool's spread_by (bodykey.Spread of its keyed bytes, the header value
// Envoy's filter sets), or false if the body has none.
func (k BodyKey) SpreadOf(r *Request) (string, bool) {
	b, ok := k.bytes(KeyBody(r))
	if !ok {
		return "", false
	}
	return bodykey.Spread(b), true
}

// withBodyKey returns a copy of p keyed on k: each request carries the
// key of its KeyBody as its session, which the grpc-go clients send as
// x-session-id (gRPC has no body keys, so the client computes ahead what
// Envoy's filter would), while the Envoy data plane runs the served
// filter on the body itself. A request whose body has no key carries
// none, as with Envoy, and hashes at random.
func withBodyKey(p *workloadPlan, k BodyKey) *workloadPlan {
	q := *p
	q.BodyKey = k
	q.Requests = make([]Request, len(p.Requests))
	sessions := map[string]bool{}
	for i, r := range p.Requests {
		r.Session, _ = k.Of(&r)
		q.Requests[i] = r
		if r.Session != "" {
			sessions[r.Session] = true
		}
	}
	q.Sessions = len(sessions)
	q.HotSession = hotSession(q.Requests)
	return &q
}
