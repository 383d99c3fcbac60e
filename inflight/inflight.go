// Package inflight counts each replica's prompt bytes in flight across
// every Envoy that logs to this kvxds instance: Envoy's router writes an
// upstream log entry when a request's upstream stream starts
// (UpstreamPoolReady, flush_upstream_log_on_upstream_stream) and another
// when it ends (UpstreamEnd), each with the request's id, its
// content-length and its upstream host. A Tracker pairs them and sums
// what is open per pool and replica; Snapshot is what kvxds serves to
// the pick filters, so that every Envoy bounds a replica's load by what
// the whole fleet sent it, not by its own share.
//
// Memory is bounded: a pool holds at most MaxOpen open requests (a flood
// of starts without ends is counted and dropped), a request open longer
// than MaxAge is forgotten, and a stream that closes takes its open
// requests with it (its Envoy's requests are no longer observed; counting
// them forever would pin their replicas' load). The package is pure: time
// is passed in.
//
// A request's bytes count until its prompt is computed, not until its
// response ends: what a new request waits for on a replica is prompts,
// and a replica decoding many replies computes none. Envoy's upstream log
// marks no first token, so the filter that chose the replica (a pool's
// pick filter, a decode pool's prefill filter) names the requests whose
// prompt was computed (their x-request-id) on the next request it
// handles (bodykey.ComputedHeader), whose start entry carries them to
// Computed; a request never named counts until its end.
//
// In a pool serving LoRA adapters the start entries also name each
// request's adapter, and a snapshot says which adapters every replica has
// requests in flight for: an engine runs at most max_lora adapters at
// once, so a request for another one waits there, and the pick filters
// prefer a replica where their adapter runs or a slot is free.
//
// The start entries also say where each request placed by its key went
// (bodykey.WentHeader): its key's hash, and whether the filter sent it
// away from its slot's replica (over the bound there). A snapshot names
// the keys whose last request went away, and where (at most MaxWent, for
// WentTTL): every Envoy then sends such a key's next request where its
// prefix was last computed, not back to its slot's replica. It also names
// every key placed within WentTTL, home or away, as bits of a set (Seen):
// a key in none has no prefix cached anywhere, so moving it costs no hit,
// and the pick filters bound it tighter.
package inflight

