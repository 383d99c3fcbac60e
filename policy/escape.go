package policy

import (
	"fmt"
	"math"
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/kvxds/kvxds/weights"
)

type escapeSpec struct {
	DefRange             hcl.Range      `hcl:",def_range"`
	MaxQueueDepth        *hcl.Attribute `hcl:"max_queue_depth,optional"`
	MaxKVOccupancy       *hcl.Attribute `hcl:"max_kv_occupancy,optional"`
	MaxPreemptionRate    *hcl.Attribute `hcl:"max_preemption_rate,optional"`
	ResumeQueueDepth     *hcl.Attribute `hcl:"resume_queue_depth,optional"`
	ResumeKVOccupancy    *hcl.Attribute `hcl:"resume_kv_occupancy,optional"`
	Hold                 *hcl.Attribute `hcl:"hold,optional"`
	Sustain              *hcl.Attribute `hcl:"sustain,optional"`
	RelativeQueue        *hcl.Attribute `hcl:"relative_queue,optional"`
	RelativeKVMargin     *hcl.Attribute `hcl:"relative_kv_margin,optional"`
	MaxSaturatedFraction *hcl.Attribute `hcl:"max_saturated_fraction,optional"`
}

func (s escapeSpec) defRange() hcl.Range { return s.DefRange }

