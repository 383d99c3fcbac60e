package ha

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/kvxds/kvxds/inflight"
)

// Requests in flight across instances.
//
// A pool that bounds prompt bytes on every Envoy's load counts the
// requests its Envoys' upstream logs report, and each Envoy logs to the
// instance it is attached to: alone, each of k instances would see about
// 1/k of the fleet's load, and its Envoys' bound would loosen k-fold.
// So every instance that follows another reports its own figures to it
// (the followed instance, or the leader that the decisions name) once per
// load interval, and gets back the figures of every other instance that
// reports there, with the receiver's own: a star around the leader, in
// which each instance serves the fleet's sum. The figures are no
// decision (they move no key, only where a bound overflows), so they
// need not be identical across instances, only whole; they expire after
// LoadTTL of their sender's intervals, so an instance that dies or stops
// reporting drops out of the sum, and an instance that cannot reach its
// peers serves its own figures, as without peers.
//
// The same reports carry the requests the follower's Envoys logged since
// its last report, counted by key value (Observation): the leader adds
// them to its hot-key and adapter sketches, so that it decides from
// every instance's logs.

// LoadPath is where an instance's admin server takes the load reports of
// the instances that follow it (POST, a LoadReport; the answer is one).
const LoadPath = "/ha/load"

// Bounds of what an instance accepts from its peers.
const (
	// LoadTTL is how many of its sender's intervals a report counts for.
	LoadTTL = 5
	// MaxLoadReporters is the most instances whose reports are kept; a
	// new one beyond it is refused until one expires.
	MaxLoadReporters = 64
	// MaxLoadReportBytes bounds a report's JSON.
	MaxLoadReportBytes = 8 << 20
	// MaxLoadPools bounds the pools of a report, MaxLoadHosts the
	// replicas of one pool.
	MaxLoadPools = 1024
	MaxLoadHosts = 1 << 14
	// MaxLoadAdapters bounds the adapters listed for one replica.
	MaxLoadAdapters = 64
	// Intervals outside [MinLoadInterval, MaxLoadInterval] are clamped.
	MinLoadInterval = 10 * time.Millisecond
	MaxLoadInterval = time.Minute
)

// LoadReport is one instance's figures for another: its own requests in
// flight by pool, as it reports them, or, in the answer, every other
// reporting instance's and the answering instance's own, summed.
type LoadReport struct {
	// Instance is the sender's identity.
	Instance string `json:"instance"`
	// IntervalMS is how often the sender reports, in milliseconds.
	IntervalMS int64 `json:"interval_ms"`
	// Pools are the figures by pool.
	Pools map[string]inflight.Load `json:"pools,omitempty"`
	// Observed are the requests the sender's Envoys logged since its
	// last report, counted by key value (never in an answer).
	Observed []Observation `json:"observed,omitempty"`
}

// Observation counts the requests of one key value that an instance's
// Envoys logged: a follower forwards them with its report, so that the
// leader decides hot keys and adapter placements from every instance's
// logs, not from its own Envoys' alone.
type Observation struct {
	Pool string `json:"pool"`
	// Kind is what the leader counts them for: ObservedHotKeys or
	// ObservedAdapters.
	Kind string `json:"kind"`
	// Key is the key's index in the pool's chain (for adapters, the
	// adapter or the base model), Value its value.
	Key   int    `json:"key"`
	Value string `json:"value"`
	N     uint32 `json:"n"`
}

// Observation kinds.
const (
	ObservedHotKeys  = "hot_keys"
	ObservedAdapters = "adapters"
)

// MaxObservations bounds the distinct key values one report forwards;
// the requests of values beyond it are dropped (counted).
const MaxObservations = 8192

// upstream is the entry of the figures an instance's own reports are
// answered with: a report's Instance is never empty.
const upstream = ""

// LoadExchange holds this instance's own figures and its peers': those of
// the instances that report to it, and the answer to its own last report.
// It is safe for concurrent use.
type LoadExchange struct {
	id  string
	now func() time.Time

	mu       sync.Mutex
	own      map[string]inflight.Load
	interval time.Duration
	peers    map[string]loadEntry // by instance; upstream is the answer to ours
	// outbox counts the requests logged here since the last report, by
	// key value (at most MaxObservations); absorb takes the ones other
	// instances forward.
	outbox  map[obsKey]uint32
	dropped uint64
	absorb  func([]Observation)
}

type obsKey struct {
	pool, kind string
	key        int
	value      string
}

type loadEntry struct {
	until time.Time
	pools map[string]inflight.Load
}

