package envoylb

import (
	"errors"
	"fmt"
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
}

// HashPolicy is a route's hash policy chain (Http::HashPolicyImpl).
type HashPolicy []HashMethod

// CompileHashPolicy reads route hash policies. Policies whose input a
// Request does not carry (connection properties, filter state, cookies
// Envoy would generate, rewritten headers) are errors.
func CompileHashPolicy(hps []*routev3.RouteAction_HashPolicy) (HashPolicy, error) {
	var out HashPolicy
	for _, hp := range hps {
		m := HashMethod{Terminal: hp.GetTerminal()}
		switch s := hp.GetPolicySpecifier().(type) {
		case *routev3.RouteAction_HashPolicy_Header_:
			if s.Header.GetRegexRewrite() != nil {
				return nil, errors.New("hash policy: header regex_rewrite is not modelled")
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

// Hash is HashPolicyImpl::generateHash: each method that finds its input
// folds its hash into the running one (rotated left by one bit, then
// xor), and a terminal method that leaves a hash ends the chain. ok is
// false when no method found its input: Envoy then hashes a random value.
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
		return HeaderHash(r.Values(m.Header))
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
