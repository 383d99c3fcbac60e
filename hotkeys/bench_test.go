package hotkeys

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkObserve observes a stream of mostly distinct keys (every
// observation of a new key evicts one), one hot key in five.
func BenchmarkObserve(b *testing.B) {
	values := make([]string, 1<<16)
	for i := range values {
		values[i] = fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15)
		if i%5 == 0 {
			values[i] = "hot"
		}
	}
	s := NewSketch(time.Minute)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Observe(0, values[i&(len(values)-1)], t0.Add(time.Duration(i)*time.Microsecond))
		i++
	}
}

// BenchmarkDecide decides from a full sketch.
func BenchmarkDecide(b *testing.B) {
	s := NewSketch(time.Minute)
	for i := range 100000 {
		v := fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15)
		if i%5 == 0 {
			v = "hot"
		}
		s.Observe(0, v, t0.Add(time.Duration(i)*time.Microsecond))
	}
	set := settings()
	b.ReportAllocs()
	for b.Loop() {
		s.observed = 1
		s.Decide(t0.Add(time.Second), 8, set, nil, nil)
	}
}