// NewLoadExchange returns the exchange of instance id; now is its clock
// (nil: time.Now).
func NewLoadExchange(id string, now func() time.Time) *LoadExchange {
	if now == nil {
		now = time.Now
	}
	return &LoadExchange{id: id, now: now, own: map[string]inflight.Load{}, interval: time.Second, peers: map[string]loadEntry{},
		outbox: map[obsKey]uint32{}}
}

// OnObserved sets where the observations other instances forward go.
func (x *LoadExchange) OnObserved(absorb func([]Observation)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.absorb = absorb
}

// Forward counts one request logged here, to forward with the next
// report. A new key value beyond MaxObservations is dropped.
func (x *LoadExchange) Forward(pool, kind string, key int, value string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := obsKey{pool, kind, key, value}
	if n, ok := x.outbox[k]; ok {
		if n < math.MaxUint32 {
			x.outbox[k] = n + 1
		}
		return
	}
	if len(x.outbox) >= MaxObservations {
		x.dropped++
		return
	}
	x.outbox[k] = 1
}

// Waiting reports whether observations wait for the next report.
func (x *LoadExchange) Waiting() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.outbox) > 0
}

// DroppedObservations is how many requests Forward dropped.
func (x *LoadExchange) DroppedObservations() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.dropped
}

// takeOutbox empties the outbox into observations, sorted. The caller
// holds mu.
func (x *LoadExchange) takeOutboxLocked() []Observation {
	if len(x.outbox) == 0 {
		return nil
	}
	out := make([]Observation, 0, len(x.outbox))
	for k, n := range x.outbox {
		out = append(out, Observation{Pool: k.pool, Kind: k.kind, Key: k.key, Value: k.value, N: n})
	}
	clear(x.outbox)
	slices.SortFunc(out, func(a, b Observation) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value))
	})
	return out
}

// SetOwn records this instance's own figures for pool (ok false: it has
// none, its Envoys send no load logs), which it reports and answers with.
func (x *LoadExchange) SetOwn(pool string, l inflight.Load, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ok {
		x.own[pool] = l
	} else {
		delete(x.own, pool)
	}
}

// SetPools keeps this instance's own figures for pools only, and sets
// how often it reports: the shortest of their load intervals.
func (x *LoadExchange) SetPools(intervals map[string]time.Duration) {
	x.mu.Lock()
	defer x.mu.Unlock()
	maps.DeleteFunc(x.own, func(p string, _ inflight.Load) bool { _, ok := intervals[p]; return !ok })
	x.interval = time.Second
	for _, iv := range intervals {
		if iv > 0 && iv < x.interval {
			x.interval = iv
		}
	}
	x.interval = clampInterval(x.interval)
}

// Interval is how often this instance reports.
func (x *LoadExchange) Interval() time.Duration {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.interval
}

// Peers returns the other instances' figures for pool, summed over every
// report not yet expired, and whether any carries the pool.
func (x *LoadExchange) Peers(pool string) (inflight.Load, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expireLocked()
	var sum inflight.Load
	ok := false
	for _, id := range slices.Sorted(maps.Keys(x.peers)) {
		if l, has := x.peers[id].pools[pool]; has {
			sum, ok = sum.Add(l), true
		}
	}
	return sum, ok
}

// Reporters is how many instances' reports count now, not counting the
// answer to this instance's own.
func (x *LoadExchange) Reporters() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expireLocked()
	return x.reportersLocked()
}

func (x *LoadExchange) reportersLocked() int {
	n := len(x.peers)
	if _, ok := x.peers[upstream]; ok {
		n--
	}
	return n
}

// DropUpstream forgets the answer to this instance's last report, and
// the observations waiting for the next: it no longer reports (it
// leads), or reports elsewhere.
func (x *LoadExchange) DropUpstream() {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.peers, upstream)
	clear(x.outbox)
}

func (x *LoadExchange) expireLocked() {
	now := x.now()
	maps.DeleteFunc(x.peers, func(_ string, e loadEntry) bool { return !now.Before(e.until) })
}

func clampInterval(d time.Duration) time.Duration {
	return min(max(d, MinLoadInterval), MaxLoadInterval)
}

// ErrTooManyReporters refuses a report from a new instance while
// MaxLoadReporters others count.
var ErrTooManyReporters = errors.New("too many instances report their load")

// take stores report r and returns this instance's answer: its own
// figures and every other reporter's, by pool (the upstream answer
// excluded, so that no figure goes round a cycle).
func (x *LoadExchange) take(r LoadReport) (LoadReport, error) {
	if err := checkReport(r); err != nil {
		return LoadReport{}, err
	}
	answer, absorb, err := x.takeLocked(r)
	if err == nil && absorb != nil && len(r.Observed) > 0 {
		absorb(r.Observed)
	}
	return answer, err
}

