// Package discovery finds the replicas of each pool.
//
// A Discoverer sends the complete, current set of targets of every pool it
// knows on each change; a pool it no longer knows is sent with no targets.
// Sources never know about policy, metrics or xDS: the controller joins
// their output into the fleet model.
package discovery

import (
	"cmp"
	"context"
	"slices"
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
}

// Group is the current set of targets of one pool.
type Group struct {
	Pool    string
	Targets []Target
}

// Discoverer sends groups on up until ctx is done.
type Discoverer interface {
	Run(ctx context.Context, up chan<- []Group)
}

// Static is a fixed set of groups, as written in a policy.
type Static []Group

// Run sends the groups once, then waits for ctx.
func (s Static) Run(ctx context.Context, up chan<- []Group) {
	groups := slices.Clone(s)
	slices.SortFunc(groups, func(a, b Group) int { return cmp.Compare(a.Pool, b.Pool) })
	select {
	case up <- groups:
	case <-ctx.Done():
		return
	}
	<-ctx.Done()
}
