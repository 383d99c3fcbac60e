package examples_test

import (
	"fmt"
	"maps"
	"regexp"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// promQL is the parser Prometheus uses for rules, with its defaults.
var promQL = parser.NewParser(parser.Options{})

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{model.JobLabel, model.InstanceLabel}

// labelSet is a set of label names.
type labelSet map[string]bool

func (s labelSet) union(o labelSet) labelSet {
	out := labelSet{}
	for l := range s {
		out[l] = true
	}
	for l := range o {
		out[l] = true
	}
	return out
}

// checker checks that a PromQL expression only selects series kvxds
// exports, matches and groups them only on labels they carry, and names
// only labels its result carries in templates ({{ $labels.x }}, legend
// {{x}}).
type checker struct {
	exported series
}

// check parses expr and returns every problem found, and the labels of
// its result.
func (c checker) check(expr string) (labelSet, []error) {
	e, err := promQL.ParseExpr(expr)
	if err != nil {
		return nil, []error{err}
	}
	var errs []error
	out := c.labels(e, &errs)
	return out, errs
}

// labels returns the label names of the series e evaluates to, and
// appends to errs every selector of an unknown series and every label
// that the series it applies to do not carry.
func (c checker) labels(e parser.Expr, errs *[]error) labelSet {
	switch e := e.(type) {
	case *parser.VectorSelector:
		return c.selector(e, errs)
	case *parser.MatrixSelector:
		return c.labels(e.VectorSelector, errs)
	case *parser.SubqueryExpr:
		return c.labels(e.Expr, errs)
	case *parser.ParenExpr:
		return c.labels(e.Expr, errs)
	case *parser.UnaryExpr:
		return c.labels(e.Expr, errs)
	case *parser.StepInvariantExpr:
		return c.labels(e.Expr, errs)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return labelSet{}
	case *parser.Call:
		var out labelSet
		for _, a := range e.Args {
			l := c.labels(a, errs)
			if out == nil && (a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix) {
				out = l
			}
		}
		if e.Func.ReturnType != parser.ValueTypeVector {
			return labelSet{}
		}
		out = out.union(nil)
		switch e.Func.Name {
		case "histogram_quantile":
			delete(out, model.BucketLabel)
		case "label_replace", "label_join":
			if s, ok := e.Args[1].(*parser.StringLiteral); ok {
				out[s.Val] = true
			}
		}
		return out
	case *parser.AggregateExpr:
		in := c.labels(e.Expr, errs)
		if e.Param != nil {
			c.labels(e.Param, errs)
		}
		for _, l := range e.Grouping {
			if !in[l] {
				*errs = append(*errs, fmt.Errorf("%s: grouping by %q, a label the aggregated series do not carry (%s)", e, l, names(in)))
			}
		}
		switch {
		case e.Op == parser.TOPK || e.Op == parser.BOTTOMK || e.Op == parser.LIMITK || e.Op == parser.LIMIT_RATIO:
			return in
		case e.Without:
			out := in.union(nil)
			for _, l := range e.Grouping {
				delete(out, l)
			}
			return out
		}
		out := labelSet{}
		for _, l := range e.Grouping {
			out[l] = true
		}
		if e.Op == parser.COUNT_VALUES {
			if s, ok := e.Param.(*parser.StringLiteral); ok {
				out[s.Val] = true
			}
		}
		return out
	case *parser.BinaryExpr:
		lhs, rhs := c.labels(e.LHS, errs), c.labels(e.RHS, errs)
		m := e.VectorMatching
		if m == nil || e.LHS.Type() != parser.ValueTypeVector || e.RHS.Type() != parser.ValueTypeVector {
			if e.LHS.Type() == parser.ValueTypeVector {
				return lhs
			}
			return rhs
		}
		if m.On {
			for _, l := range m.MatchingLabels {
				if !lhs[l] || !rhs[l] {
					*errs = append(*errs, fmt.Errorf("%s: matching on %q, a label not on both sides (%s; %s)", e, l, names(lhs), names(rhs)))
				}
			}
		}
		switch m.Card {
		case parser.CardManyToOne:
			return c.include(e, lhs, rhs, m.Include, errs)
		case parser.CardOneToMany:
			return c.include(e, rhs, lhs, m.Include, errs)
		case parser.CardManyToMany: // and, or, unless
			if e.Op == parser.LOR {
				return lhs.union(rhs)
			}
			return lhs
		}
		out := labelSet{}
		for l := range lhs {
			if slices.Contains(m.MatchingLabels, l) == m.On {
				out[l] = true
			}
		}
		return out
	}
	*errs = append(*errs, fmt.Errorf("%s: unexpected %T", e, e))
	return labelSet{}
}

// include returns the labels of a group_left (group_right) result: the
// many side's and the included labels of the one side, which must carry
// them.
func (c checker) include(e *parser.BinaryExpr, many, one labelSet, include []string, errs *[]error) labelSet {
	out := many.union(nil)
	for _, l := range include {
		if !one[l] {
			*errs = append(*errs, fmt.Errorf("%s: including %q, a label the one side does not carry (%s)", e, l, names(one)))
		}
		out[l] = true
	}
	return out
}

// selector checks a vector selector: it must name one series by its
// metric name, exported by kvxds, and match only on labels it carries
// (or that Prometheus adds).
func (c checker) selector(vs *parser.VectorSelector, errs *[]error) labelSet {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	have, ok := c.exported[name]
	if !ok {
		*errs = append(*errs, fmt.Errorf("%s: %q is not a series kvxds exports", vs, name))
		return labelSet{}
	}
	out := labelSet{}
	for l := range have {
		out[l] = true
	}
	for _, l := range targetLabels {
		out[l] = true
	}
	for _, m := range vs.LabelMatchers {
		if m.Name != model.MetricNameLabel && !out[m.Name] {
			*errs = append(*errs, fmt.Errorf("%s: matching on %q, a label %s does not carry (%s)", vs, m.Name, name, names(out)))
		}
	}
	return out
}

// templateLabels checks that every label a template names is one of
// have. pattern's first group is the label name.
func templateLabels(what, text string, pattern *regexp.Regexp, have labelSet) []error {
	var errs []error
	for _, m := range pattern.FindAllStringSubmatch(text, -1) {
		if !have[m[1]] {
			errs = append(errs, fmt.Errorf("%s %q names label %q, which the result does not carry (%s)", what, text, m[1], names(have)))
		}
	}
	return errs
}

var (
	// annotationLabel is $labels.x in an alert's annotations.
	annotationLabel = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	// legendLabel is {{x}} in a Grafana legend.
	legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

func names(s labelSet) string {
	if len(s) == 0 {
		return "no labels"
	}
	return fmt.Sprint(slices.Sorted(maps.Keys(s)))
}