import (
	"cmp"
	"maps"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// MaxOpen is the most open requests one pool tracks: about 200 bytes
// each, so 64 MiB at most per pool whatever the logs say.
const MaxOpen = 1 << 18

// MaxAge is how long a request may stay open without its end entry
// (lost, or the stream cut) before it stops counting: a streamed
// generation may run for minutes.
const MaxAge = 10 * time.Minute

// Results of an entry, as kvxds_load_log_entries_total labels them.
const (
	Started   = "started"    // a request's upstream stream started
	Ended     = "ended"      // an open request ended
	Unmatched = "unmatched"  // an end whose start was not seen (dropped)
	Duplicate = "duplicate"  // a second start of an open request (dropped)
	Full      = "pool_full"  // a start past MaxOpen (dropped)
	Expired   = "expired"    // open past MaxAge, forgotten
	Closed    = "stream_end" // open when its stream closed, forgotten
	Computed  = "computed"   // an open request's prompt was computed
)

// Results lists every result, for metrics.
var Results = []string{Started, Ended, Unmatched, Duplicate, Full, Expired, Closed, Computed}

type open struct {
	stream uint64
	// computed: the prompt was computed, its bytes no longer count.
	computed bool
	Attempt
}

// Attempt is a request's upstream attempt, as its start entry logs it.
type Attempt struct {
	// Host is the replica's address, Bytes the request body's length.
	Host  string
	Bytes uint64
	// ID is the request's x-request-id, by which the pick filter names
	// it computed ("" for none).
	ID string
	// Adapter is the LoRA adapter the request names, "" for none.
	Adapter string
	// Key is the hash of the key the pick filter placed the request by
	// (WentKey), "" for none; Away, that the filter sent it to another
	// replica than its slot's.
	Key  string
	Away bool
	// At is when the attempt started.
	At time.Time
}

// Went is where a key's last request went away from its slot's replica:
// the replica's address, and when (ms since the epoch). A Went without a
// host says the key's last request went home: Load.Add keeps each key's
// latest, so an instance that saw a key go home after another saw it go
// away takes it out of their sum, and a table serves only those with a
// host.
type Went struct {
	Host string `json:"host"`
	At   int64  `json:"at"`
}

// MaxWent is the most keys a pool remembers sent away; past it the
// oldest quarter is forgotten. WentTTL is how long one is remembered.
const (
	MaxWent = 4096
	WentTTL = 10 * time.Minute
)

// WentKey reports whether s is a key hash as the pick filters log it:
// eight lowercase hex digits.
func WentKey(s string) bool { return len(s) == 8 && lowerHex(s) }

// lowerHex reports whether s is lowercase hex digits only.
func lowerHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

type pool struct {
	open     map[string]open           // by request key
	byID     map[string][]string       // request keys by request id
	bytes    map[string]uint64         // by host, of requests not computed
	adapters map[string]map[string]int // requests by host and adapter
	went     map[string]Went           // by key hash
	seen     map[uint16]int64          // ms a key of each bit was last placed
	// served are the keys the table served names as sent away, from
	// every instance's Envoys (SetServed).
	served map[string]bool
}

// Load is a pool's requests in flight, by replica address.
type Load struct {
	Bytes map[string]uint64 `json:"bytes,omitempty"`
	// Adapters are, by replica, the adapters with requests in flight
	// there, sorted; a replica without any is absent.
	Adapters map[string][]string `json:"adapters,omitempty"`
	// Went are, by key hash, the keys whose last request the pick
	// filters sent away from their slot's replica, within WentTTL.
	Went map[string]Went `json:"went,omitempty"`
	// Seen are the keys placed within WentTTL, home or away, as a set of
	// SeenBits bits in hex (SeenSet), "" for none.
	Seen string `json:"seen,omitempty"`
}

// Add returns the figures of l and o together: their bytes summed, their
// adapters joined (sorted, once each). Neither is changed.
func (l Load) Add(o Load) Load {
	out := Load{Bytes: maps.Clone(l.Bytes)}
	if out.Bytes == nil && len(o.Bytes) > 0 {
		out.Bytes = make(map[string]uint64, len(o.Bytes))
	}
	for h, b := range o.Bytes {
		out.Bytes[h] += b
	}
	for _, m := range []map[string][]string{l.Adapters, o.Adapters} {
		for h, names := range m {
			if out.Adapters == nil {
				out.Adapters = map[string][]string{}
			}
			out.Adapters[h] = append(out.Adapters[h], names...)
		}
	}
	for h, names := range out.Adapters {
		slices.Sort(names)
		out.Adapters[h] = slices.Compact(names)
	}
	out.Went = latestWent(l.Went, o.Went)
	out.Seen = OrSeen(l.Seen, o.Seen)
	return out
}

// latestWent is a and b together, each key's latest (the lower address
// at the same time), whichever instance saw it; nil if both are empty.
func latestWent(a, b map[string]Went) map[string]Went {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[string]Went, len(a)+len(b))
	maps.Copy(out, a)
	for k, w := range b {
		if c, ok := out[k]; !ok || w.At > c.At || w.At == c.At && w.Host < c.Host {
			out[k] = w
		}
	}
	return out
}

// SeenBits is the size of the set of keys placed (Load.Seen): a key is
// bit SeenBit of it. 65,536 bits, sixteen KiB of hex in the table, name
// 10,000 keys with one in seven false positives (a new key bounded as
// one with a cache: as without the set).
const SeenBits = 1 << 16

// SeenBit is key hash k's bit in the set: its first four hex digits.
func SeenBit(k string) (uint16, bool) {
	if !WentKey(k) {
		return 0, false
	}
	var b uint16
	for _, c := range []byte(k[:4]) {
		b = b<<4 | uint16(hexVal(c))
	}
	return b, true
}

