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
package discovery

import (
	"cmp"
	"context"
	"net"
	"slices"
	"strconv"
)

// Target is one replica found by a source.
type Target struct {
	Host string
	Port uint32
	// Weight is a static weight (>= 1); 0 means 1.
	Weight uint32
	// HashKey is the replica's stable identity on the hash ring; empty
	// means host:port.
	HashKey               string
	Region, Zone, SubZone string
	// Draining marks a replica that is going away (a terminating pod
	// still serving): it takes no new keys, in-flight requests finish.
	Draining bool
	// Source is the ID of the source that reported the target; the
	// Manager sets it (sources leave it empty).
	Source string
}

// Address is host:port, with brackets around an IPv6 host.
func (t Target) Address() string {
	return net.JoinHostPort(t.Host, strconv.FormatUint(uint64(t.Port), 10))
}

// Update is what a source sends: its complete current targets, or Err
// when it cannot tell what they are (Targets is then ignored).
type Update struct {
	Targets []Target
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
	Targets []Target
}

// SortTargets orders targets by address, so equal sets compare equal.
func SortTargets(ts []Target) {
	slices.SortFunc(ts, func(a, b Target) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port))
	})
}

// Static is a fixed list of targets, as written in a policy.
type Static []Target

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
