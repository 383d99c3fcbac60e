package policy

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/kvxds/kvxds/weights"
)

// The shared machinery of decoding; each block's type, spec and decoder
// sit in a file of their own (pool.go, hash.go, ...).
//
// The policy file's structure is decoded by gohcl into spec structs (the
// xxxSpec types, next to their decoders). Every attribute is an
// *hcl.Attribute rather than a typed Go value: nil tells "unset" apart
// from zero, the attribute carries the exact ranges of its name and value,
// and the values are evaluated afterwards by decoder.value and friends,
// whose diagnostics name the attribute and say how to fix it. (gohcl's own
// conversion reports "Unsuitable value type" without the attribute's name,
// adds a second error after "Variables not allowed", and reads null as
// unset.) Blocks that may appear once are still slices, so that a duplicate
// is reported with the line of the first (atMostOne) and its contents are
// checked too.

// decoder turns a parsed body into a Policy, collecting every diagnostic
// on the way instead of stopping at the first: a user fixing a policy
// should see all of its problems in one run. gohcl decodes the structure
// (reporting unknown attributes and blocks, and wrong labels); the checks
// of values and of how they fit together run on the decoded specs. Every
// error lands in diags, and any error discards the Policy, so the checks
// only track validity where a later check depends on it.
type decoder struct {
	diags hcl.Diagnostics
	dir   string // the policy file's directory, for relative paths

	poolNames map[string]hcl.Range // pool name -> label of its first definition
	meshNames map[string]meshName  // mesh cluster name -> its pool (mesh.go)
	listeners []listener           // pool.go
	prefills  []prefillLink        // prefill.go
	// prefillNames are the pools a prefill block names (prefill.go),
	// known before any pool is decoded: a prefill pool's hash defaults
	// differ.
	prefillNames map[string]bool
}

func (d *decoder) add(diags hcl.Diagnostics) {
	d.diags = append(d.diags, diags...)
}

func (d *decoder) errorf(subject hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  subject.Ptr(),
	})
}

// block is a decoded block's spec, for the checks common to all blocks.
type block interface {
	defRange() hcl.Range
}

// keepOne ends the detail of most duplicate block diagnostics.
const keepOne = "keep a single one."

// atMostOne reports every block after the first of a kind that may appear
// once in its parent. owner names the parent, as in `Pool "chat"`, or is
// empty for blocks of the file itself and of an ha block; article ("a" or
// "an") goes with typ; fix ends the detail.
func atMostOne[B block](d *decoder, blocks []B, article, typ, owner, fix string) {
	if len(blocks) < 2 {
		return
	}
	first := blocks[0].defRange().Start.Line
	for _, b := range blocks[1:] {
		detail := fmt.Sprintf("%s already has %s %s block at line %d; %s", owner, article, typ, first, fix)
		if owner == "" {
			detail = fmt.Sprintf("%s %s block is already defined at line %d; %s", strings.ToUpper(article[:1])+article[1:], typ, first, fix)
		}
		d.errorf(b.defRange(), "Duplicate "+typ+" block", "%s", detail)
	}
}

// warnf reports something that is valid but likely not what the user
// meant; warnings do not discard the Policy.
func (d *decoder) warnf(subject hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  subject.Ptr(),
	})
}

// value evaluates expr as data (no variables, no functions) and converts
// it to ty; what names ty for messages, as in "a number".
func (d *decoder) value(name string, expr hcl.Expression, ty cty.Type, what string) (cty.Value, bool) {
	v, diags := expr.Value(nil)
	d.add(diags)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if v.IsNull() {
		d.errorf(expr.Range(), "Invalid value", "%s must be %s, not null.", name, what)
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, ty)
	if err != nil || !cv.IsKnown() {
		d.errorf(expr.Range(), "Incorrect value type", "%s must be %s, not %s.", name, what, withArticle(v.Type().FriendlyName()))
		return cty.NilVal, false
	}
	return cv, true
}

