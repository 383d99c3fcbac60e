package policy

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/kvxds/kvxds/fleet"
)

// MaxGroupReplicas bounds a group's replicas setting.
const MaxGroupReplicas = 1024

// groupSpec is a group block; match and replicas are required, but
// checked by hand so that the diagnostics name the group.
type groupSpec struct {
	Name      string           `hcl:"name,label"`
	NameRange hcl.Range        `hcl:"name,label_range"`
	DefRange  hcl.Range        `hcl:",def_range"`
	Match     []groupMatchSpec `hcl:"match,block"`
	Replicas  *hcl.Attribute   `hcl:"replicas,optional"`
	Exclusive *hcl.Attribute   `hcl:"exclusive,optional"`
}

type groupMatchSpec struct {
	DefRange hcl.Range      `hcl:",def_range"`
	Header   *hcl.Attribute `hcl:"header,optional"`
	Values   *hcl.Attribute `hcl:"values,optional"`
}

// poolGroups decodes the group blocks of pool, in file order.
func (d *decoder) poolGroups(spec *poolSpec, pool *Pool) {
	if len(spec.Groups) > 0 && pool.Balancer != fleet.ConsistentHash {
		d.errorf(spec.Groups[0].DefRange, "Group without hashing",
			"Pool %q balances with %s, which does not hash; groups split a hash pool's replicas, so remove the group blocks or set load_balancing = %q.",
			pool.Name, pool.Balancer, fleet.ConsistentHash)
		return
	}
	names := map[string]hcl.Range{}
	// claimed maps header and value to the group that selects them: a
	// request must select one group.
	type claim struct {
		group string
		rng   hcl.Range
	}
	claimed := map[[2]string]claim{}
	for i := range spec.Groups {
		gs := &spec.Groups[i]
		g, ok := d.group(gs, pool.Name)
		if prev, dup := names[gs.Name]; dup {
			d.errorf(gs.NameRange, "Duplicate group name",
				"Pool %q already has a group %q at line %d; name each group once.", pool.Name, gs.Name, prev.Start.Line)
			ok = false
		} else {
			names[gs.Name] = gs.NameRange
		}
		if !ok {
			continue
		}
		for _, v := range g.Values {
			k := [2]string{g.Header, v}
			if prev, dup := claimed[k]; dup {
				d.errorf(gs.Match[0].Values.Expr.Range(), "Value in two groups",
					"%s = %q already selects group %q (line %d); a request belongs to one group.", g.Header, v, prev.group, prev.rng.Start.Line)
				ok = false
				continue
			}
			claimed[k] = claim{g.Name, gs.Match[0].Values.Expr.Range()}
		}
		if ok {
			pool.Groups = append(pool.Groups, g)
		}
	}
}

func (d *decoder) group(spec *groupSpec, pool string) (fleet.Group, bool) {
	g := fleet.Group{Name: spec.Name}
	ok := true
	if err := checkGroupName(spec.Name); err != nil {
		d.errorf(spec.NameRange, "Invalid group name", "%s.", err)
		ok = false
	}
	switch {
	case len(spec.Match) == 0:
		d.errorf(spec.DefRange, "Missing match block",
			`Group %q of pool %q needs a match block saying which requests it takes: a header, as in header = "x-tenant-id", and the values that select the group, as in values = ["acme"].`, spec.Name, pool)
		ok = false
	case len(spec.Match) > 1:
		d.errorf(spec.Match[1].DefRange, "Duplicate match block",
			"Group %q already has a match block at line %d; list every value in its values.", spec.Name, spec.Match[0].DefRange.Start.Line)
		d.groupMatch(&spec.Match[0], &g)
		ok = false
	default:
		ok = d.groupMatch(&spec.Match[0], &g) && ok
	}
	if a := spec.Replicas; a == nil {
		d.errorf(spec.DefRange, "Missing replicas",
			"Group %q of pool %q needs replicas, the number of the pool's replicas it hashes over, as in replicas = 3.", spec.Name, pool)
		ok = false
	} else if n, good := d.uintIn(a.Name, a.Expr, 1, MaxGroupReplicas, "Invalid replicas"); good {
		g.Replicas = int(n)
	} else {
		ok = false
	}
	if a := spec.Exclusive; a != nil {
		v, good := d.value(a.Name, a.Expr, cty.Bool, "true or false")
		if good {
			g.Exclusive = v.True()
		}
		ok = ok && good
	}
	return g, ok
}

func (d *decoder) groupMatch(spec *groupMatchSpec, g *fleet.Group) bool {
	ok := true
	if a := spec.Header; a == nil {
		d.errorf(spec.DefRange, "Missing header",
			`The match block of group %q needs header, the request header whose value selects the group, as in header = "x-tenant-id".`, g.Name)
		ok = false
	} else if s, good := d.str(a.Name, a.Expr); !good {
		ok = false
	} else if h, err := checkHeaderName(s); err != nil {
		d.errorf(a.Expr.Range(), "Invalid header", "%s.", err)
		ok = false
	} else {
		g.Header = strings.ToLower(h)
	}
	a := spec.Values
	if a == nil {
		d.errorf(spec.DefRange, "Missing values",
			`The match block of group %q needs values, the header values that select it, as in values = ["acme"].`, g.Name)
		return false
	}
	v, good := d.value(a.Name, a.Expr, cty.List(cty.String), "a list of strings")
	if !good {
		return false
	}
	if v.LengthInt() == 0 {
		d.errorf(a.Expr.Range(), "Empty values",
			`Group %q matches no request; list the header values that select it, as in values = ["acme"].`, g.Name)
		return false
	}
	seen := map[string]bool{}
	for _, e := range v.AsValueSlice() {
		if e.IsNull() {
			d.errorf(a.Expr.Range(), "Invalid value", "values must not hold null.")
			ok = false
			continue
		}
		s := e.AsString()
		if err := checkHeaderValue(s); err != nil {
			d.errorf(a.Expr.Range(), "Invalid value", "%s.", err)
			ok = false
			continue
		}
		if seen[s] {
			d.errorf(a.Expr.Range(), "Duplicate value", "%q is listed twice; list each value once.", s)
			ok = false
			continue
		}
		seen[s] = true
		g.Values = append(g.Values, s)
	}
	return ok
}

// checkGroupName keeps group names to the characters of pool names: they
// become part of cluster names.
func checkGroupName(name string) error {
	if name == "" {
		return fmt.Errorf(`group names must not be empty; name the group after what it selects, as in group "acme"`)
	}
	for i, c := range name {
		if isAlnum(c) || i > 0 && (c == '.' || c == '_' || c == '-') {
			continue
		}
		if i == 0 {
			return fmt.Errorf("group name %q must start with a letter or digit", name)
		}
		return fmt.Errorf("group name %q: %q is not allowed; use letters, digits, '.', '_' and '-'", name, c)
	}
	return nil
}

// checkHeaderValue accepts what a data plane can match exactly: a
// non-empty value without control characters or surrounding spaces
// (which HTTP strips).
func checkHeaderValue(s string) error {
	if s == "" {
		return fmt.Errorf("a header value must not be empty")
	}
	if strings.TrimSpace(s) != s {
		return fmt.Errorf("%q has leading or trailing spaces, which HTTP strips; remove them", s)
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return fmt.Errorf("%q contains the control character %q, which a header cannot carry", s, c)
		}
	}
	return nil
}
