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
// written in the file can conflict. The rules are weights.Weighting's
// own (Validate); a value that did not decode is left at its default and
// not compared with the others. bounded is whether the pool's hash block
// sets balance_factor: then max left unset, with levels unset too, stays
// at min (weights.DefaultWeightingFor).
func (d *decoder) weights(spec *weightsSpec, bounded bool) weights.Weighting {
	w := weights.DefaultWeightingFor(bounded)
	failed := map[string]bool{}
	if a := spec.Min; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight range"); good {
			w.MinWeight = uint32(n)
		} else {
			failed[a.Name] = true
		}
	}
	levels := 0 // unset
	if a := spec.Levels; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight levels"); good {
			levels = int(n)
		} else {
			failed[a.Name] = true
		}
	}
	if a := spec.Max; a != nil {
		if n, good := d.uintIn(a.Name, a.Expr, 1, weights.MaxWeightMultiplier, "Invalid weight range"); good {
			w.MaxWeight = uint32(n)
		} else {
			failed[a.Name] = true
		}
	} else if !failed["min"] {
		// As few multipliers as fit: the default, or min, or min and the
		// levels above it, as far as weights.MaxWeightMultiplier allows.
		w.MaxWeight = max(w.MaxWeight, w.MinWeight, min(w.MinWeight+uint32(max(levels, 1))-1, weights.MaxWeightMultiplier))
	}
	if w.Levels = min(weights.DefaultLevels, int(max(w.MaxWeight, w.MinWeight)-w.MinWeight)+1); levels > 0 {
		w.Levels = levels
	}
	smoothing := d.rawNumber(spec.Smoothing, &w.Smoothing, failed)
	hysteresis := d.rawNumber(spec.Hysteresis, &w.Hysteresis, failed)
	var ok bool
	if w.MinChangeInterval, ok = d.durationOr(spec.MinInterval, w.MinChangeInterval,
		fmt.Sprintf("The default is %q.", weights.DefaultMinChangeInterval.String())); !ok {
		failed["min_interval"] = true
	}
	if a := spec.Relative; a != nil {
		if v, ok := d.value(a.Name, a.Expr, cty.Bool, "true or false"); ok {
			w.Relative = v.True()
		}
	}

	def := weights.DefaultWeightingFor(bounded)
	attrs := map[string]*hcl.Attribute{"min": spec.Min, "max": spec.Max, "levels": spec.Levels,
		"smoothing": spec.Smoothing, "hysteresis": spec.Hysteresis, "min_interval": spec.MinInterval}
	for _, e := range d.fieldErrors(w.Validate(), attrs, failed, spec.DefRange) {
		a := attrs[e.Path]
		switch e.Path {
		case "max":
			d.errorf(a.Expr.Range(), "Invalid weight range",
				"max %d is below min %d%s; raise max or lower min.", w.MaxWeight, w.MinWeight, where(spec.Min))
		case "levels":
			width := int(w.MaxWeight-w.MinWeight) + 1
			if spec.Max != nil {
				d.errorf(a.Expr.Range(), "Invalid weight levels",
					"levels %d is more than the %d weights from min %d to max %d; use levels = %d or less, or widen min..max.",
					levels, width, w.MinWeight, w.MaxWeight, width)
			} else { // max was raised as far as it goes
				d.errorf(a.Expr.Range(), "Invalid weight levels",
					"levels %d is more than the %d weights from min %d (line %d) to the largest max, %d; use levels = %d or less, or lower min.",
					levels, width, w.MinWeight, spec.Min.Range.Start.Line, w.MaxWeight, width)
			}
		case "smoothing":
			d.errorf(a.Expr.Range(), "Invalid smoothing", "%s %s is out of range; use %s%s.", a.Name, smoothing, unitOpen0,
				fmt.Sprintf(" (the default is %g); it is the weight of a new observation in the moving average, and 0 would ignore every one", def.Smoothing))
		case "hysteresis":
			d.errorf(a.Expr.Range(), "Invalid hysteresis", "%s %s is out of range; use %s%s.", a.Name, hysteresis, unitOpen1,
				fmt.Sprintf(" (the default is %g); it is a fraction of one level's width, and at 1 the top weight could never be reached", def.Hysteresis))
		default:
			d.errorf(a.Expr.Range(), "Invalid weights", "%s.", e.Msg)
		}
	}
	return w
}
