package status

import (
	"testing"

	"github.com/kvxds/kvxds/fleet"
)

func TestReplicaHealth(t *testing.T) {
	for _, tc := range []struct {
		pushed           fleet.Health
		saturated, stale bool
		want             Health
	}{
		{fleet.Healthy, false, false, Serving},
		{fleet.Healthy, false, true, Stale},
		{fleet.Draining, false, false, Draining},
		{fleet.Draining, true, false, Saturated},
		{fleet.Draining, false, true, Draining},
		{fleet.Degraded, false, true, Degraded},
		{fleet.Unhealthy, false, false, Unhealthy},
		// The verdict wins whatever was pushed.
		{fleet.Healthy, true, false, Saturated},
		{fleet.Unhealthy, true, true, Saturated},
	} {
		if got := ReplicaHealth(tc.pushed, tc.saturated, tc.stale); got != tc.want {
			t.Errorf("ReplicaHealth(%v, saturated %v, stale %v) = %s, want %s", tc.pushed, tc.saturated, tc.stale, got, tc.want)
		}
	}
}
