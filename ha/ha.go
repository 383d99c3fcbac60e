// Package ha lets several kvxds instances serve byte-identical
// configuration: exactly one of them, the leader, scrapes the replicas and
// decides weights and saturation, and publishes its decisions; the others
// apply the published decisions to their own discovered fleet. Equal
// policies, replicas and decisions give equal resources and versions, so
// every data plane builds the same hash table whichever instance it is
// attached to.
//
// Two ways to agree: a Kubernetes Lease elects the leader among any
// number of instances, which publish through the API server
// (ha/kubernetes); or, outside Kubernetes, an instance follows one named
// instance's decisions over HTTP (Follower), which serves them on its
// admin address (Board).
package ha

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/weights"
)

// Decisions are a pool's replicas' decisions by identity, by pool.
type Decisions = map[string]map[string]weights.Decision

// Document is a leader's published decisions.
type Document struct {
	// Leader is the identity of the instance that decided.
	Leader string `json:"leader"`
	// Term grows with each new leadership (a Lease's transitions), so a
	// deposed leader's late document loses to its successor's.
	Term int64 `json:"term"`
	// Time is when the leader published it.
	Time  time.Time `json:"time"`
	Pools Decisions `json:"pools"`
	// HotKeys are the pools' hot-key tables the leader decided, by pool;
	// a pool without hot keys is absent.
	HotKeys map[string][]fleet.HotKey `json:"hot_keys,omitempty"`
	// Adapters are the pools' LoRA adapter placements the leader
	// decided, by pool; a pool placing none is absent.
	Adapters map[string]fleet.AdapterPlacement `json:"adapters,omitempty"`
	// Admin is the leader's admin address ("http://host:port"), where
	// the instances that follow it report their requests in flight
	// (LoadPath); empty when it advertises none.
	Admin string `json:"admin,omitempty"`
}

// ErrNotLeader is returned by Publish when this instance does not lead.
var ErrNotLeader = errors.New("not the leader")

// Handler is told what the other instances do.
type Handler interface {
	// Leading is called when this instance starts (true) or stops
	// (false) deciding, with its term.
	Leading(leading bool, term int64)
	// Published is called with every document the leader publishes.
	Published(Document)
}

// Peers connects an instance with the others.
type Peers interface {
	// Run runs until ctx ends, telling h what happens.
	Run(ctx context.Context, h Handler)
	// Publish publishes this instance's decisions. It fails with
	// ErrNotLeader (possibly wrapped) when this instance no longer leads.
	Publish(ctx context.Context, doc Document) error
	// Describe says, for logs and /debug, how this instance agrees.
	Describe() string
}

// Board holds the decisions an instance serves, for instances that follow
// it: GET returns them as JSON with an ETag; a request with If-None-Match
// and ?wait=DURATION waits (at most that long, and at most MaxWait) until
// they change, so a follower learns of a change within one round trip.
type Board struct {
	nonce string // per process, so a restarted leader's ETags never match old ones

	mu      sync.Mutex
	doc     *Document
	seq     uint64
	changed chan struct{} // closed and replaced on every Set
}

// MaxWait bounds a long poll.
const MaxWait = 60 * time.Second

// NewBoard returns an empty board.
func NewBoard() *Board {
	var b [6]byte
	rand.Read(b[:])
	return &Board{nonce: hex.EncodeToString(b[:]), changed: make(chan struct{})}
}

// Set publishes doc on the board.
func (b *Board) Set(doc Document) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.doc = &doc
	b.seq++
	close(b.changed)
	b.changed = make(chan struct{})
}

// Get returns the document on the board, if any.
func (b *Board) Get() (Document, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.doc == nil {
		return Document{}, false
	}
	return *b.doc, true
}

func (b *Board) current() (*Document, string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.doc, fmt.Sprintf(`"%s-%d"`, b.nonce, b.seq), b.changed
}

func (b *Board) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var wait time.Duration
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			http.Error(w, "wait: want a duration such as 30s", http.StatusBadRequest)
			return
		}
		wait = min(d, MaxWait)
	}
	doc, etag, changed := b.current()
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag && wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-changed:
			doc, etag, _ = b.current()
		case <-t.C:
		case <-r.Context().Done():
			// The instance is going away (or the client left).
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("ETag", etag)
	if doc == nil {
		http.Error(w, "no decisions published yet", http.StatusNotFound)
		return
	}
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(doc)
}
