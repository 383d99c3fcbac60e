package bench

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/kvxds/kvxds/test/workload"
)

var errCaptured = errors.New("captured")

// captureClient records the outgoing metadata of a StreamingOutputCall and
// fails it, so send returns without any network.
type captureClient struct {
	testgrpc.TestServiceClient // nil: any other method panics
	md                         metadata.MD
	calls                      int
}

func (c *captureClient) StreamingOutputCall(ctx context.Context, _ *testgrpc.StreamingOutputCallRequest,
	_ ...grpc.CallOption) (grpc.ServerStreamingClient[testgrpc.StreamingOutputCallResponse], error) {
	c.md, _ = metadata.FromOutgoingContext(ctx)
	c.calls++
	return nil, errCaptured
}

// A request carries x-session-id = Session, and no such header without a
// session.
func TestSendSessionHeader(t *testing.T) {
	for _, tc := range []struct {
		session string
		want    []string
	}{
		{"chat-7", []string{"chat-7"}},
		{"", nil},
	} {
		cl := &captureClient{}
		r := &Request{Request: workload.Request{Seq: 3, Session: tc.session, MaxTokens: 1, DependsOn: -1}}
		res := (&dispatcher{}).send(context.Background(), cl, r, time.Now())
		if cl.calls != 1 || !errors.Is(res.Err, errCaptured) {
			t.Fatalf("session %q: %d calls, error %v", tc.session, cl.calls, res.Err)
		}
		if got := cl.md.Get(SessionHeader); !slices.Equal(got, tc.want) {
			t.Errorf("session %q: %s = %q, want %q", tc.session, SessionHeader, got, tc.want)
		}
	}
}

// A session always uses the same client; requests without one go to
// client Seq mod the number of clients.
func TestClientFor(t *testing.T) {
	clients := make([]testgrpc.TestServiceClient, 3)
	for i := range clients {
		clients[i] = &captureClient{}
	}
	g := &dispatcher{clients: clients}
	index := func(cl testgrpc.TestServiceClient) int { return slices.Index(clients, cl) }
	for seq := range 9 {
		r := &Request{Request: workload.Request{Seq: seq}}
		if got := index(g.clientFor(r)); got != seq%3 {
			t.Errorf("keyless request %d: client %d, want %d", seq, got, seq%3)
		}
	}
	used := map[int]bool{}
	for s := range 50 {
		session := "chat-" + string(rune('a'+s%26)) + string(rune('a'+s/26))
		want := index(g.clientFor(&Request{Request: workload.Request{Seq: 0, Session: session}}))
		used[want] = true
		for seq := 1; seq < 5; seq++ {
			if got := index(g.clientFor(&Request{Request: workload.Request{Seq: seq, Session: session}})); got != want {
				t.Fatalf("%s: request %d on client %d, request 0 on %d", session, seq, got, want)
			}
		}
	}
	if len(used) != len(clients) {
		t.Errorf("50 sessions used only clients %v", used)
	}
}

// Requests without a session count in no session statistic.
func TestSessionsMovedSkipsKeyless(t *testing.T) {
	req := func(seq int, session string) Request {
		return Request{Request: workload.Request{Seq: seq, Session: session, MaxTokens: 1, DependsOn: -1}}
	}
	w := &workloadPlan{TimeScale: 1, Requests: []Request{
		req(0, ""), req(1, "a"), req(2, ""), req(3, "a"), req(4, "b"), req(5, "c"), req(6, "c"),
	}}
	replicas := []string{"replica-0", "replica-0", "replica-1", "replica-0", "replica-1", "replica-0", "replica-1"}
	run := &liveRun{Results: make([]reqResult, len(replicas))}
	for i, rep := range replicas {
		run.Results[i] = reqResult{Replica: rep, First: -1, EngineTTFT: nan()}
	}
	m := summarize(KVXDS, w, run, 2)
	// "a" stays on replica-0, "c" moves, "b" has one request; the keyless
	// requests 0 and 2 landed on two replicas but are no session.
	if m.MultiSessions != 2 || m.SessionsMoved != 1 {
		t.Errorf("sessions moved %d of %d, want 1 of 2", m.SessionsMoved, m.MultiSessions)
	}
}

// Every workload has a KV profile, and a plan counts only real sessions.
func TestPlanSessions(t *testing.T) {
	profiles := Profiles()
	for _, name := range workload.Names() {
		if p, ok := profiles[name]; !ok || p.KVBlocks <= 0 || p.Why == "" {
			t.Errorf("%s: profile %+v", name, p)
		}
	}
	if profiles["chat-apps"].KVBlocks != profiles["chat"].KVBlocks {
		t.Errorf("chat-apps has %d KV blocks, chat %d", profiles["chat-apps"].KVBlocks, profiles["chat"].KVBlocks)
	}
	c := Config{Duration: 10 * time.Second}.Defaults()
	for _, tc := range []struct {
		name     string
		sessions bool
	}{
		{"unique-short", false},
		{"chat-apps", true},
	} {
		p, err := planWorkload(c, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		keyed := 0
		for _, r := range p.Requests {
			if r.Session != "" {
				keyed++
			}
		}
		if tc.sessions != (keyed > 0) || tc.sessions != (p.Sessions > 0) {
			t.Errorf("%s: %d sessions, %d of %d requests keyed", tc.name, p.Sessions, keyed, len(p.Requests))
		}
	}
}
