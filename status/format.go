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
// health, one set of number formats (differing only in typography), and
// one wording of the HA role, the balance, the hotspot, a replica's note
// and what pushes cost.

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

// HealthCount is how many replicas have a health.
type HealthCount struct {
	Health Health
	N      int
}

// CountHealth counts replicas per health, the ones that need attention
// first (SortReplicas's order), healths it does not know last.
func CountHealth(reps []Replica) []HealthCount {
	counts := map[Health]int{}
	for i := range reps {
		counts[reps[i].Health]++
	}
	var out []HealthCount
	for _, h := range healthOrder {
		if counts[h] > 0 {
			out = append(out, HealthCount{h, counts[h]})
		}
	}
	var unknown []HealthCount
	for h, n := range counts {
		if healthRank(h) == len(healthOrder) {
			unknown = append(unknown, HealthCount{h, n})
		}
	}
	slices.SortFunc(unknown, func(a, b HealthCount) int { return cmp.Compare(a.Health, b.Health) })
	return append(out, unknown...)
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

// Role says how this instance takes part in high availability
// ("standalone", "kubernetes lease infra/kvxds, leading (term 3)",
// "kubernetes lease infra/kvxds, following kvxds-1") and, apart, what
// keeps a follower from its leader's decisions ("unreachable: " and the
// error), which the page and `kvxds status` write in parentheses after
// the role; trouble is empty when nothing does.
func (h *HA) Role() (role, trouble string) {
	// Instances that follow a standalone one report their load to it.
	load := ""
	if h.LoadReporters > 0 {
		load = ", adding the load of " + strconv.Itoa(h.LoadReporters) + " other instance" + plural(h.LoadReporters)
	}
	switch {
	case h.Mode == "standalone" || h.Mode == "":
		return "standalone" + load, ""
	case h.Leading:
		return h.Mode + ", leading (term " + strconv.FormatInt(h.Term, 10) + ")" + load, ""
	}
	role = h.Mode + ", following " + cmp.Or(h.Leader, "nobody yet") + load
	if !h.Reachable {
		trouble = "unreachable"
		if h.Error != "" {
			trouble += ": " + h.Error
		}
	}
	if h.LoadReportError != "" {
		if trouble != "" {
			trouble += "; "
		}
		trouble += "cannot report its load to " + h.LoadReportsTo + ": " + h.LoadReportError
	}
	return role, trouble
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Balance writes a pool's balance with two decimals; unknown, Unknown
// and why in parentheses when the pool says why.
func (f Format) Balance(p *Pool) string {
	switch {
	case p.Balance != nil:
		return strconv.FormatFloat(*p.Balance, 'f', 2, 64)
	case p.BalanceNote != "":
		return f.Unknown + " (" + p.BalanceNote + ")"
	}
	return f.Unknown
}

// Hotspot says why a pool is flagged a hotspot: "the busiest replica
// queues 2.4× the mean while the hit rate is 81.0% (rule: balance above
// 2, hit rate at least 0.5, busiest queue at least 2)". A figure the
// pool lacks is left out of the sentence, the rule never. Empty for a
// pool not flagged.
func (f Format) Hotspot(rule HotspotRule, p *Pool) string {
	if !p.Hotspot {
		return ""
	}
	var why []string
	if p.Balance != nil {
		why = append(why, "the busiest replica queues "+strconv.FormatFloat(*p.Balance, 'f', 1, 64)+"× the mean")
	}
	if p.HitRate1m != nil {
		why = append(why, "the hit rate is "+f.Percent(p.HitRate1m))
	}
	if len(why) == 0 {
		why = []string{"flagged without its figures"}
	}
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return strings.Join(why, " while ") + " (rule: balance above " + g(rule.BalanceAbove) +
		", hit rate at least " + g(rule.HitRateAtLeast) + ", busiest queue at least " + g(rule.BusiestQueueAtLeast) + ")"
}

// ReplicaNote says what else an operator should know of a replica: why
// it is not plainly serving, its last scrape's failure, and the signals
// its page lacked; empty if nothing.
func (f Format) ReplicaNote(now time.Time, r *Replica) string {
	var parts []string
	if r.Health != Serving && r.Reason != "" {
		parts = append(parts, r.Reason)
	}
	if s := r.LastScrape; s != nil && !s.OK {
		failed := "last scrape failed"
		if ago := f.Ago(now, s.Time); ago != "" {
			failed += " " + ago
		}
		if s.Error != "" {
			failed += ": " + s.Error
		}
		parts = append(parts, failed)
	}
	if m := r.PageLacks(); m != "" {
		parts = append(parts, m)
	}
	return strings.Join(parts, "; ")
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

// causeWords names a MovedPush's cause in a sentence.
var causeWords = map[string]string{
	CauseMembership: "membership change",
	CauseHealth:     "health change",
	CauseWeight:     "weight move",
	CausePolicy:     "policy change",
	CauseMixed:      "mixed change",
}

// MovedLines says what a pool's pushes cost its sessions: a line for the
// last push ("last push (weight move, 1 replica, 2m ago) cost envoy 0.61%
// of sessions (own 0.42%, collateral 0.19%); grpc, grpc-js 0.42% (own
// 0.42%, collateral 0%)") and one for the last hour's total, a tenant
// group's table after the pool's own. Nil for m nil.
func (f Format) MovedLines(now time.Time, pool string, m *Moved) []string {
	if m == nil || m.Last == nil {
		return nil
	}
	l := m.Last
	what := cmp.Or(causeWords[l.Cause], l.Cause)
	if l.Replicas > 0 {
		what += ", " + strconv.Itoa(l.Replicas) + " replica"
		if l.Replicas != 1 {
			what += "s"
		}
	}
	if ago := f.Ago(now, l.Time); ago != "" {
		what += ", " + ago
	}
	out := []string{"last push (" + what + ") cost " + f.movedShares(pool, l.Shares, false)}
	hour := "last hour: no push"
	if m.Pushes1h > 0 {
		hour = "last hour (" + strconv.Itoa(m.Pushes1h) + " push"
		if m.Pushes1h != 1 {
			hour += "es"
		}
		hour += ") cost " + f.movedShares(pool, m.Total1h, true)
	}
	return append(out, hour)
}

// movedShares writes shares table by table, the pool's own first.
func (f Format) movedShares(pool string, ss []MovedShare, causes bool) string {
	if len(ss) == 0 {
		return "nothing it could compare"
	}
	var b strings.Builder
	table := pool
	for i, s := range ss {
		if i > 0 {
			b.WriteString("; ")
		}
		if s.Table != table || i == 0 && s.Table != pool {
			b.WriteString("in group " + strings.TrimPrefix(s.Table, pool+"/group/") + ": ")
		}
		table = s.Table
		b.WriteString(strings.Join(s.Clients, ", ") + " " + movedPercent(s.Share()))
		if i == 0 {
			b.WriteString(" of sessions")
		}
		b.WriteString(" (own " + movedPercent(s.Own) + ", collateral " + movedPercent(s.Collateral))
		if causes && len(s.ByCause) > 1 {
			sep := "; by cause: "
			for _, c := range []string{CauseMembership, CauseHealth, CauseWeight, CausePolicy, CauseMixed} {
				if v, ok := s.ByCause[c]; ok {
					b.WriteString(sep + c + " " + movedPercent(v))
					sep = ", "
				}
			}
		}
		b.WriteString(")")
	}
	return b.String()
}

// movedPercent writes a share of sessions with two decimals: a change
// costs fractions of a percent.
func movedPercent(v float64) string {
	if v == 0 {
		return "0%"
	}
	return strconv.FormatFloat(v*100, 'f', 2, 64) + "%"
}

// HotKeyLines says what a pool's hot keys are and where its logged
// requests went: a line for the table ("hot keys of 1200 keyed requests
// logged: 3f2a9c1b (header x-tenant) 48.0% spread over 4") and, once
// requests were logged, one for those sent away from their key's first
// replica ("away from their key's first replica: 5.0% (spread 4.0%,
// escape 1.0%, followed 0%, bound 0%)"). Nil for h nil.
func (f Format) HotKeyLines(h *HotKeys) []string {
	if h == nil {
		return nil
	}
	head := "hot keys"
	if h.Requests > 0 {
		head += " of " + strconv.FormatUint(h.Requests, 10) + " keyed requests logged"
	}
	if len(h.Keys) == 0 {
		head += ": none"
	} else {
		parts := make([]string, len(h.Keys))
		for i, k := range h.Keys {
			share := k.Share
			parts[i] = k.Value
			if k.KeyName != "" {
				parts[i] += " (" + k.KeyName + ")"
			}
			parts[i] += " " + f.Percent(&share) + " spread over " + strconv.Itoa(k.Spread)
			switch k.Why {
			case HotReplica:
				parts[i] += " for its replica"
			case HotDeclared:
				parts[i] += " (declared)"
			}
		}
		head += ": " + strings.Join(parts, "; ")
	}
	out := []string{head}
	if h.Requests == 0 {
		return out
	}
	frac := func(n uint64) *float64 {
		v := float64(n) / float64(h.Requests)
		return &v
	}
	var total uint64
	reasons := make([]string, len(AwayReasons))
	for i, r := range AwayReasons {
		total += h.Away[r]
		reasons[i] = r + " " + f.Percent(frac(h.Away[r]))
	}
	return append(out, "away from their key's first replica: "+f.Percent(frac(total))+" ("+strings.Join(reasons, ", ")+")")
}

// PrefillLines says where a decode pool's requests prefill: a head line
// ("prefill on pool chat-prefill (x-prefiller-host-port, bodies of 2048
// bytes and more): 3 replicas in 1024 slots; 1200 requests logged: 1100
// remote, 100 local, 0 unknown"), one line for the table's replicas and
// their slots, once keyed requests were logged one for those prefilled
// away from their key's replica ("prefilled away from their key's
// replica: 5.0% of 1000 keyed (spread 1.0%, followed 0%, bound 4.0%)"), and one per
// decode replica for the prefill replicas named for its requests. Nil
// for a nil.
func (f Format) PrefillLines(p *Prefill) []string {
	if p == nil {
		return nil
	}
	head := "prefill on pool " + p.Pool + " (" + p.Header
	if p.MinBodyBytes > 0 {
		head += ", bodies of " + strconv.Itoa(p.MinBodyBytes) + " bytes and more"
	}
	head += "): "
	if len(p.Hosts) == 0 {
		head += "NO prefill replica serves: decode replicas prefill every request"
	} else {
		head += strconv.Itoa(len(p.Hosts)) + " replicas in " + strconv.Itoa(p.Slots) + " slots"
	}
	if p.Requests > 0 {
		head += "; " + strconv.FormatUint(p.Requests, 10) + " requests logged: " + strconv.FormatUint(p.Remote, 10) + " remote, " +
			strconv.FormatUint(p.Requests-p.Remote-p.Unknown, 10) + " local, " + strconv.FormatUint(p.Unknown, 10) + " unknown"
	}
	out := []string{head}
	if len(p.Hosts) > 0 {
		hosts := make([]string, len(p.Hosts))
		for i, h := range p.Hosts {
			hosts[i] = h.Address + " " + strconv.Itoa(h.Slots)
		}
		out = append(out, "prefill slots: "+strings.Join(hosts, ", "))
	}
	if p.Keyed > 0 {
		frac := func(n uint64) *float64 {
			v := float64(n) / float64(p.Keyed)
			return &v
		}
		var total uint64
		var reasons []string
		for _, r := range []string{AwaySpread, AwayFollow, AwayBound} {
			total += p.Away[r]
			reasons = append(reasons, r+" "+f.Percent(frac(p.Away[r])))
		}
		out = append(out, "prefilled away from their key's replica: "+f.Percent(frac(total))+" of "+
			strconv.FormatUint(p.Keyed, 10)+" keyed ("+strings.Join(reasons, ", ")+")")
	}
	for i := 0; i < len(p.Pairs); {
		j := i
		var parts []string
		for ; j < len(p.Pairs) && p.Pairs[j].Decode == p.Pairs[i].Decode; j++ {
			parts = append(parts, p.Pairs[j].Prefill+" "+strconv.FormatUint(p.Pairs[j].Requests, 10))
		}
		out = append(out, "decode "+p.Pairs[i].Decode+" prefilled on: "+strings.Join(parts, ", "))
		i = j
	}
	return out
}

// AdapterLines says where a pool's LoRA adapters are placed: a head line
// ("adapters (x-kvxds-adapter) of 1200 requests logged, 40.0% naming
// one: 3 placed; moves: demand 2, membership 1, capacity 0"), one line
// per placed adapter ("sql-lora 30.0% on 4 of 4 replicas: r-1, r-3 (draining),
// ...; in flight on 4"), a line for rejected adapter fields and one for
// replicas whose engine reports more adapters than its max_lora. Nil for
// a nil.
func (f Format) AdapterLines(a *Adapters) []string {
	if a == nil {
		return nil
	}
	head := "adapters (" + a.Header + ")"
	if a.Requests > 0 {
		v := float64(a.AdapterRequests) / float64(a.Requests)
		head += " of " + strconv.FormatUint(a.Requests, 10) + " requests logged, " + f.Percent(&v) + " naming one"
	}
	head += ": " + strconv.Itoa(len(a.Adapters)) + " placed"
	moves := make([]string, len(MoveCauses))
	for i, c := range MoveCauses {
		moves[i] = c + " " + strconv.FormatUint(a.Moves[c], 10)
	}
	out := []string{head + "; moves: " + strings.Join(moves, ", ")}
	for _, ad := range a.Adapters {
		share := ad.Share
		members := make([]string, len(ad.Members))
		for i, m := range ad.Members {
			members[i] = m.Identity
			if m.Health != "healthy" {
				members[i] += " (" + m.Health + ")"
			}
		}
		l := ad.Name + " " + f.Percent(&share) + " on " + strconv.Itoa(ad.Replicas) + " replicas: " + strings.Join(members, ", ")
		if a.EnginesReporting > 0 {
			l += "; in flight on " + strconv.Itoa(ad.InFlight)
		}
		if ad.OverCapacity {
			l += "; TAIL: no slot of its own, shares its replica's tail slots"
		}
		out = append(out, l)
	}
	var rejected uint64
	for _, n := range a.Rejected {
		rejected += n
	}
	if rejected > 0 {
		parts := []string{}
		for _, r := range []string{"not_string", "empty", "too_long", "not_printable"} {
			if n := a.Rejected[r]; n > 0 {
				parts = append(parts, r+" "+strconv.FormatUint(n, 10))
			}
		}
		out = append(out, "adapter fields rejected: "+strings.Join(parts, ", "))
	}
	if len(a.Overfull) > 0 {
		out = append(out, "OVERFULL: more adapters in flight than max_lora on "+strings.Join(a.Overfull, ", "))
	}
	if len(a.SlotsFull) > 0 {
		out = append(out, "slots full (Envoys' requests in flight): "+strings.Join(a.SlotsFull, ", ")+"; a request naming another adapter waits there")
	}
	if a.GRPCJS != "" && len(a.Adapters) > 0 {
		out = append(out, a.GRPCJS)
	}
	return out
}
