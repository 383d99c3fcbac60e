package ringhash

import (
	"math"
	"slices"
	"testing"
)

func TestBuild(t *testing.T) {
	eps := []Endpoint{{"b:1", 2}, {"a:1", 1}, {"c:1", 1}}
	for _, tc := range []struct {
		name             string
		minSize, maxSize uint64
		counts           []int
	}{
		// scale = min(ceil(0.25 × 8) / 0.25, 8) = 8: 4, 2, 2 entries.
		{"exact", 8, 8, []int{4, 2, 2}},
		// scale 7: cumulative targets 1.75 (a), 5.25 (b), 7 (c) in
		// hash-key order give a 2, b 4, c 1.
		{"cumulative", 7, 7, []int{4, 2, 1}},
		// The minimum is rounded up to whole entries of the lightest.
		{"min", 5, 100, []int{4, 2, 2}},
	} {
		r := Build(eps, tc.minSize, tc.maxSize)
		for i, want := range tc.counts {
			if r.Counts[i] != want {
				t.Errorf("%s: %s has %d entries, want %d", tc.name, eps[i].HashKey, r.Counts[i], want)
			}
		}
		for i := 1; i < len(r.Entries); i++ {
			if r.Entries[i-1].Hash > r.Entries[i].Hash {
				t.Fatalf("%s: ring not sorted", tc.name)
			}
		}
		sum := 0.0
		for _, s := range r.Shares() {
			sum += s
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("%s: shares sum to %v", tc.name, sum)
		}
	}
}

func TestOwner(t *testing.T) {
	if got := Build(nil, 1, 1).Owner(42); got != -1 {
		t.Errorf("empty ring: owner %d, want -1", got)
	}
	r := Build([]Endpoint{{"a", 1}, {"b", 1}}, 4, 4)
	first, last := r.Entries[0], r.Entries[len(r.Entries)-1]
	for _, tc := range []struct {
		h    uint64
		want int
	}{
		{0, first.Endpoint},
		{first.Hash, first.Endpoint},
		{first.Hash + 1, r.Entries[1].Endpoint},
		{last.Hash, last.Endpoint},
		{last.Hash + 1, first.Endpoint}, // wraps around
		{math.MaxUint64, first.Endpoint},
	} {
		if got := r.Owner(tc.h); got != tc.want {
			t.Errorf("Owner(%d) = %d, want %d", tc.h, got, tc.want)
		}
	}
	if one := Build([]Endpoint{{"a", 1}}, 1, 1); one.Shares()[0] != 1 {
		t.Errorf("one entry: share %v, want 1", one.Shares())
	}
}

func TestExtended(t *testing.T) {
	eps := []Endpoint{{"b:1", 1}, {"a:1", 1}, {"c:1", 2}}
	short := Build(eps, 15, 15) // 4, 4, 7: c, last, is one short
	if short.Counts[2] != 7 || Last(eps) != 2 {
		t.Fatalf("counts %v, last %d", short.Counts, Last(eps))
	}
	full := short.Extended(eps, Last(eps))
	want := Build(eps, 16, 16)
	if !slices.Equal(full.Entries, want.Entries) || !slices.Equal(full.Counts, want.Counts) {
		t.Errorf("extended ring differs from the ring of size 16")
	}
	if len(short.Entries) != 15 {
		t.Error("Extended modified its receiver")
	}
	if Last(nil) != -1 {
		t.Error("Last(nil) != -1")
	}
}
