package bench

import (
	"strconv"

	"github.com/kvxds/kvxds/fleet"
)

// SpreadHeader carries a request's spread sub-key: the pool's hot-key
// routes hash a hot key's requests on it too, so that each conversation
// under a hot key keeps one of the key's table positions.
const SpreadHeader = fleet.DefaultSpreadHeader

// SpreadBits is the spread sub-key header value of a key whose header
// value (bodykey.Hash of its bytes) is hash: the first fleet.SpreadBits
// bits of the hash, its first two hex digits, as '0' and '1', most
// significant first. It is what bodykey.Spread computes from the
// sub-key's bytes and the generated Lua filter sets for Envoy; a hot-key
// route keeps the first log2(spread) characters. A hash that does not
// start with two hex digits gives "" (no sub-key).
func SpreadBits(hash string) string {
	if len(hash) < fleet.SpreadBits/4 {
		return ""
	}
	v, err := strconv.ParseUint(hash[:fleet.SpreadBits/4], 16, fleet.SpreadBits)
	if err != nil {
		return ""
	}
	b := strconv.FormatUint(v, 2)
	for len(b) < fleet.SpreadBits {
		b = "0" + b
	}
	return b
}

// withSpreads returns a copy of p whose requests carry their spread
// sub-key, as a gRPC client of a pool that spreads its hot keys by k
// computes it ahead: SpreadBits of k's key of the request's chat body
// (KeyBody); none where the body has no such key.
func withSpreads(p *workloadPlan, k BodyKey) *workloadPlan {
	q := *p
	q.Requests = make([]Request, len(p.Requests))
	for i, r := range p.Requests {
		r.Spread = ""
		if h, ok := k.Of(&r); ok {
			r.Spread = SpreadBits(h)
		}
		q.Requests[i] = r
	}
	return &q
}
