// Package hotkeys estimates which key values carry a large share of a
// pool's requests, from the requests the data plane logs, and decides the
// pool's hot-key table (fleet.HotKey) from those estimates.
//
// A Sketch is a bounded top-k of one pool's key values (Space-Saving, with
// counts that decay exponentially with a half-life): it holds at most
// Capacity values whatever the traffic, so a flood of distinct keys
// cannot grow memory, and a key that carries a share s of the traffic is
// always among them when s is above 1/Capacity. Decide turns the sketch
// into a table with hysteresis, so that a table changes (a route update)
// only when a key enters, leaves or changes its spread level.
//
// The package is pure: time is passed in, and identical observations give
// identical decisions.
package hotkeys

import (
	"container/heap"
	"math"
	"sync"
	"time"
)

// Capacity is the number of key values one pool's sketch tracks. Each
// entry holds a value of at most MaxValueLen bytes, so a sketch stays
// under about 400 KiB (measured: see TestFloodStaysBounded).
const Capacity = 1024

// MaxValueLen is the longest key value tracked; longer ones are dropped
// and counted. Body keys are 16 hex digits; header keys are short ids.
const MaxValueLen = 128

// rescaleAt bounds the growth of the forward-decayed counts: when the
// weight of a new observation passes it, every count is divided by it.
const rescaleAt = 1 << 40

// ValidValue reports whether a key value can be tracked: 1 to MaxValueLen
// printable ASCII characters (header values are text; anything else is a
// malformed entry, not a key).
func ValidValue(v string) bool {
	if v == "" || len(v) > MaxValueLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// ID is a tracked key: its index in the pool's key chain and its value.
type ID struct {
	Key   int
	Value string
}

// entry is one tracked key. count and err are forward-decayed: scaled by
// the weight of the sketch's landmark, so that every count decays at the
// same rate without being touched.
type entry struct {
	id    ID
	count float64 // estimated (over-)count
	err   float64 // the most count may overestimate by
	index int     // in the heap
}

// Sketch is one pool's bounded top-k of key values. It is safe for
// concurrent use.
type Sketch struct {
	halfLife time.Duration

	mu       sync.Mutex
	landmark time.Time // forward decay's origin: weight 1
	entries  map[ID]*entry
	heap     minHeap
	total    float64 // forward-decayed count of every observation
	dropped  uint64  // observations of values not tracked (ValidValue)
	// observed counts observations since the last Decide, so that a
	// pool without traffic keeps its table.
	observed uint64
}

// NewSketch returns an empty sketch whose counts halve every halfLife
// (zero or less: never).
func NewSketch(halfLife time.Duration) *Sketch {
	return &Sketch{halfLife: halfLife, entries: make(map[ID]*entry, Capacity)}
}

// weight is the forward-decay weight of an observation at now, relative
// to the landmark. The caller holds mu.
func (s *Sketch) weight(now time.Time) float64 {
	if s.halfLife <= 0 {
		return 1
	}
	if s.landmark.IsZero() {
		s.landmark = now
	}
	// An observation older than the landmark (clocks of log entries
	// are not monotonic) weighs less, as it should.
	return math.Exp2(float64(now.Sub(s.landmark)) / float64(s.halfLife))
}

// Observe counts one request of the key at index key with value v at
// time now. It reports false, and counts the drop, for a value that
// ValidValue refuses.
func (s *Sketch) Observe(key int, v string, now time.Time) bool {
	return s.ObserveN(key, v, 1, now)
}

// ObserveN counts n requests of the key at index key with value v at
// time now, as n calls of Observe would (n at least 1): another
// instance's requests, counted there.
func (s *Sketch) ObserveN(key int, v string, n uint32, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key < 0 || !ValidValue(v) || n == 0 {
		s.dropped++
		return false
	}
	w := s.weight(now)
	if w >= rescaleAt {
		s.rescale(w)
		w = 1
		s.landmark = now
	}
	w *= float64(n)
	s.total += w
	s.observed += uint64(n)
	id := ID{key, v}
	if e, ok := s.entries[id]; ok {
		e.count += w
		heap.Fix(&s.heap, e.index)
		return true
	}
	if len(s.heap) < Capacity {
		e := &entry{id: id, count: w}
		s.entries[id] = e
		heap.Push(&s.heap, e)
		return true
	}
	// Space-Saving: the new key takes the place of the least counted,
	// inheriting its count as its possible overestimate.
	e := s.heap[0]
	delete(s.entries, e.id)
	e.id, e.err, e.count = id, e.count, e.count+w
	s.entries[id] = e
	heap.Fix(&s.heap, 0)
	return true
}

// rescale divides every count by w. The caller holds mu.
func (s *Sketch) rescale(w float64) {
	for _, e := range s.heap {
		e.count /= w
		e.err /= w
	}
	s.total /= w
}

// decay is the factor from forward-decayed counts to counts as of now.
// The caller holds mu.
func (s *Sketch) decay(now time.Time) float64 {
	if s.halfLife <= 0 || s.landmark.IsZero() {
		return 1
	}
	return 1 / s.weight(now)
}

// Total is the decayed count of the requests observed, as of now.
func (s *Sketch) Total(now time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total * s.decay(now)
}

// Dropped is the number of observations of values not tracked.
func (s *Sketch) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Len is the number of keys tracked, at most Capacity.
func (s *Sketch) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heap)
}

// Estimate is a tracked key's share of the requests observed.
type Estimate struct {
	ID
	// Share is the key's guaranteed share: its count less its possible
	// overestimate, over the total.
	Share float64
}

// Shares returns the share of every tracked key whose guaranteed share
// is at least min, and the decayed total as of now.
func (s *Sketch) Shares(now time.Time, min float64) ([]Estimate, float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sharesLocked(min), s.total * s.decay(now)
}

func (s *Sketch) sharesLocked(min float64) []Estimate {
	if s.total <= 0 {
		return nil
	}
	var out []Estimate
	for _, e := range s.heap {
		if sh := (e.count - e.err) / s.total; sh >= min {
			out = append(out, Estimate{ID: e.id, Share: sh})
		}
	}
	return out
}

// minHeap orders entries by count, least first.
type minHeap []*entry

func (h minHeap) Len() int { return len(h) }
func (h minHeap) Less(i, j int) bool {
	if h[i].count != h[j].count {
		return h[i].count < h[j].count
	}
	// Equal counts: a fixed order, so that the entry evicted does not
	// depend on the map's.
	if h[i].id.Key != h[j].id.Key {
		return h[i].id.Key < h[j].id.Key
	}
	return h[i].id.Value < h[j].id.Value
}
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *minHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *minHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
