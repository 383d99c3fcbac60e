package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/kvxds/kvxds/fleet"
)

// hotKeysSpec is a hash block's hot_keys block (fleet.HotKeys).
type hotKeysSpec struct {
	DefRange   hcl.Range      `hcl:",def_range"`
	Enabled    *hcl.Attribute `hcl:"enabled,optional"`
	Share      *hcl.Attribute `hcl:"share,optional"`
	Max        *hcl.Attribute `hcl:"max,optional"`
	LogCluster *hcl.Attribute `hcl:"log_cluster,optional"`
	Interval   *hcl.Attribute `hcl:"interval,optional"`
	HalfLife   *hcl.Attribute `hcl:"half_life,optional"`
	SpreadBy   []spreadBySpec `hcl:"spread_by,block"`
	Declared   []declaredSpec `hcl:"declared,block"`
}

// declaredSpec is a hot_keys block's declared block: values of one header
// key of the chain that are always hot.
type declaredSpec struct {
	DefRange hcl.Range      `hcl:",def_range"`
	Header   *hcl.Attribute `hcl:"header,optional"`
	Values   *hcl.Attribute `hcl:"values,optional"`
}

func (s hotKeysSpec) defRange() hcl.Range { return s.DefRange }

// spreadBySpec is a hot_keys block's spread_by block: one body key.
type spreadBySpec struct {
	DefRange     hcl.Range      `hcl:",def_range"`
	Conversation *hcl.Attribute `hcl:"conversation,optional"`
	PromptPrefix *hcl.Attribute `hcl:"prompt_prefix,optional"`
	JSONField    *hcl.Attribute `hcl:"json_field,optional"`
}

func (s spreadBySpec) defRange() hcl.Range { return s.DefRange }

// hotKeys decodes the hot_keys blocks of a hash block whose chain is keys:
// fleet.DefaultHotKeys when there is none (hot keys are on by default),
// nil when enabled = false or the chain is empty. Every attribute is
// decoded, even when disabled, so that its mistakes show.
func (d *decoder) hotKeys(specs []hotKeysSpec, keys []fleet.HashKey) *fleet.HotKeys {
	atMostOne(d, specs, "a", "hot_keys", "This hash block", keepOne)
	h := fleet.DefaultHotKeys()
	enabled := true
	for i := range specs {
		got, on := d.hotKeysBlock(&specs[i], keys)
		if i == 0 {
			h, enabled = got, on
		}
	}
	if !enabled || len(keys) == 0 {
		return nil
	}
	return &h
}

func (d *decoder) hotKeysBlock(spec *hotKeysSpec, keys []fleet.HashKey) (fleet.HotKeys, bool) {
	h := fleet.DefaultHotKeys()
	enabled := true
	if a := spec.Enabled; a != nil {
		if v, ok := d.value(a.Name, a.Expr, cty.Bool, "true or false"); ok {
			enabled = v.True()
		}
	}
	if a := spec.Share; a != nil {
		if f, ok := d.numberIn(a, unitOpen, "Invalid share",
			" (unset, a key is hot from one replica's fair share of the pool's keyed requests)"); ok {
			h.Share = f
		}
	}
	if a := spec.Max; a != nil {
		if n, ok := d.uintIn(a.Name, a.Expr, 1, fleet.MaxHotKeys, "Invalid hot key count"); ok {
			h.Max = int(n)
		}
	}
	if a := spec.LogCluster; a != nil {
		if s, ok := d.str(a.Name, a.Expr); ok {
			if err := checkClusterName(s); err != nil {
				d.errorf(a.Expr.Range(), "Invalid log cluster", "%s.", err)
			} else {
				h.LogCluster = s
			}
		}
	}
	d.positiveDuration(spec.Interval, &h.Interval, fleet.DefaultHotKeysInterval)
	d.positiveDuration(spec.HalfLife, &h.HalfLife, fleet.DefaultHotKeysHalfLife)
	h.Declared = d.declared(spec.Declared, keys, h.Max, spec.Max)
	atMostOne(d, spec.SpreadBy, "a", "spread_by", "This hot_keys block", keepOne)
	for i := range spec.SpreadBy {
		if k, ok := d.spreadBy(&spec.SpreadBy[i], keys); ok && i == 0 {
			h.SpreadBy = k
		}
	}
	return h, enabled
}

// spreadBy decodes a spread_by block: exactly one body key.
func (d *decoder) spreadBy(spec *spreadBySpec, keys []fleet.HashKey) (fleet.HashKey, bool) {
	set := attributesInOrder(spec.Conversation, spec.PromptPrefix, spec.JSONField)
	if len(set) == 0 {
		d.errorf(spec.DefRange, "Empty spread_by",
			`A spread_by block needs exactly one of conversation = true, prompt_prefix or json_field, as in spread_by { conversation = true }: the body key that tells a hot key's conversations apart.`)
		return fleet.HashKey{}, false
	}
	for _, a := range set[1:] {
		d.errorf(a.NameRange, "Conflicting spread_by sources",
			"This spread_by already takes its sub-key from %s (line %d); keep one.", set[0].Name, set[0].Range.Start.Line)
	}
	a := set[0]
	var k fleet.HashKey
	ok := false
	switch a {
	case spec.Conversation:
		k, ok = d.conversation(a)
	case spec.PromptPrefix:
		k, ok = d.promptPrefix(a)
	case spec.JSONField:
		var s string
		if s, ok = d.str(a.Name, a.Expr); ok {
			var err error
			if k.JSONField, err = checkJSONField(s); err != nil {
				d.errorf(a.Expr.Range(), "Invalid spread_by", "%s.", err)
				ok = false
			}
		}
	}
	if !ok || len(set) > 1 {
		return fleet.HashKey{}, false
	}
	for i, c := range keys {
		if c == k {
			d.warnf(a.Range, "Spread by a hash key",
				"spread_by is the chain's key %d, so a hot value of that key has one sub-key and never spreads; spread by another body key, such as conversation = true when the chain keys on a header.", i+1)
			break
		}
	}
	return k, true
}

