package ha

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"
)

type recorder struct {
	mu      sync.Mutex
	docs    []Document
	leading []bool
}

func (r *recorder) Leading(l bool, _ int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leading = append(r.leading, l)
}

func (r *recorder) Published(d Document) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.docs = append(r.docs, d)
}

func (r *recorder) last() (Document, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.docs) == 0 {
		return Document{}, 0
	}
	return r.docs[len(r.docs)-1], len(r.docs)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A follower long-polls a board: it gets each new document within one
// round trip, not at a polling period, never leads, and keeps going
// across the board's server restarting.
func TestFollowerLongPolls(t *testing.T) {
	board := NewBoard()
	mux := http.NewServeMux()
	mux.Handle("GET "+DecisionsPath, board)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var reach []bool
	var mu sync.Mutex
	f := &Follower{URL: srv.URL, Poll: 5 * time.Second, Retry: 50 * time.Millisecond, OnReach: func(ok bool, _ error) {
		mu.Lock()
		reach = append(reach, ok)
		mu.Unlock()
	}}
	if err := f.Publish(context.Background(), Document{}); err != ErrNotLeader {
		t.Fatalf("a follower published: %v", err)
	}
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, rec) }()

	// Nothing published yet: the follower waits without error.
	time.Sleep(100 * time.Millisecond)
	if _, n := rec.last(); n != 0 {
		t.Fatal("a document arrived before any was published")
	}
	for i := range 5 {
		doc := Document{Leader: "a", Term: 3, Time: time.Now().UTC().Truncate(time.Millisecond), Pools: Decisions{
			"chat": {"vllm-0": {Weight: uint32(1 + i), Saturated: true}},
		}}
		start := time.Now()
		board.Set(doc)
		waitFor(t, "the document", func() bool { d, _ := rec.last(); return reflect.DeepEqual(d, doc) })
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("document %d took %v: not long-polled", i, d)
		}
	}
	rec.mu.Lock()
	leading := rec.leading
	rec.mu.Unlock()
	if len(leading) != 1 || leading[0] {
		t.Errorf("Leading calls %v, want one false", leading)
	}

	// Unreachable: reported, and the follower carries on once it is back.
	// The listener first: the client retries a GET whose reused
	// connection closed under it, and that retry must not find the server.
	srv.Listener.Close()
	srv.CloseClientConnections()
	waitFor(t, "a failed attempt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reach) > 0 && !reach[len(reach)-1]
	})
	cancel()
	<-done
}

// A long poll ends with 503 when its server shuts down, not with a
// truncated 200.
func TestBoardShutdown(t *testing.T) {
	b := NewBoard()
	b.Set(Document{Leader: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, DecisionsPath+"?wait=10s", nil).WithContext(ctx)
	_, etag, _ := b.current()
	req.Header.Set("If-None-Match", etag)
	w := httptest.NewRecorder()
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	b.ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", w.Code)
	}
	// Without If-None-Match: the document at once.
	w = httptest.NewRecorder()
	b.ServeHTTP(w, httptest.NewRequest(http.MethodGet, DecisionsPath+"?wait=10s", nil))
	if w.Code != http.StatusOK || w.Header().Get("ETag") != etag {
		t.Errorf("status %d etag %q, want 200 %q", w.Code, w.Header().Get("ETag"), etag)
	}
}
