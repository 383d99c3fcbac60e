package weights

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// ReplicaView is what a Runner knows of one replica: its decision, why,
// its latest scrape and signals, and its recent history.
type ReplicaView struct {
	Decision    Decision
	HasDecision bool
	// Reason says why a replica is saturated or stale; empty otherwise.
	Reason string
	// LastScrape is when the latest scrape ended, LastError its error
	// (nil when it succeeded).
	LastScrape time.Time
	LastError  error
	// Signals are the latest good signals (all NaN before any), taken at
	// LastGood. Their TTFT histogram is shared: do not modify it.
	Signals  Signals
	LastGood time.Time
	// Window covers the last HistoryWindow of good scrapes.
	Window Window
	// Trend covers the last TrendWindow of good scrapes in TrendStep
	// steps, oldest first.
	Trend []TrendPoint
	// Carried are the signals the latest page read with the pool's
	// profile carried, read at PageRead (zero before any). A page with
	// none of the core signals (a wrong engine, path or model) carried
	// none; a scrape that read no page (refused, timed out, not the
	// text format) leaves both as they were.
	Carried  SignalSet
	PageRead time.Time
}

// PoolView is what a Runner knows of one pool.
type PoolView struct {
	// Fallback is set while too many replicas are saturated to take any
	// out.
	Fallback bool
	// Escapes counts replicas that became saturated in the last hour,
	// WeightMoves weight changes (each moves hash keys), as of the
	// Runner's clock.
	Escapes, WeightMoves int
	// Changes are the latest decisions that changed a replica (at most
	// MaxChanges, within the last hour), newest first.
	Changes  []Change
	Replicas map[string]ReplicaView
}

// Kinds of Change.
const (
	ChangeEscape = "escape" // out of the hash table for saturation
	ChangeReturn = "return" // back in after saturation
	ChangeWeight = "weight" // weight multiplier moved
)

// MaxChanges bounds the changes a Runner keeps per pool.
const MaxChanges = 32

// Change is one decision a Runner changed for one replica.
type Change struct {
	Time    time.Time
	Replica string
	Kind    string // ChangeEscape, ChangeReturn or ChangeWeight
	// From and To are the weight multipliers before and after.
	From, To uint32
	// Reason says what the decision followed: the threshold crossed, the
	// calm run, the free capacity.
	Reason string
}

// View returns what the Runner knows of every pool it scrapes.
func (r *Runner) View() map[string]PoolView {
	r.mu.Lock()
	pools := maps.Clone(r.pools)
	r.mu.Unlock()
	now := r.now()
	out := make(map[string]PoolView, len(pools))
	for name, pr := range pools {
		out[name] = pr.view(now)
	}
	return out
}

// replicaRecord is what a poolRunner keeps of a replica for View.
type replicaRecord struct {
	lastScrape time.Time
	lastErr    error
	reason     string // why it saturated, set when it does
	hist       *History
	trend      Trend
	carried    SignalSet
	pageRead   time.Time
}

// observe records a cycle's observations and decisions for View. It runs
// before p.decisions is replaced, so those are the previous cycle's.
func (p *poolRunner) observe(ids []string, obs []Observation, res Result, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	members := make(map[string]bool, len(ids))
	for _, id := range ids {
		members[id] = true
		if p.replicas[id] == nil {
			p.replicas[id] = &replicaRecord{hist: NewHistory(HistoryWindow)}
		}
	}
	for id := range p.replicas {
		if !members[id] {
			delete(p.replicas, id)
		}
	}
	for i := range obs {
		o := &obs[i]
		rec := p.replicas[o.ID]
		if rec == nil {
			continue
		}
		if !o.Time.Before(rec.lastScrape) {
			rec.lastScrape, rec.lastErr = o.Time, o.Err
		}
		if o.Err == nil {
			rec.hist.Add(o.Time, &o.Signals)
			rec.trend.Add(o.Time, &o.Signals)
		}
		if !o.Time.Before(rec.pageRead) {
			switch {
			case o.Err == nil:
				rec.carried, rec.pageRead = o.Signals.Carried(), o.Time
			case KindOf(o.Err) == FailMissing:
				rec.carried, rec.pageRead = 0, o.Time
			}
		}
	}
	escapes, moves := 0, 0
	cfg := &p.spec.Config
	for _, id := range slices.Sorted(maps.Keys(res.Decisions)) {
		d := res.Decisions[id]
		prev, had := p.decisions[id]
		rec := p.replicas[id]
		sig := nanSignals()
		if rec != nil {
			sig, _ = rec.hist.Latest()
		}
		switch {
		case d.Saturated && (!had || !prev.Saturated):
			escapes++
			reason := saturationReason(cfg, &sig)
			if cfg.Sustain > 0 {
				reason += fmt.Sprintf(", hot for %s", cfg.Sustain)
			}
			if rec != nil {
				rec.reason = reason
			}
			p.addChange(Change{Time: now, Replica: id, Kind: ChangeEscape, From: prev.Weight, To: d.Weight, Reason: reason})
		case had && prev.Saturated && !d.Saturated:
			reason := fmt.Sprintf("calm for %s: queue depth below %g and KV occupancy below %.2f", cfg.Hold, cfg.ResumeQueueDepth, cfg.ResumeKVOccupancy)
			if cfg.RelativeQueue > 0 || cfg.RelativeKVMargin > 0 {
				reason += ", or level with its peers"
			}
			if res.Fallback {
				reason = fmt.Sprintf("too many replicas saturated (more than %g of the pool): pure affinity", cfg.MaxSaturatedFraction)
			}
			p.addChange(Change{Time: now, Replica: id, Kind: ChangeReturn, From: prev.Weight, To: d.Weight, Reason: reason})
		}
		if had && prev.Weight != d.Weight {
			moves++
			p.addChange(Change{Time: now, Replica: id, Kind: ChangeWeight, From: prev.Weight, To: d.Weight, Reason: freeCapacityReason(cfg, &sig)})
		}
	}
	p.fallback = res.Fallback
	p.events.add(now, escapes, moves)
}

