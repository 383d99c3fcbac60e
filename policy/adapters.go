package policy

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/kvxds/kvxds/fleet"
)

// adaptersSpec is a pool's adapters block (fleet.Adapters): its presence
// turns adapter placement on.
type adaptersSpec struct {
	DefRange   hcl.Range      `hcl:",def_range"`
	Header     *hcl.Attribute `hcl:"header,optional"`
	BodyField  *hcl.Attribute `hcl:"body_field,optional"`
	BaseModels *hcl.Attribute `hcl:"base_models,optional"`
	Adapters   *hcl.Attribute `hcl:"adapters,optional"`
	MaxLoRA    *hcl.Attribute `hcl:"max_lora,optional"`
	Max        *hcl.Attribute `hcl:"max,optional"`
	Interval   *hcl.Attribute `hcl:"interval,optional"`
	HalfLife   *hcl.Attribute `hcl:"half_life,optional"`
}

func (s adaptersSpec) defRange() hcl.Range { return s.DefRange }

// poolAdapters decodes the pool's adapters block into pool.LoRA: nil
// without one. Only consistent-hashing pools place adapters.
func (d *decoder) poolAdapters(spec *poolSpec, pool *Pool) {
	if len(spec.Adapters) == 0 {
		return
	}
	atMostOne(d, spec.Adapters, "an", "adapters", fmt.Sprintf("Pool %q", pool.Name), keepOne)
	a := d.adapters(&spec.Adapters[0])
	for i := 1; i < len(spec.Adapters); i++ {
		d.adapters(&spec.Adapters[i]) // its own mistakes show too
	}
	if pool.Balancer != fleet.ConsistentHash {
		d.errorf(spec.Adapters[0].DefRange, "Adapters without hashing",
			"Pool %q balances with %s, which does not hash; adapters are placed on hash tables of their own, so remove the adapters block or set load_balancing = %q.",
			pool.Name, pool.Balancer, fleet.ConsistentHash)
		return
	}
	a.MemberWeight = pool.MaxMultiplier()
	pool.LoRA = &a
}

func (d *decoder) adapters(spec *adaptersSpec) fleet.Adapters {
	a := fleet.DefaultAdapters()
	if at := spec.Header; at != nil {
		if s, ok := d.str(at.Name, at.Expr); ok {
			if h, err := checkHeaderName(s); err != nil {
				d.errorf(at.Expr.Range(), "Invalid header", "%s.", err)
			} else {
				a.Header = strings.ToLower(h)
			}
		}
	}
	if at := spec.BodyField; at != nil {
		if s, ok := d.str(at.Name, at.Expr); ok {
			if s == "" || strings.ContainsAny(s, ".\"\\") {
				d.errorf(at.Expr.Range(), "Invalid body field",
					"body_field names a top-level field of the JSON request body, such as %q; %q is empty or holds '.', '\"' or '\\'.", fleet.DefaultAdapterBodyField, s)
			} else {
				a.BodyField = s
			}
		}
	}
	a.BaseModels = d.nameList(spec.BaseModels, "base model", false)
	a.Always = d.nameList(spec.Adapters, "adapter", true)
	if spec.BaseModels != nil && spec.Adapters != nil {
		for _, n := range a.Always {
			for _, b := range a.BaseModels {
				if n == b {
					d.errorf(spec.Adapters.Expr.Range(), "Adapter is a base model",
						"%q is listed in base_models too; a request naming it uses no adapter, so list it in one of them.", n)
				}
			}
		}
	}
	if at := spec.MaxLoRA; at != nil {
		if n, ok := d.uintIn(at.Name, at.Expr, 1, fleet.MaxAdapterSlots, "Invalid max_lora"); ok {
			a.MaxLoRA = int(n)
		}
	}
	if at := spec.Max; at != nil {
		if n, ok := d.uintIn(at.Name, at.Expr, 1, fleet.MaxAdapters, "Invalid adapter count"); ok {
			a.Max = int(n)
		}
	}
	if n := len(a.Always); n > a.Max {
		d.errorf(spec.Adapters.Expr.Range(), "Too many adapters",
			"%d adapters are always placed but max is %d; raise max or list fewer.", n, a.Max)
	}
	d.positiveDuration(spec.Interval, &a.Interval, fleet.DefaultAdaptersInterval)
	d.positiveDuration(spec.HalfLife, &a.HalfLife, fleet.DefaultAdaptersHalfLife)
	return a
}

// nameList decodes a list of model or adapter names; adapter names must
// be fleet.CheckAdapterName's.
func (d *decoder) nameList(at *hcl.Attribute, what string, adapter bool) []string {
	if at == nil {
		return nil
	}
	v, ok := d.value(at.Name, at.Expr, cty.List(cty.String), "a list of strings")
	if !ok {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, e := range v.AsValueSlice() {
		if e.IsNull() {
			d.errorf(at.Expr.Range(), "Invalid "+what, "%s must not hold null.", at.Name)
			continue
		}
		s := e.AsString()
		if adapter {
			if why := fleet.CheckAdapterName(s); why != "" {
				d.errorf(at.Expr.Range(), "Invalid adapter name",
					"%q cannot name an adapter: %s; names are 1 to %d printable ASCII bytes without whitespace.", s, why, fleet.MaxAdapterName)
				continue
			}
		} else if s == "" {
			d.errorf(at.Expr.Range(), "Invalid base model", "base_models must not hold an empty name.")
			continue
		}
		if seen[s] {
			d.errorf(at.Expr.Range(), "Duplicate "+what, "%q is listed twice; list each once.", s)
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}