func withArticle(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

func (d *decoder) str(name string, expr hcl.Expression) (string, bool) {
	v, ok := d.value(name, expr, cty.String, "a string")
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

// integer evaluates expr as a whole number of any size.
func (d *decoder) integer(name string, expr hcl.Expression) (*big.Int, bool) {
	v, ok := d.value(name, expr, cty.Number, "a number")
	if !ok {
		return nil, false
	}
	f := v.AsBigFloat()
	if !f.IsInt() {
		d.errorf(expr.Range(), "Invalid value", "%s must be a whole number, not %s.", name, f.Text('g', -1))
		return nil, false
	}
	i, _ := f.Int(nil)
	return i, true
}

// uintIn evaluates expr as a whole number in lo..hi.
func (d *decoder) uintIn(name string, expr hcl.Expression, lo, hi uint64, summary string) (uint64, bool) {
	n, ok := d.integer(name, expr)
	if !ok {
		return 0, false
	}
	if n.Sign() < 0 || !n.IsUint64() || n.Uint64() < lo || n.Uint64() > hi {
		d.errorf(expr.Range(), summary, "%s %s is out of range; use %d to %d.", name, n, lo, hi)
		return 0, false
	}
	return n.Uint64(), true
}

// duration decodes a Go duration string; "" means the default. zeroOK says
// whether "0s" is allowed: it means "no timeout" for route_timeout, but
// idle_timeout has no way to say "off" (zero keeps Envoy's default), so
// there "0s" would silently not mean what it says.
func (d *decoder) duration(a *hcl.Attribute, zeroOK bool) time.Duration {
	hint := ""
	if zeroOK {
		hint = `"0s" means no timeout.`
	}
	dur, set, ok := d.durationValue(a, hint)
	if ok && set && dur == 0 && !zeroOK {
		d.errorf(a.Expr.Range(), "Invalid duration",
			"%s must be positive; omit it to keep Envoy's default.", a.Name)
	}
	return dur
}

// durationOr decodes an optional duration attribute (a may be nil),
// returning def when it is unset or "". ok is false after a diagnostic,
// and the duration is then def. hint is as for durationValue.
func (d *decoder) durationOr(a *hcl.Attribute, def time.Duration, hint string) (dur time.Duration, ok bool) {
	if a == nil {
		return def, true
	}
	dur, set, ok := d.durationValue(a, hint)
	if !set {
		return def, ok
	}
	return dur, true
}

// positiveDuration decodes an optional duration attribute that must be
// positive into dst (a may be nil: dst keeps def's value, which it holds).
// A zero or negative one is reported, naming def.
func (d *decoder) positiveDuration(a *hcl.Attribute, dst *time.Duration, def time.Duration) {
	if a == nil {
		return
	}
	dur, ok := d.durationOr(a, def, fmt.Sprintf("The default is %q.", def.String()))
	if ok && dur <= 0 {
		d.errorf(a.Expr.Range(), "Invalid duration", "%s must be positive; omit it for the default, %q.", a.Name, def.String())
		return
	}
	*dst = dur
}

// optDuration is durationValue for an optional attribute (a may be nil,
// which is unset).
func (d *decoder) optDuration(a *hcl.Attribute, hint string) (dur time.Duration, set, ok bool) {
	if a == nil {
		return 0, false, true
	}
	return d.durationValue(a, hint)
}

// durationValue decodes a non-negative Go duration string. set is false
// for "", which means the default, as if omitted; ok is false after a
// diagnostic (set is then false and dur zero). hint, if any, ends the
// diagnostic of a string that is not a duration.
func (d *decoder) durationValue(a *hcl.Attribute, hint string) (dur time.Duration, set, ok bool) {
	s, ok := d.str(a.Name, a.Expr)
	if !ok {
		return 0, false, false
	}
	if s == "" {
		return 0, false, true
	}
	dur, err := time.ParseDuration(s)
	switch {
	case err != nil:
		if hint != "" {
			hint = " " + hint
		}
		d.errorf(a.Expr.Range(), "Invalid duration",
			`%s %q is not a duration; write a number with a unit, such as "30s", "10m" or "1h30m".%s`, a.Name, s, hint)
	case dur < 0:
		d.errorf(a.Expr.Range(), "Invalid duration", "%s %q must not be negative.", a.Name, s)
	default:
		return dur, true, true
	}
	return 0, false, false
}

// enum decodes an attribute whose value is one of allowed. norm, if set,
// normalises the written value before it is looked up. A value that is
// not allowed is reported at the value with summary and the detail made
// of what was written; ok is false after any diagnostic.
func enum[T ~string](d *decoder, a *hcl.Attribute, norm func(string) string, summary string, detail func(written string) string, allowed ...T) (T, bool) {
	s, ok := d.str(a.Name, a.Expr)
	if !ok {
		return "", false
	}
	v := s
	if norm != nil {
		v = norm(s)
	}
	if i := slices.Index(allowed, T(v)); i >= 0 {
		return allowed[i], true
	}
	d.errorf(a.Expr.Range(), summary, "%s", detail(s))
	return "", false
}

// required reports a missing attribute at its block and says whether it
// is there.
func (d *decoder) required(a *hcl.Attribute, block hcl.Range, typ, name, example string) bool {
	if a == nil {
		d.errorf(block, "Missing "+name, "A %s block needs %s, as in %s.", typ, name, example)
		return false
	}
	return true
}

// addrErr reports a parseHostPort error.
func (d *decoder) addrErr(rng hcl.Range, err error) {
	if ae, ok := err.(*addrError); ok {
		d.errorf(rng, ae.summary, "%s", ae.detail)
		return
	}
	d.errorf(rng, "Invalid address", "%s.", err)
}

// where says where a setting that another one is compared with came from:
// its line, or the default.
func where(a *hcl.Attribute) string {
	if a == nil {
		return " (the default)"
	}
	return fmt.Sprintf(" (line %d)", a.Range.Start.Line)
}

// span is a range of numbers from lo (excluded if loOpen) to hi
// (included; +Inf for no bound).
type span struct {
	lo, hi         float64
	loOpen, hiOpen bool
}

func (s span) contains(f float64) bool {
	return (f > s.lo || !s.loOpen && f == s.lo) && (f < s.hi || !s.hiOpen && f == s.hi)
}

// String says what to write, as in "0 to 1" or "more than 0".
func (s span) String() string {
	lo := fmt.Sprintf("%g or more", s.lo)
	if s.loOpen {
		lo = fmt.Sprintf("more than %g", s.lo)
	}
	switch {
	case math.IsInf(s.hi, 1):
		return lo
	case s.hiOpen:
		return fmt.Sprintf("%s and less than %g", lo, s.hi)
	case !s.loOpen:
		return fmt.Sprintf("%g to %g", s.lo, s.hi)
	}
	return fmt.Sprintf("%s and at most %g", lo, s.hi)
}

var (
	positive   = span{lo: 0, loOpen: true, hi: math.Inf(1)}
	nonNeg     = span{lo: 0, hi: math.Inf(1)}
	unitClosed = span{lo: 0, hi: 1}
	unitOpen0  = span{lo: 0, loOpen: true, hi: 1} // (0, 1]
	unitOpen1  = span{lo: 0, hi: 1, hiOpen: true} // [0, 1)
	unitOpen   = span{lo: 0, loOpen: true, hi: 1, hiOpen: true}
)

// numberIn evaluates a as a number in s; hint follows the range in the
// diagnostic, as in " (the default is 0.5)".
func (d *decoder) numberIn(a *hcl.Attribute, s span, summary, hint string) (float64, bool) {
	v, ok := d.value(a.Name, a.Expr, cty.Number, "a number")
	if !ok {
		return 0, false
	}
	f, _ := v.AsBigFloat().Float64() // ±Inf beyond float64's range
	if math.IsInf(f, 0) || !s.contains(f) {
		d.errorf(a.Expr.Range(), summary, "%s %s is out of range; use %s%s.", a.Name, v.AsBigFloat().Text('g', 10), s, hint)
		return 0, false
	}
	return f, true
}

// rawNumber decodes an optional number attribute (a may be nil) into
// *dst, which keeps its value when a is unset or fails to decode (then
// failed records its name). It returns the number as written, for
// diagnostics. The range is for the number's owner to check.
func (d *decoder) rawNumber(a *hcl.Attribute, dst *float64, failed map[string]bool) string {
	if a == nil {
		return ""
	}
	v, ok := d.value(a.Name, a.Expr, cty.Number, "a number")
	if !ok {
		failed[a.Name] = true
		return ""
	}
	*dst, _ = v.AsBigFloat().Float64() // ±Inf beyond float64's range
	return v.AsBigFloat().Text('g', 10)
}

// fieldErrors returns the errors of an owner's Validate that a block's
// diagnostics are made of: those of settings that decoded, compared only
// with settings that decoded. attrs maps the owner's paths to the block's
// attributes; an error of a setting the block does not set (the owner's
// own default cannot fail) is reported at the block, at def.
func (d *decoder) fieldErrors(err error, attrs map[string]*hcl.Attribute, failed map[string]bool, def hcl.Range) []*weights.FieldError {
	var out []*weights.FieldError
next:
	for _, e := range weights.FieldErrors(err) {
		if failed[e.Path] {
			continue
		}
		for _, w := range e.With {
			if failed[w] {
				continue next
			}
		}
		if attrs[e.Path] == nil {
			d.errorf(def, "Invalid settings", "%s.", e.Msg)
			continue
		}
		out = append(out, e)
	}
	return out
}

// quotedList renders names as `"a", "b" or "c"`.
func quotedList(names []string, conj string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " " + conj + " " + q[len(q)-1]
}

// attributesInOrder returns the set attributes among attrs in source
// order.
func attributesInOrder(attrs ...*hcl.Attribute) []*hcl.Attribute {
	out := make([]*hcl.Attribute, 0, len(attrs))
	for _, a := range attrs {
		if a != nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *hcl.Attribute) int { return cmp.Compare(a.Range.Start.Byte, b.Range.Start.Byte) })
	return out
}

// sortDiagnostics orders diagnostics by position (those without one last),
// keeping the order of diagnostics at the same position. HCL reports
// unexpected attributes in map order, and golden files need a stable one.
func sortDiagnostics(diags hcl.Diagnostics) hcl.Diagnostics {
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		switch {
		case a.Subject == nil || b.Subject == nil:
			return cmp.Compare(boolInt(a.Subject == nil), boolInt(b.Subject == nil))
		}
		return cmp.Or(
			cmp.Compare(a.Subject.Filename, b.Subject.Filename),
			cmp.Compare(a.Subject.Start.Byte, b.Subject.Start.Byte),
		)
	})
	return diags
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
