package translate

import (
	"slices"
	"strconv"
	"strings"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/xds/translate/bodykey"
)

// Hot keys (fleet.HotKeys) are served in the pool's routes alone, so a
// change of the table is one RDS update per client: no cluster, assignment
// or listener changes.
//
// Each entry of the table gets one route, after the group routes and
// before the pool's own key routes, that matches the entry's key header
// exactly with every earlier key of the chain absent (so the chain's
// first-present-key-wins holds), and sends it to the pool's own cluster
// with two terminal hash policies: first the spread header, rewritten to
// its first log2(spread) bits followed by spreadMark and the hash of the
// key's value, then the key header. A request of the hot key with a
// spread header hashes on the rewritten value, which takes up to spread
// values per key: the key's requests land on up to spread table
// positions, each sub-key on one, and two hot keys on different ones. A
// request of the key without a spread header hashes on its key alone:
// its home replica.
//
// Why not the key's header, not terminal, then the spread header, folded
// as rotl(hash, 1) ^ next: grpc-js (1.14) folds in BigInt without
// reducing to 64 bits, so every key whose hash has its top bit set would
// send all of its spread requests to the first entry of the ring. One
// terminal policy that produces the hash is read alike by every client.
//
// One exact match per value rather than one regex alternation per key:
// Envoy rejects a regex whose RE2 program is larger than 100 by default
// (runtime re2.max_program_size.error_level), which an alternation of a
// few 16-hex-digit values exceeds.
//
// The rewrite replaces the last SpreadBits - log2(spread) bits (or the
// end, at spread 256) with a literal: Envoy's substitution syntax (RE2,
// \1) is not grpc-go's (Go, $1), and grpc-js skips an empty
// substitution, so it uses neither a capture group nor an empty string,
// and the literal (spreadMark and hex digits) has no character any of
// them treats specially.

// spreadMark separates a rewritten spread value's bits from its key's
// hash.
const spreadMark = "-"

// SpreadSubstitution is what a hot key's route writes in place of the
// spread bits it cuts: spreadMark and the key value's bodykey.Hash, so
// that two hot keys spread over different table positions.
func SpreadSubstitution(value string) string { return spreadMark + bodykey.Hash([]byte(value)) }

// hotKeyLogFlush is how often Envoy sends its buffered access log entries.
const hotKeyLogFlush = time.Second

// hotRoutes returns the routes of p's hot-key table for kind; keys are the
// pool's route keys for the kind (routeKeys), whose chain they keep.
func hotRoutes(p *fleet.Pool, kind Kind) []*routev3.Route {
	if p.Balancer != fleet.ConsistentHash || p.Hash.Hot == nil || len(p.HotKeys) == 0 {
		return nil
	}
	var routes []*routev3.Route
	for _, e := range p.HotKeys {
		header, absent, ok := hotKeyMatch(p, kind, e.Key)
		if !ok {
			continue
		}
		m := prefixMatch()
		m.Headers = append(absent, &routev3.HeaderMatcher{
			Name: header,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Exact{Exact: e.Value},
			}},
		})
		pattern := "$"
		if cut := fleet.SpreadBits - fleet.SpreadLevel(e.Spread); cut > 0 {
			pattern = "[01]{" + strconv.Itoa(cut) + "}$"
		}
		spread := &routev3.RouteAction_HashPolicy_Header{
			HeaderName: fleet.DefaultSpreadHeader,
			RegexRewrite: &matcherv3.RegexMatchAndSubstitute{
				Pattern:      &matcherv3.RegexMatcher{Regex: pattern},
				Substitution: SpreadSubstitution(e.Value),
			},
		}
		hp := []*routev3.RouteAction_HashPolicy{
			{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: spread}, Terminal: true},
			{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: header}}, Terminal: true},
		}
		routes = append(routes, &routev3.Route{Match: m, Action: routeAction(p, p.Name, hp)})
	}
	return routes
}

