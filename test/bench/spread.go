package bench

import (
	"github.com/kvxds/kvxds/fleet"
)

// SpreadHeader carries a request's spread sub-key: the pool's hot-key
// routes hash a hot key's requests on it too, so that each conversation
// under a hot key keeps one of the key's table positions.
const SpreadHeader = fleet.DefaultSpreadHeader

// withSpreads returns a copy of p whose requests carry their spread
// sub-key, as a gRPC client of a pool that spreads its hot keys by k
// computes it ahead: bodykey.Spread of k's keyed bytes of the request's
// chat body (KeyBody, BodyKey.SpreadOf); none where the body has no such
// key.
func withSpreads(p *workloadPlan, k BodyKey) *workloadPlan {
	q := *p
	q.Requests = make([]Request, len(p.Requests))
	for i, r := range p.Requests {
		r.Spread, _ = k.SpreadOf(&r)
		q.Requests[i] = r
	}
	return &q
}
