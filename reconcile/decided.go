package reconcile

import (
	"maps"
	"slices"
	"time"
)

// decided is what a leader decides per pool on each pool's interval (hot-
// key tables, adapter placements): its own decisions, the one it started
// from after gaining the lead included, and when it last decided each
// pool. Its owner's lock guards it.
type decided[T any] struct {
	own  map[string]T
	at   map[string]time.Time
	kind decisionKind[T]
}

// decisionKind says how decisions of one kind compare and copy.
type decisionKind[T any] struct {
	equal func(a, b T) bool
	// clone copies a decision, or reports that it is empty (a pool
	// without one is absent).
	clone func(T) (T, bool)
}

func newDecided[T any](k decisionKind[T]) decided[T] {
	return decided[T]{own: map[string]T{}, at: map[string]time.Time{}, kind: k}
}

// run decides, while leading, each pool of names whose interval has
// passed (decide returns its new decision) and reports whether a decision
// changed and when it next has to run (zero: no pool). A follower decides
// nothing and is due an interval from now.
func (d *decided[T]) run(names []string, interval func(string) time.Duration, now time.Time, leading bool, decide func(string) T) (changed bool, next time.Duration) {
	for _, name := range slices.Sorted(slices.Values(names)) {
		iv := interval(name)
		due := d.at[name].Add(iv)
		if !leading {
			due = now.Add(iv)
		} else if !now.Before(due) {
			v := decide(name)
			if !d.kind.equal(v, d.own[name]) {
				d.own[name] = v
				changed = true
			}
			d.at[name] = now
			due = now.Add(iv)
		}
		if w := due.Sub(now); next == 0 || w < next {
			next = w
		}
	}
	return changed, next
}

// copy is a copy of the decisions, empty ones left out.
func (d *decided[T]) copy() map[string]T { return cloneDecided(d.own, d.kind) }

// seed makes a new leader start from its predecessor's decisions m, and
// decide the pools one interval after now.
func (d *decided[T]) seed(m map[string]T, pools []string, now time.Time) {
	d.own = cloneDecided(m, d.kind)
	d.at = map[string]time.Time{}
	for _, name := range pools {
		d.at[name] = now
	}
}

// forget drops a pool that is gone.
func (d *decided[T]) forget(name string) {
	delete(d.own, name)
	delete(d.at, name)
}

func cloneDecided[T any](m map[string]T, k decisionKind[T]) map[string]T {
	out := make(map[string]T, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if v, ok := k.clone(m[name]); ok {
			out[name] = v
		}
	}
	return out
}