// declared decodes a hot_keys block's declared blocks: each names a
// header key of the chain and its values that are always hot. Together
// they hold at most max values (maxAttr is the block's max, nil when
// unset). The result is sorted by key and value.
func (d *decoder) declared(specs []declaredSpec, keys []fleet.HashKey, max int, maxAttr *hcl.Attribute) []fleet.DeclaredHotKey {
	var out []fleet.DeclaredHotKey
	seen := map[fleet.DeclaredHotKey]bool{}
	headers := map[int]hcl.Range{}
	for i := range specs {
		spec := &specs[i]
		key, ok := d.declaredHeader(spec, keys)
		if ok {
			if first, dup := headers[key]; dup {
				d.errorf(spec.Header.Expr.Range(), "Duplicate declared header",
					"Header %q already has a declared block at line %d; list all its values there.", keys[key].Header, first.Start.Line)
				ok = false
			} else {
				headers[key] = spec.DefRange
			}
		}
		a := spec.Values
		if a == nil {
			d.errorf(spec.DefRange, "Missing values",
				`A declared block needs values, the header values that are always hot, as in declared { header = "x-tenant-id" values = ["acme"] }.`)
			continue
		}
		v, good := d.value(a.Name, a.Expr, cty.List(cty.String), "a list of strings")
		if !good {
			continue
		}
		if v.LengthInt() == 0 {
			d.errorf(a.Expr.Range(), "Empty values", `A declared block declares no hot value; list the values that are always hot, as in values = ["acme"], or remove the block.`)
			continue
		}
		for _, e := range v.AsValueSlice() {
			if e.IsNull() {
				d.errorf(a.Expr.Range(), "Invalid hot value", "values must not hold null.")
				continue
			}
			s := e.AsString()
			if why := fleet.CheckHotKeyValue(s); why != "" {
				d.errorf(a.Expr.Range(), "Invalid hot value",
					"%q cannot be a hot value: %s; a hot value is 1 to %d bytes of printable ASCII without surrounding spaces, as clients send it in the header.", s, why, fleet.MaxHotKeyValue)
				continue
			}
			if !ok {
				continue
			}
			k := fleet.DeclaredHotKey{Key: key, Value: s}
			if seen[k] {
				d.errorf(a.Expr.Range(), "Duplicate hot value", "%q is listed twice; list each value once.", s)
				continue
			}
			seen[k] = true
			out = append(out, k)
		}
	}
	if len(out) > max {
		subject := specs[0].DefRange
		detail := fmt.Sprintf("The declared blocks list %d hot values, above this block's max of %d hot keys (the default is %d); declared values count in max: raise max or declare fewer.", len(out), max, fleet.DefaultHotKeysMax)
		if maxAttr != nil {
			subject = maxAttr.Expr.Range()
		}
		d.errorf(subject, "Too many declared values", "%s", detail)
	}
	slices.SortFunc(out, func(a, b fleet.DeclaredHotKey) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value))
	})
	return out
}

// declaredHeader decodes a declared block's header: a header key of the
// chain, returned as its index.
func (d *decoder) declaredHeader(spec *declaredSpec, keys []fleet.HashKey) (int, bool) {
	a := spec.Header
	if a == nil {
		d.errorf(spec.DefRange, "Missing header",
			`A declared block needs header, the header key of the chain its values belong to, as in declared { header = "x-tenant-id" values = ["acme"] }.`)
		return 0, false
	}
	h, ok := d.str(a.Name, a.Expr)
	if !ok {
		return 0, false
	}
	var headers []string
	for i, k := range keys {
		if k.Header != "" && strings.EqualFold(k.Header, h) {
			return i, true
		}
		if k.Header != "" {
			headers = append(headers, fmt.Sprintf("%q", k.Header))
		}
	}
	if len(headers) == 0 {
		d.errorf(a.Expr.Range(), "Declared header not in the chain",
			"Header %q is not a key of this hash block, which has no header key: declared values are values of a header key (clients send them; body keys are hashes Envoy computes). Add key { header = %q } to the chain.", h, strings.ToLower(h))
		return 0, false
	}
	d.errorf(a.Expr.Range(), "Declared header not in the chain",
		"Header %q is not a header key of this hash block; name one of %s.", h, strings.Join(headers, ", "))
	return 0, false
}

// checkClusterName checks an Envoy cluster name: not empty, printable.
func checkClusterName(s string) error {
	if s == "" {
		return fmt.Errorf(`log_cluster must not be empty; name the Envoy cluster that reaches kvxds (the generated bootstrap's is %q)`, fleet.DefaultLogCluster)
	}
	for _, c := range s {
		if c < 0x21 || c == 0x7f {
			return fmt.Errorf("log_cluster %q contains %q; Envoy cluster names are printable without spaces", s, c)
		}
	}
	return nil
}