// addChange records a change, keeping the latest MaxChanges. The caller
// holds mu.
func (p *poolRunner) addChange(c Change) {
	if len(p.changes) == MaxChanges {
		copy(p.changes, p.changes[1:])
		p.changes = p.changes[:MaxChanges-1]
	}
	p.changes = append(p.changes, c)
}

// freeCapacityReason names the signals a weight follows.
func freeCapacityReason(cfg *Config, s *Signals) string {
	var parts []string
	if q, ok := usable(s.QueueDepth); ok {
		parts = append(parts, fmt.Sprintf("queue depth %g of %g", q, cfg.MaxQueueDepth))
	}
	if kv, ok := usable(s.KVOccupancy); ok {
		parts = append(parts, fmt.Sprintf("KV occupancy %.2f of %.2f", kv, cfg.MaxKVOccupancy))
	}
	if len(parts) == 0 {
		return "free capacity"
	}
	return "free capacity: " + strings.Join(parts, ", ")
}

// saturationReason names the threshold a replica's signals crossed.
// With relative conditions on, it names them too: crossing a threshold
// alone no longer saturates.
func saturationReason(cfg *Config, s *Signals) string {
	if q, ok := usable(s.QueueDepth); ok && q >= cfg.MaxQueueDepth {
		if cfg.RelativeQueue > 0 {
			return fmt.Sprintf("queue depth %g ≥ %g and ≥ %g× its peers' mean", q, cfg.MaxQueueDepth, cfg.RelativeQueue)
		}
		return fmt.Sprintf("queue depth %g ≥ %g", q, cfg.MaxQueueDepth)
	}
	if kv, ok := usable(s.KVOccupancy); ok && kv >= cfg.MaxKVOccupancy {
		if cfg.RelativeKVMargin > 0 {
			return fmt.Sprintf("KV occupancy %.2f ≥ %.2f and %.2f above its peers' mean", kv, cfg.MaxKVOccupancy, cfg.RelativeKVMargin)
		}
		return fmt.Sprintf("KV occupancy %.2f ≥ %.2f", kv, cfg.MaxKVOccupancy)
	}
	return fmt.Sprintf("preemption rate above %g/s", cfg.MaxPreemptionRate)
}

func (p *poolRunner) view(now time.Time) PoolView {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := PoolView{Fallback: p.fallback, Replicas: make(map[string]ReplicaView, len(p.ids))}
	v.Escapes, v.WeightMoves = p.events.sum(now)
	for i := len(p.changes) - 1; i >= 0; i-- {
		if c := p.changes[i]; now.Sub(c.Time) <= time.Hour {
			v.Changes = append(v.Changes, c)
		}
	}
	for _, id := range p.ids {
		rv := ReplicaView{Signals: nanSignals()}
		rv.Decision, rv.HasDecision = p.decisions[id]
		if rec := p.replicas[id]; rec != nil {
			rv.LastScrape, rv.LastError = rec.lastScrape, rec.lastErr
			rv.Signals, rv.LastGood = rec.hist.Latest()
			rv.Window = rec.hist.Window()
			rv.Trend = rec.trend.Points(now)
			rv.Carried, rv.PageRead = rec.carried, rec.pageRead
			if rv.Decision.Saturated {
				rv.Reason = rec.reason
			}
		} else {
			rv.Window = NewHistory(0).Window()
		}
		if rv.Decision.Stale {
			if rv.LastGood.IsZero() {
				rv.Reason = "no good scrape yet"
			} else {
				rv.Reason = fmt.Sprintf("metrics older than %s", p.spec.Config.StaleAfter)
			}
		}
		v.Replicas[id] = rv
	}
	return v
}

// eventLog counts a pool's escapes and weight moves per minute over the
// last hour: fixed memory whatever the churn.
type eventLog struct {
	minutes [60]struct {
		minute         int64
		escapes, moves int
	}
}

func (l *eventLog) add(now time.Time, escapes, moves int) {
	if escapes == 0 && moves == 0 {
		return
	}
	m := now.Unix() / 60
	b := &l.minutes[m%60]
	if b.minute != m {
		b.minute, b.escapes, b.moves = m, 0, 0
	}
	b.escapes += escapes
	b.moves += moves
}

// sum counts the events of the last 60 minutes, the current one included.
func (l *eventLog) sum(now time.Time) (escapes, moves int) {
	m := now.Unix() / 60
	for _, b := range l.minutes {
		if b.minute > m-60 && b.minute <= m && (b.escapes > 0 || b.moves > 0) {
			escapes += b.escapes
			moves += b.moves
		}
	}
	return escapes, moves
}
