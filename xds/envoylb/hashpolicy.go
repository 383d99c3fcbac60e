package envoylb

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// Request is what a route and its hash policies read of an HTTP request.
type Request struct {
	// Path is the :path pseudo-header, query string included.
	Path string
	// Headers are the request headers, in order; names match without
	// regard to case, as Envoy keeps them lower-case.
	Headers [][2]string
}

// Values returns the values of every header called name, in order.
func (r *Request) Values(name string) []string {
	var out []string
	for _, h := range r.Headers {
		if strings.EqualFold(h[0], name) {
			out = append(out, h[1])
		}
	}
	return out
}

// HashMethod is one route hash policy.
type HashMethod struct {
	// Exactly one of Header, Cookie and QueryParameter is set.
	Header, Cookie, QueryParameter string
	Terminal                       bool
	// Rewrite, if set, rewrites each of Header's values before they are
	// hashed (the header policy's regex_rewrite).
	Rewrite *Rewrite
}

// Rewrite is a header hash policy's regex_rewrite: every match of Pattern
// in a value is replaced by Substitution, in which \N names the N-th
// capture group (RE2::GlobalReplace, as Envoy's Regex::replaceAll calls
// it).
type Rewrite struct {
	Pattern      *regexp.Regexp
	Substitution string
	// expand is Substitution in Go's template syntax ($ escaped, \N as
	// ${N}).
	expand string
}

// NewRewrite compiles a regex_rewrite's pattern and substitution.
func NewRewrite(pattern, substitution string) (*Rewrite, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("regex_rewrite: %w", err)
	}
	var b strings.Builder
	for i := 0; i < len(substitution); i++ {
		c := substitution[i]
		switch {
		case c == '$':
			b.WriteString("$$")
		case c == '\\' && i+1 < len(substitution) && substitution[i+1] >= '0' && substitution[i+1] <= '9':
			n := int(substitution[i+1] - '0')
			if n > re.NumSubexp() {
				return nil, fmt.Errorf("regex_rewrite: substitution %q names group %d of %d", substitution, n, re.NumSubexp())
			}
			fmt.Fprintf(&b, "${%d}", n)
			i++
		case c == '\\' && i+1 < len(substitution) && substitution[i+1] == '\\':
			b.WriteByte('\\')
			i++
		case c == '\\':
			// RE2's Rewrite rejects any other escape.
			return nil, fmt.Errorf("regex_rewrite: substitution %q has a bad escape", substitution)
		default:
			b.WriteByte(c)
		}
	}
	return &Rewrite{Pattern: re, Substitution: substitution, expand: b.String()}, nil
}

// Apply rewrites one header value.
func (r *Rewrite) Apply(v string) string { return r.Pattern.ReplaceAllString(v, r.expand) }

// HashPolicy is a route's hash policy chain (Http::HashPolicyImpl).
type HashPolicy []HashMethod

// CompileHashPolicy reads route hash policies. Policies whose input a
// Request does not carry (connection properties, filter state, cookies
// Envoy would generate) are errors.
func CompileHashPolicy(hps []*routev3.RouteAction_HashPolicy) (HashPolicy, error) {
	var out HashPolicy
	for _, hp := range hps {
		m := HashMethod{Terminal: hp.GetTerminal()}
		switch s := hp.GetPolicySpecifier().(type) {
		case *routev3.RouteAction_HashPolicy_Header_:
			if rr := s.Header.GetRegexRewrite(); rr != nil {
				rw, err := NewRewrite(rr.GetPattern().GetRegex(), rr.GetSubstitution())
				if err != nil {
					return nil, fmt.Errorf("hash policy: %w", err)
				}
				m.Rewrite = rw
			}
			m.Header = strings.ToLower(s.Header.GetHeaderName())
		case *routev3.RouteAction_HashPolicy_Cookie_:
			if s.Cookie.GetTtl() != nil {
				return nil, errors.New("hash policy: generated cookies (ttl) are not modelled")
			}
			m.Cookie = s.Cookie.GetName()
		case *routev3.RouteAction_HashPolicy_QueryParameter_:
			m.QueryParameter = s.QueryParameter.GetName()
		default:
			return nil, fmt.Errorf("hash policy: %T is not modelled", s)
		}
		out = append(out, m)
	}
	return out, nil
}

// Hash is HashPolicyImpl::generateHash (source/common/http/hash_policy.cc):
// each method that finds its input folds its hash into the running one,
// hash = (hash << 1 | hash >> 63) ^ new (the first one into 0), a method
// whose input is missing is skipped, and a terminal method ends the
// chain once there is a hash. ok is false when no method found its
// input: Envoy then hashes a random value.
func (p HashPolicy) Hash(r *Request) (h uint64, ok bool) {
	for _, m := range p {
		if v, found := m.hash(r); found {
			old := uint64(0)
			if ok {
				old = h<<1 | h>>63
			}
			h, ok = old^v, true
		}
		if m.Terminal && ok {
			break
		}
	}
	return h, ok
}

func (m HashMethod) hash(r *Request) (uint64, bool) {
	switch {
	case m.Header != "":
		vs := r.Values(m.Header)
		if m.Rewrite != nil {
			// HeaderHashMethod rewrites each value, then sorts and hashes.
			vs = slices.Clone(vs)
			for i, v := range vs {
				vs[i] = m.Rewrite.Apply(v)
			}
		}
		return HeaderHash(vs)
	case m.Cookie != "":
		v := CookieValue(r, m.Cookie)
		return xxhash.Sum64String(v), v != ""
	case m.QueryParameter != "":
		v, ok := QueryValue(r.Path, m.QueryParameter)
		return xxhash.Sum64String(v), ok
	}
	return 0, false
}

// HeaderHash is the hash of a header's values, sorted so that their order
// does not matter: XXH64 of each, seeded with the hash of the ones before
// (the first with 0), so a single value hashes as itself.
func HeaderHash(values []string) (uint64, bool) {
	if len(values) == 0 {
		return 0, false
	}
	values = slices.Clone(values)
	slices.Sort(values)
	return xxh64Join(values), true
}

// xxh64Join is HashUtil::xxHash64 over a span: each string's XXH64 seeds
// the next one's.
func xxh64Join(ss []string) uint64 {
	var h uint64
	for _, s := range ss {
		h = seeded(s, h)
	}
	return h
}

// CookieValue is Http::Utility::parseCookieValue: the value of the first
// cookie called name in the Cookie headers, without surrounding double
// quotes, or "".
func CookieValue(r *Request, name string) string {
	for _, h := range r.Values("cookie") {
		for pair := range strings.SplitSeq(h, ";") {
			pair = strings.TrimLeft(pair, " \t")
			k, v, found := strings.Cut(pair, "=")
			if !found || k != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// QueryValue is the first value of parameter name in path's query string,
// undecoded, as QueryParamsMulti::parseQueryString gives it; a parameter
// without "=" has the empty value.
func QueryValue(path, name string) (string, bool) {
	_, q, found := strings.Cut(path, "?")
	if !found {
		return "", false
	}
	for p := range strings.SplitSeq(q, "&") {
		k, v, _ := strings.Cut(p, "=")
		if k == name {
			return v, true
		}
	}
	return "", false
}