func hexVal(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// SeenSet is the set of bits as SeenBits/4 lowercase hex digits, bit i
// in digit i/4 as 8>>(i%4); "" for none.
func SeenSet(bits []uint16) string {
	if len(bits) == 0 {
		return ""
	}
	d := make([]byte, SeenBits/4)
	for _, b := range bits {
		d[b/4] |= 8 >> (b % 4)
	}
	for i, v := range d {
		d[i] = "0123456789abcdef"[v]
	}
	return string(d)
}

// ValidSeen reports whether s is a set as SeenSet writes it.
func ValidSeen(s string) bool { return s == "" || len(s) == SeenBits/4 && lowerHex(s) }

// SeenCount is how many bits of set s are set: the keys placed, less
// those whose bit another key had set.
func SeenCount(s string) int {
	n := 0
	for _, c := range []byte(s) {
		n += bits.OnesCount8(hexVal(c))
	}
	return n
}

// OrSeen is the union of two sets; one that is not valid counts as none.
func OrSeen(a, b string) string {
	if !ValidSeen(a) || a == "" {
		if ValidSeen(b) {
			return b
		}
		return ""
	}
	if !ValidSeen(b) || b == "" {
		return a
	}
	d := []byte(a)
	for i := range d {
		d[i] = "0123456789abcdef"[hexVal(a[i])|hexVal(b[i])]
	}
	return string(d)
}

// Tracker pairs the start and end entries of every pool's requests.
// It is safe for concurrent use.
type Tracker struct {
	mu    sync.Mutex
	pools map[string]*pool
	// streams are the streams that sent an entry, by id: a pool whose
	// Envoys send no load logs has no view (Snapshot's ok is false).
	streams map[uint64]map[string]bool
	count   func(result string, n int)
}

// New returns an empty tracker; count, if not nil, is told each entry's
// result.
func New(count func(result string, n int)) *Tracker {
	if count == nil {
		count = func(string, int) {}
	}
	return &Tracker{pools: map[string]*pool{}, streams: map[uint64]map[string]bool{}, count: count}
}

func (t *Tracker) poolLocked(name string) *pool {
	p := t.pools[name]
	if p == nil {
		p = &pool{open: map[string]open{}, byID: map[string][]string{}, bytes: map[string]uint64{}, adapters: map[string]map[string]int{}, went: map[string]Went{}, seen: map[uint16]int64{}}
		t.pools[name] = p
	}
	return p
}

func (t *Tracker) seenLocked(stream uint64, name string) {
	s := t.streams[stream]
	if s == nil {
		s = map[string]bool{}
		t.streams[stream] = s
	}
	s[name] = true
}

// SetServed tells the tracker the keys the table served for pool names
// as sent away (Load.Went with a host, summed over every instance): one
// this instance's Envoys then send home leaves a tombstone, which is
// newer than the away another instance still holds.
func (t *Tracker) SetServed(name string, went map[string]Went) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.poolLocked(name)
	clear(p.served)
	for k, w := range went {
		if w.Host != "" {
			if p.served == nil {
				p.served = make(map[string]bool, len(went))
			}
			p.served[k] = true
		}
	}
}

// Start counts a request of pool, identified by key, whose upstream
// attempt a started.
func (t *Tracker) Start(stream uint64, name, key string, a Attempt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seenLocked(stream, name)
	p := t.poolLocked(name)
	if _, ok := p.open[key]; ok {
		t.count(Duplicate, 1)
		return
	}
	if len(p.open) >= MaxOpen {
		t.count(Full, 1)
		return
	}
	p.open[key] = open{stream: stream, Attempt: a}
	if a.ID != "" {
		p.byID[a.ID] = append(p.byID[a.ID], key)
	}
	p.bytes[a.Host] += a.Bytes
	p.sent(a)
	if a.Adapter != "" {
		m := p.adapters[a.Host]
		if m == nil {
			m = map[string]int{}
			p.adapters[a.Host] = m
		}
		m[a.Adapter]++
	}
	t.count(Started, 1)
}

// sent remembers where a's key went: away from its slot's replica, or
// back to it (then it is forgotten).
func (p *pool) sent(a Attempt) {
	if a.Key == "" {
		return
	}
	if b, ok := SeenBit(a.Key); ok {
		p.seen[b] = max(p.seen[b], a.At.UnixMilli())
	}
	if !a.Away {
		// Home: a key this instance or another sent away leaves a
		// tombstone, so that the instances' sum forgets it. A tombstone
		// already there stays as it is: it outlives the away entries it
		// is newer than by WentTTL.
		if w := p.went[a.Key]; w.Host == "" && !p.served[a.Key] {
			return
		}
		a.Host = ""
	}
	if _, ok := p.went[a.Key]; !ok && len(p.went) >= MaxWent {
		// Forget the oldest quarter (the lower key at the same time):
		// a sort per MaxWent/4 keys.
		keys := slices.SortedFunc(maps.Keys(p.went), func(x, y string) int {
			return cmp.Or(cmp.Compare(p.went[x].At, p.went[y].At), cmp.Compare(x, y))
		})
		for _, k := range keys[:len(keys)/4] {
			delete(p.went, k)
		}
	}
	p.went[a.Key] = Went{Host: a.Host, At: a.At.UnixMilli()}
}

