package policy

import (
	"fmt"
	"math"

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
	MaxSaturatedFraction *hcl.Attribute `hcl:"max_saturated_fraction,optional"`
}

func (s escapeSpec) defRange() hcl.Range { return s.DefRange }

// escape decodes an escape block. A resume value left unset follows its
// maximum, and a maximum left unset makes room above a resume value that
// is set, so that only values written in the file can conflict.
func (d *decoder) escape(spec *escapeSpec) weights.Escape {
	e := weights.DefaultEscape()
	maxQ, maxQOK := d.numberOr(spec.MaxQueueDepth, e.MaxQueueDepth, positive, "Invalid saturation threshold",
		fmt.Sprintf(" (the default is %g); a replica with this many requests waiting is saturated", e.MaxQueueDepth))
	maxKV, maxKVOK := d.numberOr(spec.MaxKVOccupancy, e.MaxKVOccupancy, unitOpen0, "Invalid saturation threshold",
		fmt.Sprintf(" (the default is %g); it is the fraction of KV-cache blocks in use at which a replica is saturated", e.MaxKVOccupancy))
	e.MaxPreemptionRate, _ = d.numberOr(spec.MaxPreemptionRate, e.MaxPreemptionRate, nonNeg, "Invalid saturation threshold",
		" (the default is 0: any preemption saturates); it is in preemptions per second")

	resumeQ, good := d.numberOr(spec.ResumeQueueDepth, 0, positive, "Invalid resume threshold",
		" (the default is half of max_queue_depth); a saturated replica returns once fewer requests than this wait, so it must be above 0")
	resumeQSet := spec.ResumeQueueDepth != nil && good
	switch {
	case !resumeQSet:
		resumeQ = maxQ / 2
	case spec.MaxQueueDepth == nil && resumeQ >= maxQ:
		// The default's ratio: resume at half the maximum.
		maxQ = min(2*resumeQ, math.MaxFloat64)
	}
	if resumeQSet && maxQOK && resumeQ >= maxQ {
		d.errorf(spec.ResumeQueueDepth.Expr.Range(), "Invalid resume threshold",
			"resume_queue_depth %g must be below max_queue_depth %g%s, so that a saturated replica drains before it returns instead of flapping; lower it (the default is half of max_queue_depth).",
			resumeQ, maxQ, where(spec.MaxQueueDepth))
	}

	resumeKV, good := d.numberOr(spec.ResumeKVOccupancy, 0, unitOpen, "Invalid resume threshold",
		" (the default is max_kv_occupancy minus 0.1); a saturated replica returns once its KV occupancy is below this, so it must be above 0, and below max_kv_occupancy, which is at most 1")
	resumeKVSet := spec.ResumeKVOccupancy != nil && good
	switch {
	case !resumeKVSet:
		resumeKV = weights.DefaultResumeKVOccupancy(maxKV)
	case spec.MaxKVOccupancy == nil && resumeKV >= maxKV:
		// The default's margin does not fit below 1: saturate when full.
		maxKV = 1
	}
	if resumeKVSet && maxKVOK && resumeKV >= maxKV {
		d.errorf(spec.ResumeKVOccupancy.Expr.Range(), "Invalid resume threshold",
			"resume_kv_occupancy %g must be below max_kv_occupancy %g%s, so that a saturated replica drains before it returns instead of flapping; lower it (the default is max_kv_occupancy minus 0.1).",
			resumeKV, maxKV, where(spec.MaxKVOccupancy))
	}
	e.MaxQueueDepth, e.ResumeQueueDepth = maxQ, resumeQ
	e.MaxKVOccupancy, e.ResumeKVOccupancy = maxKV, resumeKV

	e.Hold, _ = d.durationOr(spec.Hold, e.Hold, fmt.Sprintf("The default is %q.", weights.DefaultHold.String()))
	e.MaxSaturatedFraction, _ = d.numberOr(spec.MaxSaturatedFraction, e.MaxSaturatedFraction, unitClosed, "Invalid saturated fraction",
		fmt.Sprintf(" (the default is %g); it is the largest fraction of the pool out of the hash table at once", e.MaxSaturatedFraction))
	return e
}