// hotKeyMatch returns the route header of key i of p's chain as kind sees
// it, and the matchers that require every earlier key of kind's chain to
// be absent. ok is false when kind cannot see the key (a body key for a
// gRPC client; a cookie or query parameter, which carry no header value)
// or cannot tell an earlier key absent (a query parameter).
func hotKeyMatch(p *fleet.Pool, kind Kind, i int) (header string, absent []*routev3.HeaderMatcher, ok bool) {
	body := bodyKeys(p, kind)
	name := func(j int) string {
		k := p.Hash.Keys[j]
		switch {
		case k.Header != "":
			return strings.ToLower(k.Header)
		case k.Body() && body:
			return bodykey.Header(j)
		}
		return ""
	}
	if header = name(i); header == "" {
		return "", nil, false
	}
	for j := range i {
		k := p.Hash.Keys[j]
		var hm *routev3.HeaderMatcher
		switch {
		case k.QueryParameter != "":
			return "", nil, false
		case k.Cookie != "":
			hm = cookieMatcher(k.Cookie)
		case name(j) != "":
			hm = &routev3.HeaderMatcher{
				Name:                 name(j),
				HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
			}
		default: // a body key kind does not compute
			continue
		}
		hm.InvertMatch = true
		absent = append(absent, hm)
	}
	return header, absent, true
}

// hotKeyAccessLog is the access log through which Envoy reports p's
// requests to kvxds (envoy.service.accesslog.v3.AccessLogService on the
// ADS server): the key headers of the chain as Envoy sees them and the
// spread header, from which kvxds learns the pool's hot keys, and in a pool
// placing adapters the adapter header and the rejection header.
func hotKeyAccessLog(p *fleet.Pool) (*accesslogv3.AccessLog, error) {
	var headers []string
	for _, k := range routeKeys(p, Envoy) {
		if k.Header != "" {
			headers = append(headers, strings.ToLower(k.Header))
		}
	}
	logCluster := fleet.DefaultLogCluster
	if p.Hash.Hot != nil {
		headers = append(headers, fleet.DefaultSpreadHeader)
		logCluster = p.Hash.Hot.LogCluster
	}
	// A pool placing adapters also logs each request's adapter, and why
	// the Lua filter found none in a body that named one.
	if a := p.LoRA; a != nil {
		headers = append(headers, a.Header, fleet.AdapterRejectedHeader)
	}
	// A decode pool logs the prefill replica named for each request, and
	// the prefill pool's keys, whose hot ones kvxds learns from them.
	if pf := p.Prefill; pf != nil {
		headers = append(headers, pf.Header)
		if t := p.PrefillTable; t != nil {
			for _, h := range PrefillLogHeaders(t) {
				if h != "" && !slices.Contains(headers, h) {
					headers = append(headers, h)
				}
			}
		}
	}
	// Where the pick or prefill filter sent a keyed request, which says
	// whether it followed its key away from its slot's replica.
	if Picks(p, Envoy) || p.Prefill != nil && p.PrefillTable != nil {
		headers = append(headers, LoadLogWent)
	}
	return grpcAccessLog(HotKeyLogName(p.Name), logCluster, hotKeyLogFlush, headers)
}

// grpcAccessLog is an Envoy gRPC access log to kvxds (the cluster
// logCluster names), flushed every flush, with the request headers kvxds
// reads.
func grpcAccessLog(name, logCluster string, flush time.Duration, headers []string) (*accesslogv3.AccessLog, error) {
	cfg, err := typed(&grpcalsv3.HttpGrpcAccessLogConfig{
		CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{
			LogName: name,
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: logCluster},
			}},
			TransportApiVersion: corev3.ApiVersion_V3,
			BufferFlushInterval: durationpb.New(flush),
		},
		AdditionalRequestHeadersToLog: headers,
	})
	if err != nil {
		return nil, err
	}
	return &accesslogv3.AccessLog{
		Name:       wellknown.HTTPGRPCAccessLog,
		ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: cfg},
	}, nil
}

// HotKeyLogPrefix starts the log name of every pool's access log: pool
// "chat" logs as "kvxds/chat". The access log service (xds/accesslog)
// reads the pool back from it.
const HotKeyLogPrefix = "kvxds/"

// HotKeyLogName is the access log name of pool's Envoy listener.
func HotKeyLogName(pool string) string { return HotKeyLogPrefix + pool }
