package status

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the status page and `kvxds status` share, so that the two read the
// same: one replica order, one judgement of a data plane and of a
// health, one set of number formats (differing only in typography).

// Level is how much a state needs an operator's attention.
type Level int

const (
	OK Level = iota
	Warn
	Bad
)

// String is the level's name, the status page's CSS class for it.
func (l Level) String() string {
	switch l {
	case Warn:
		return "warn"
	case Bad:
		return "bad"
	}
	return "ok"
}

// healthOrder ranks healths, the ones that need attention first.
var healthOrder = []Health{Unhealthy, Saturated, Stale, Degraded, Draining, Serving}

func healthRank(h Health) int {
	if i := slices.Index(healthOrder, h); i >= 0 {
		return i
	}
	return len(healthOrder)
}

// HealthLevel is how much a replica's health needs attention: out of the
// hash table against its will is bad, plainly serving is ok, anything
// else a warning.
func HealthLevel(h Health) Level {
	switch h {
	case Saturated, Unhealthy:
		return Bad
	case Serving:
		return OK
	}
	return Warn
}

// SortReplicas returns the replicas in the order that matters to an
// operator: unhealthy, saturated, stale, degraded and draining ones
// first, then by queue depth (longest first), then by identity.
func SortReplicas(reps []Replica) []Replica {
	out := slices.Clone(reps)
	queue := func(r *Replica) float64 {
		if r.QueueDepth == nil {
			return -1
		}
		return *r.QueueDepth
	}
	slices.SortStableFunc(out, func(a, b Replica) int {
		return cmp.Or(cmp.Compare(healthRank(a.Health), healthRank(b.Health)),
			cmp.Compare(queue(&b), queue(&a)), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// ShortTypes are the short xDS resource types a data plane acknowledges,
// in display order.
var ShortTypes = []string{"cds", "eds", "lds", "rds"}

// Sync is how the configuration a data plane accepted compares with what
// its kind is served.
type Sync struct {
	Level Level
	// Rejected is its last NACK, while it has not since accepted what
	// is served for that type.
	Rejected *NACK
	// Waiting is set until it accepts anything.
	Waiting bool
	// Behind are the short types it has not accepted the served
	// version of.
	Behind []string
}

// DataPlaneSync compares what dp accepted with what its kind is served.
func (s *Status) DataPlaneSync(dp *DataPlane) Sync {
	served := s.Served[dp.Kind]
	if n := dp.LastNACK; n != nil && dp.ACKed[n.Type] != served[n.Type] {
		return Sync{Level: Bad, Rejected: n}
	}
	var behind []string
	for _, typ := range ShortTypes {
		if v, ok := served[typ]; ok && dp.ACKed[typ] != v {
			behind = append(behind, typ)
		}
	}
	switch {
	case len(dp.ACKed) == 0:
		return Sync{Level: Warn, Waiting: true, Behind: behind}
	case len(behind) > 0:
		return Sync{Level: Warn, Behind: behind}
	}
	return Sync{Level: OK}
}

// String says it in a few words; a rejection names only the type.
func (s Sync) String() string {
	switch {
	case s.Rejected != nil:
		return "rejecting " + s.Rejected.Type
	case s.Waiting:
		return "waiting for its first ACK"
	case len(s.Behind) > 0:
		return "behind: " + strings.Join(s.Behind, ", ")
	}
	return "in sync"
}

// Format writes figures as text.
type Format struct {
	// Unknown is what a figure kvxds does not know (nil) reads as.
	Unknown string
	// UnitSpace separates a figure from its unit (ms, s).
	UnitSpace string
	// Decimals is how many decimals a figure that is not whole gets; -1
	// for as many as it takes.
	Decimals int
	// Coarse makes Ago give the largest whole unit only ("3m ago", not
	// "3m12s ago").
	Coarse bool
}

// PageFormat is the status page's format; TextFormat the plain ASCII one
// of `kvxds status`, whose table columns carry full precision.
var (
	PageFormat = Format{Unknown: "–", UnitSpace: " ", Decimals: 1}
	TextFormat = Format{Unknown: "-", Decimals: -1, Coarse: true}
)

// Number writes v.
func (f Format) Number(v *float64) string {
	switch {
	case v == nil:
		return f.Unknown
	case f.Decimals < 0 || *v == math.Trunc(*v):
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	return strconv.FormatFloat(*v, 'f', f.Decimals, 64)
}

// Percent writes a fraction v as a percentage with one decimal.
func (f Format) Percent(v *float64) string {
	if v == nil {
		return f.Unknown
	}
	return strconv.FormatFloat(*v*100, 'f', 1, 64) + "%"
}

// Seconds writes a duration v in seconds: whole milliseconds below a
// second, seconds with two decimals above.
func (f Format) Seconds(v *float64) string {
	switch {
	case v == nil:
		return f.Unknown
	case *v < 1:
		return strconv.FormatFloat(*v*1000, 'f', 0, 64) + f.UnitSpace + "ms"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64) + f.UnitSpace + "s"
}

// Ago says how long before now t was, to the second (or coarsely); empty
// for the zero time.
func (f Format) Ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if !f.Coarse {
		d = d.Round(time.Second)
	}
	switch {
	case d < time.Second:
		return "just now"
	case !f.Coarse:
		return d.String() + " ago"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s ago"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h ago"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d ago"
}

// SignalNote is one signal of a pool's profile that replicas' pages
// lacked, in words.
type SignalNote struct {
	Level Level // Warn for a signal decisions use, OK for one only shown
	Text  string
}

// SignalNotes says which of the pool's signals its replicas' latest
// pages lacked, those decisions use first: a wrong engine, path or model
// shows here within a scrape or two.
func (p *Pool) SignalNotes() []SignalNote {
	var used, shown []SignalNote
	for _, c := range p.Signals {
		if c.Missing == 0 {
			continue
		}
		where := strconv.Itoa(c.Missing) + " of " + strconv.Itoa(p.PagesRead) + " replicas"
		if c.Missing == p.PagesRead {
			where = "every replica"
			if p.PagesRead == 1 {
				where = "the one replica"
			}
		}
		looked := "looked for " + strings.Join(c.Metrics, " or ")
		if c.Use == "status" || c.Use == "" {
			shown = append(shown, SignalNote{OK, c.Signal + ": missing on " + where + ", not shown (" + looked + ")"})
			continue
		}
		without := "the " + c.Use + " goes without it"
		if c.Use == "weights and escape hatch" {
			without = "weights and the escape hatch go without it"
		}
		used = append(used, SignalNote{Warn, c.Signal + ": missing on " + where + "; " + without +
			": check the metrics block's engine, path and model (" + looked + ")"})
	}
	return append(used, shown...)
}

// PageLacks says which of its pool's signals the replica's latest page
// lacked; empty if none or no page was read.
func (r *Replica) PageLacks() string {
	if len(r.SignalsMissing) == 0 {
		return ""
	}
	return "page lacks " + strings.Join(r.SignalsMissing, ", ")
}