// End stops counting a request of pool.
func (t *Tracker) End(stream uint64, name, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seenLocked(stream, name)
	p := t.poolLocked(name)
	o, ok := p.open[key]
	if !ok {
		t.count(Unmatched, 1)
		return
	}
	p.forget(key, o)
	t.count(Ended, 1)
}

// Computed stops counting the bytes of the open requests of pool that
// stream started with the given ids: their prompts are computed (the
// caller bounds the ids an entry may name).
func (t *Tracker) Computed(stream uint64, name string, ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pools[name]
	if p == nil {
		return
	}
	n := 0
	for _, id := range ids {
		for _, key := range p.byID[id] {
			o := p.open[key]
			if o.stream != stream || o.computed {
				continue
			}
			p.uncount(o)
			o.computed = true
			p.open[key] = o
			n++
		}
	}
	if n > 0 {
		t.count(Computed, n)
	}
}

// uncount takes o's bytes off its host's.
func (p *pool) uncount(o open) {
	if p.bytes[o.Host] <= o.Bytes {
		delete(p.bytes, o.Host)
	} else {
		p.bytes[o.Host] -= o.Bytes
	}
}

func (p *pool) forget(key string, o open) {
	delete(p.open, key)
	if o.ID != "" {
		keys := slices.DeleteFunc(p.byID[o.ID], func(k string) bool { return k == key })
		if len(keys) == 0 {
			delete(p.byID, o.ID)
		} else {
			p.byID[o.ID] = keys
		}
	}
	if !o.computed {
		p.uncount(o)
	}
	if m := p.adapters[o.Host]; o.Adapter != "" && m != nil {
		if m[o.Adapter]--; m[o.Adapter] <= 0 {
			delete(m, o.Adapter)
		}
		if len(m) == 0 {
			delete(p.adapters, o.Host)
		}
	}
}

// CloseStream forgets the open requests a stream started: their ends
// will not come on it.
func (t *Tracker) CloseStream(stream uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name := range t.streams[stream] {
		p := t.pools[name]
		n := 0
		for key, o := range p.open {
			if o.stream == stream {
				p.forget(key, o)
				n++
			}
		}
		if n > 0 {
			t.count(Closed, n)
		}
	}
	delete(t.streams, stream)
}

// Snapshot is pool's requests in flight by replica at now (after
// forgetting requests open longer than MaxAge), and whether any open
// stream logs for the pool: without one there is no view, and the pick
// filters bound on their own counts.
func (t *Tracker) Snapshot(name string, now time.Time) (Load, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := false
	for _, s := range t.streams {
		if s[name] {
			ok = true
			break
		}
	}
	p := t.pools[name]
	if p == nil {
		return Load{}, ok
	}
	n := 0
	for key, o := range p.open {
		if now.Sub(o.At) > MaxAge {
			p.forget(key, o)
			n++
		}
	}
	if n > 0 {
		t.count(Expired, n)
	}
	l := Load{Bytes: maps.Clone(p.bytes)}
	for host, m := range p.adapters {
		if l.Adapters == nil {
			l.Adapters = make(map[string][]string, len(p.adapters))
		}
		l.Adapters[host] = slices.Sorted(maps.Keys(m))
	}
	for k, w := range p.went {
		if now.UnixMilli()-w.At > WentTTL.Milliseconds() {
			delete(p.went, k)
			continue
		}
		if l.Went == nil {
			l.Went = make(map[string]Went, len(p.went))
		}
		l.Went[k] = w
	}
	var bits []uint16
	for b, at := range p.seen {
		if now.UnixMilli()-at > WentTTL.Milliseconds() {
			delete(p.seen, b)
			continue
		}
		bits = append(bits, b)
	}
	l.Seen = SeenSet(bits)
	return l, ok
}

// Forget drops a pool's open requests: it no longer observes load.
func (t *Tracker) Forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pools, name)
	for _, s := range t.streams {
		delete(s, name)
	}
}