// escape decodes an escape block. A resume value left unset follows its
// maximum, and a maximum left unset makes room above a resume value that
// is set, so that only values written in the file can conflict. The rules
// are weights.Escape's own (Validate): a value out of its own range is
// reported, left at its default and not compared with the others.
// bounded is whether the pool's hash block sets balance_factor, which
// lengthens sustain's default (weights.DefaultEscapeFor).
func (d *decoder) escape(spec *escapeSpec, bounded bool) weights.Escape {
	def := weights.DefaultEscapeFor(bounded)
	e := def
	attrs := map[string]*hcl.Attribute{
		"max_queue_depth": spec.MaxQueueDepth, "max_kv_occupancy": spec.MaxKVOccupancy,
		"max_preemption_rate": spec.MaxPreemptionRate, "resume_queue_depth": spec.ResumeQueueDepth,
		"resume_kv_occupancy": spec.ResumeKVOccupancy, "hold": spec.Hold, "sustain": spec.Sustain,
		"relative_queue": spec.RelativeQueue, "relative_kv_margin": spec.RelativeKVMargin,
		"max_saturated_fraction": spec.MaxSaturatedFraction,
	}
	numbers, defaults := escapeNumbers(&e), escapeNumbers(&def)
	failed := map[string]bool{}
	written := map[string]string{} // numbers as written, for diagnostics
	for path, dst := range numbers {
		written[path] = d.rawNumber(attrs[path], dst, failed)
	}
	var ok bool
	if e.Hold, ok = d.durationOr(spec.Hold, e.Hold, fmt.Sprintf("The default is %q.", weights.DefaultHold.String())); !ok {
		failed["hold"] = true
	}
	if e.Sustain, ok = d.durationOr(spec.Sustain, e.Sustain, fmt.Sprintf("The default is %q: a replica leaves once it has been hot this long.", def.Sustain.String())); !ok {
		failed["sustain"] = true
	}

	// Values out of their own range: reported below, and the defaults
	// stand in for them.
	own := map[string]*weights.FieldError{}
	for _, fe := range weights.FieldErrors(e.Validate()) {
		if fe.With == nil && attrs[fe.Path] != nil && !failed[fe.Path] {
			own[fe.Path] = fe
		}
	}
	bad := func(path string) bool { return failed[path] || own[path] != nil }
	for path, dst := range numbers {
		if bad(path) {
			*dst = *defaults[path]
		}
	}
	set := func(path string) bool { return attrs[path] != nil && !bad(path) }

	switch {
	case !set("resume_queue_depth"):
		e.ResumeQueueDepth = e.MaxQueueDepth / 2
	case spec.MaxQueueDepth == nil && e.ResumeQueueDepth >= e.MaxQueueDepth:
		// The default's ratio: resume at half the maximum.
		e.MaxQueueDepth = min(2*e.ResumeQueueDepth, math.MaxFloat64)
	}
	switch {
	case !set("resume_kv_occupancy"):
		e.ResumeKVOccupancy = weights.DefaultResumeKVOccupancy(e.MaxKVOccupancy)
	case spec.MaxKVOccupancy == nil && e.ResumeKVOccupancy >= e.MaxKVOccupancy:
		// The default's margin does not fit below 1: saturate when full.
		e.MaxKVOccupancy = 1
	}

	outOfRange := func(path, summary string, s span, hint string) {
		a := attrs[path]
		d.errorf(a.Expr.Range(), summary, "%s %s is out of range; use %s%s.", a.Name, written[path], s, hint)
	}
	for path := range own {
		switch path {
		case "max_queue_depth":
			outOfRange(path, "Invalid saturation threshold", positive,
				fmt.Sprintf(" (the default is %g); a replica with this many requests waiting is saturated", def.MaxQueueDepth))
		case "max_kv_occupancy":
			outOfRange(path, "Invalid saturation threshold", unitOpen0,
				fmt.Sprintf(" (the default is %g); it is the fraction of KV-cache blocks in use at which a replica is saturated", def.MaxKVOccupancy))
		case "max_preemption_rate":
			outOfRange(path, "Invalid saturation threshold", nonNeg,
				" (the default is 0: any preemption saturates); it is in preemptions per second")
		case "resume_queue_depth":
			outOfRange(path, "Invalid resume threshold", positive,
				" (the default is half of max_queue_depth); a saturated replica returns once fewer requests than this wait, so it must be above 0")
		case "resume_kv_occupancy":
			outOfRange(path, "Invalid resume threshold", unitOpen,
				" (the default is max_kv_occupancy minus 0.1); a saturated replica returns once its KV occupancy is below this, so it must be above 0, and below max_kv_occupancy, which is at most 1")
		case "relative_queue":
			a := attrs[path]
			d.errorf(a.Expr.Range(), "Invalid relative threshold",
				"%s %s is out of range; use 0 (off) or a finite number of 1 or more (the default is %g); a replica's queue saturates it only at this many times its peers' mean queue.",
				a.Name, written[path], def.RelativeQueue)
		case "relative_kv_margin":
			outOfRange(path, "Invalid relative threshold", unitOpen1,
				fmt.Sprintf(" (the default is %g; 0 is off); a replica's KV occupancy saturates it only this far above its peers' mean occupancy", def.RelativeKVMargin))
		case "max_saturated_fraction":
			outOfRange(path, "Invalid saturated fraction", unitClosed,
				fmt.Sprintf(" (the default is %g); it is the largest fraction of the pool out of the hash table at once", def.MaxSaturatedFraction))
		default:
			d.errorf(attrs[path].Expr.Range(), "Invalid escape setting", "%s.", own[path].Msg)
		}
	}
	// What does not fit together, of values within their own ranges.
	for _, fe := range weights.FieldErrors(e.Validate()) {
		if fe.With == nil || !set(fe.Path) || slices.ContainsFunc(fe.With, bad) {
			continue
		}
		switch a := attrs[fe.Path]; fe.Path {
		case "resume_queue_depth":
			d.errorf(a.Expr.Range(), "Invalid resume threshold",
				"resume_queue_depth %g must be below max_queue_depth %g%s, so that a saturated replica drains before it returns instead of flapping; lower it (the default is half of max_queue_depth).",
				e.ResumeQueueDepth, e.MaxQueueDepth, where(spec.MaxQueueDepth))
		case "resume_kv_occupancy":
			d.errorf(a.Expr.Range(), "Invalid resume threshold",
				"resume_kv_occupancy %g must be below max_kv_occupancy %g%s, so that a saturated replica drains before it returns instead of flapping; lower it (the default is max_kv_occupancy minus 0.1).",
				e.ResumeKVOccupancy, e.MaxKVOccupancy, where(spec.MaxKVOccupancy))
		default:
			d.errorf(a.Expr.Range(), "Invalid escape setting", "%s.", fe.Msg)
		}
	}
	return e
}

// escapeNumbers maps the escape block's number attributes to their fields
// of e.
func escapeNumbers(e *weights.Escape) map[string]*float64 {
	return map[string]*float64{
		"max_queue_depth": &e.MaxQueueDepth, "max_kv_occupancy": &e.MaxKVOccupancy,
		"max_preemption_rate": &e.MaxPreemptionRate, "resume_queue_depth": &e.ResumeQueueDepth,
		"resume_kv_occupancy": &e.ResumeKVOccupancy, "max_saturated_fraction": &e.MaxSaturatedFraction,
		"relative_queue": &e.RelativeQueue, "relative_kv_margin": &e.RelativeKVMargin,
	}
}
