package policy

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/kvxds/kvxds/weights"
)

type weightsSpec struct {
	DefRange    hcl.Range      `hcl:",def_range"`
	Min         *hcl.Attribute `hcl:"min,optional"`
	Max         *hcl.Attribute `hcl:"max,optional"`
	Levels      *hcl.Attribute `hcl:"levels,optional"`
	Smoothing   *hcl.Attribute `hcl:"smoothing,optional"`
	Hysteresis  *hcl.Attribute `hcl:"hysteresis,optional"`
	MinInterval *hcl.Attribute `hcl:"min_interval,optional"`
	Relative    *hcl.Attribute `hcl:"relative,optional"`
}

func (s weightsSpec) defRange() hcl.Range { return s.DefRange }

// weights decodes a weights block. max left unset makes room for min and
// levels, and levels left unset fits min..max, so that only values
// written in the file can conflict.
func (d *decoder) weights(spec *weightsSpec) weights.Weighting {
	w := weights.DefaultWeighting()
	minOK, maxOK := true, true
	if a := spec.Min; a != nil {
		n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight range")
		w.MinWeight, minOK = uint32(n), good
	}
	levels := 0 // unset
	if a := spec.Levels; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight levels"); good {
			levels = int(n)
		}
	}
	if a := spec.Max; a != nil {
		n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight range")
		w.MaxWeight, maxOK = uint32(n), good
	} else if minOK {
		// As few multipliers as fit: the default, or min, or min and the
		// levels above it, as far as weights.MaxWeightMultiplier allows.
		w.MaxWeight = max(w.MaxWeight, w.MinWeight, min(w.MinWeight+uint32(max(levels, 1))-1, weights.MaxWeightMultiplier))
	}
	rangeOK := minOK && maxOK
	if rangeOK && w.MinWeight > w.MaxWeight { // both set
		d.errorf(spec.Max.Expr.Range(), "Invalid weight range",
			"max %d is below min %d%s; raise max or lower min.", w.MaxWeight, w.MinWeight, where(spec.Min))
		rangeOK = false
	}

	width := 1
	if rangeOK {
		width = int(w.MaxWeight-w.MinWeight) + 1
	}
	w.Levels = min(weights.DefaultLevels, width)
	if levels > 0 {
		w.Levels = levels
		switch {
		case !rangeOK || levels <= width:
		case spec.Max != nil:
			d.errorf(spec.Levels.Expr.Range(), "Invalid weight levels",
				"levels %d is more than the %d weights from min %d to max %d; use levels = %d or less, or widen min..max.",
				levels, width, w.MinWeight, w.MaxWeight, width)
		default: // max was raised as far as it goes
			d.errorf(spec.Levels.Expr.Range(), "Invalid weight levels",
				"levels %d is more than the %d weights from min %d (line %d) to the largest max, %d; use levels = %d or less, or lower min.",
				levels, width, w.MinWeight, spec.Min.Range.Start.Line, w.MaxWeight, width)
		}
	}

	w.Smoothing, _ = d.numberOr(spec.Smoothing, w.Smoothing, unitOpen0, "Invalid smoothing",
		fmt.Sprintf(" (the default is %g); it is the weight of a new observation in the moving average, and 0 would ignore every one", w.Smoothing))
	w.Hysteresis, _ = d.numberOr(spec.Hysteresis, w.Hysteresis, unitOpen1, "Invalid hysteresis",
		fmt.Sprintf(" (the default is %g); it is a fraction of one level's width, and at 1 the top weight could never be reached", w.Hysteresis))
	w.MinChangeInterval, _ = d.durationOr(spec.MinInterval, w.MinChangeInterval,
		fmt.Sprintf("The default is %q.", weights.DefaultMinChangeInterval.String()))
	if a := spec.Relative; a != nil {
		if v, ok := d.value(a.Name, a.Expr, cty.Bool, "true or false"); ok {
			w.Relative = v.True()
		}
	}
	return w
}
