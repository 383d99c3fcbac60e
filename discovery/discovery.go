// Package discovery finds the replicas of each pool.
//
// A Source finds the replicas of one pool in one place (the policy's
// static list, DNS, Kubernetes EndpointSlices). It sends the complete,
// current set of its targets on every change, and an error instead when it
// cannot tell (the API server or resolver is unreachable, an answer is
// malformed): the Manager then keeps the source's last good targets (fail
// static). Sources never know about policy, metrics or xDS: the Manager
// merges their targets per pool, and the controller joins them with the
// policy into the fleet model.
//
// A target is one replica as the fleet model's Endpoint, so it enters the
// model as is: a source sets its address, weight (0 means 1), hash key
// (empty means host:port), locality, and Health fleet.Draining for a
// replica that is going away (a terminating pod still serving: it takes no
// new keys, in-flight requests finish). The Manager records which source
// reported it beside it, in PoolTargets.Sources.
package discovery

import (
	"cmp"
	"context"
	"slices"

	"github.com/kvxds/kvxds/fleet"
)

// Update is what a source sends: its complete current targets, or Err
// when it cannot tell what they are (Targets is then ignored).
type Update struct {
	Targets []fleet.Endpoint
	Err     error
}

// Source finds the targets of one pool. Run sends an Update on every
// change (the first as soon as it knows), never blocks past ctx, and
// returns when ctx is done.
type Source interface {
	Run(ctx context.Context, up chan<- Update)
}

// PoolTargets is the current set of targets of one pool.
type PoolTargets struct {
	Pool    string
	Targets []fleet.Endpoint
	// Sources names, by target address, the ID of the source that
	// reported it; the Manager fills it in (nil elsewhere).
	Sources map[string]string
}

// SortTargets orders targets by address, so equal sets compare equal.
func SortTargets(ts []fleet.Endpoint) {
	slices.SortFunc(ts, func(a, b fleet.Endpoint) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port))
	})
}

// Static is a fixed list of targets, as written in a policy.
type Static []fleet.Endpoint

// Run sends the targets once, then waits for ctx.
func (s Static) Run(ctx context.Context, up chan<- Update) {
	ts := slices.Clone(s)
	SortTargets(ts)
	select {
	case up <- Update{Targets: ts}:
	case <-ctx.Done():
		return
	}
	<-ctx.Done()
}