func (x *LoadExchange) takeLocked(r LoadReport) (LoadReport, func([]Observation), error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expireLocked()
	if _, known := x.peers[r.Instance]; !known && x.reportersLocked() >= MaxLoadReporters {
		return LoadReport{}, nil, ErrTooManyReporters
	}
	x.peers[r.Instance] = loadEntry{
		until: x.now().Add(LoadTTL * clampInterval(time.Duration(r.IntervalMS)*time.Millisecond)),
		pools: r.Pools,
	}
	answer := LoadReport{Instance: x.id, IntervalMS: x.interval.Milliseconds(), Pools: maps.Clone(x.own)}
	for _, id := range slices.Sorted(maps.Keys(x.peers)) {
		if id == r.Instance || id == upstream {
			continue
		}
		for p, l := range x.peers[id].pools {
			answer.Pools[p] = answer.Pools[p].Add(l)
		}
	}
	return answer, x.absorb, nil
}

// checkReport says what is wrong with a report, if anything.
func checkReport(r LoadReport) error {
	if r.Instance == "" || len(r.Instance) > 253 {
		return fmt.Errorf("instance %q: want 1 to 253 bytes", r.Instance)
	}
	if len(r.Pools) > MaxLoadPools {
		return fmt.Errorf("%d pools, above %d", len(r.Pools), MaxLoadPools)
	}
	for p, l := range r.Pools {
		if len(l.Bytes) > MaxLoadHosts || len(l.Adapters) > MaxLoadHosts {
			return fmt.Errorf("pool %q: more than %d replicas", p, MaxLoadHosts)
		}
		for h, names := range l.Adapters {
			if len(names) > MaxLoadAdapters {
				return fmt.Errorf("pool %q: replica %q: more than %d adapters", p, h, MaxLoadAdapters)
			}
		}
		if len(l.Went) > inflight.MaxWent {
			return fmt.Errorf("pool %q: more than %d keys sent away", p, inflight.MaxWent)
		}
		if !inflight.ValidSeen(l.Seen) {
			return fmt.Errorf("pool %q: keys placed: want %d lowercase hex digits", p, inflight.SeenBits/4)
		}
		for k := range l.Went {
			if !inflight.WentKey(k) {
				return fmt.Errorf("pool %q: key %q sent away: want eight lowercase hex digits", p, k)
			}
		}
	}
	if len(r.Observed) > MaxObservations {
		return fmt.Errorf("%d observations, above %d", len(r.Observed), MaxObservations)
	}
	for _, o := range r.Observed {
		if o.Pool == "" || len(o.Pool) > 253 || o.Kind != ObservedHotKeys && o.Kind != ObservedAdapters ||
			o.Key < 0 || o.Key > 255 || o.Value == "" || len(o.Value) > 256 || o.N == 0 {
			return fmt.Errorf("observation %+.80v: want a pool, a kind, a key index 0..255, a value of 1..256 bytes and a count", o)
		}
	}
	return nil
}

// ServeHTTP takes a POSTed LoadReport and answers with this instance's.
func (x *LoadExchange) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a load report", http.StatusMethodNotAllowed)
		return
	}
	var rep LoadReport
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxLoadReportBytes))
	if err := dec.Decode(&rep); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "load report too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "load report: "+err.Error(), http.StatusBadRequest)
		return
	}
	answer, err := x.take(rep)
	switch {
	case errors.Is(err, ErrTooManyReporters):
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	case err != nil:
		http.Error(w, "load report: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

// Report sends this instance's own figures to the instance whose admin
// address is base ("http://host:port") and keeps its answer as the
// upstream figures until LoadTTL of that instance's intervals pass.
func (x *LoadExchange) Report(ctx context.Context, client *http.Client, base string) error {
	x.mu.Lock()
	rep := LoadReport{Instance: x.id, IntervalMS: x.interval.Milliseconds(), Pools: maps.Clone(x.own), Observed: x.takeOutboxLocked()}
	x.mu.Unlock()
	body, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+LoadPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", base+LoadPath, resp.Status, bytes.TrimSpace(msg))
	}
	var answer LoadReport
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxLoadReportBytes)).Decode(&answer); err != nil {
		return fmt.Errorf("reading the load answer of %s: %w", base, err)
	}
	if err := checkReport(answer); err != nil {
		return fmt.Errorf("the load answer of %s: %w", base, err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.peers[upstream] = loadEntry{
		until: x.now().Add(LoadTTL * clampInterval(time.Duration(answer.IntervalMS)*time.Millisecond)),
		pools: answer.Pools,
	}
	return nil
}
