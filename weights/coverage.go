package weights

import (
	"math"
	"slices"
)

// SignalSet is a set of signals (SignalNames), one bit each: which
// signals a profile reads, and which ones a replica's page carried.
type SignalSet uint16

// signalBit is the bit of a signal name; 0 for an unknown name.
func signalBit(name string) SignalSet {
	i := slices.IndexFunc(signalSlots, func(s signalSlot) bool { return s.name == name })
	if i < 0 {
		return 0
	}
	return 1 << i
}

// Has reports whether the set holds the signal name.
func (s SignalSet) Has(name string) bool {
	b := signalBit(name)
	return b != 0 && s&b != 0
}

// Names returns the set's signals in SignalNames order.
func (s SignalSet) Names() []string {
	var out []string
	for i, sl := range signalSlots {
		if s&(1<<i) != 0 {
			out = append(out, sl.name)
		}
	}
	return out
}

// Reads returns the signals p maps to metrics.
func (p *Profile) Reads() SignalSet {
	var out SignalSet
	for i, sl := range signalSlots {
		if len(*sl.slot(p)) > 0 {
			out |= 1 << i
		}
	}
	return out
}

// Series returns the alternatives p reads a signal from, first match
// first; nil for a signal it does not read.
func (p *Profile) Series(signal string) []Series {
	i := slices.IndexFunc(signalSlots, func(s signalSlot) bool { return s.name == signal })
	if i < 0 {
		return nil
	}
	return cloneSeries(*signalSlots[i].slot(p))
}

// Carried returns the signals s holds a value for: what the page it was
// extracted from carried, after the profile's label and model filters.
func (s *Signals) Carried() SignalSet {
	var out SignalSet
	for _, sv := range [...]struct {
		name string
		v    float64
	}{
		{SignalQueueDepth, s.QueueDepth}, {SignalRunning, s.Running}, {SignalKVOccupancy, s.KVOccupancy},
		{SignalPreemptions, s.Preemptions}, {SignalPrefixQueries, s.PrefixQueries},
		{SignalPrefixHits, s.PrefixHits}, {SignalPrefixHitRate, s.PrefixHitRate},
	} {
		if !math.IsNaN(sv.v) {
			out |= signalBit(sv.name)
		}
	}
	if s.TTFT != nil {
		out |= signalBit(SignalTTFT)
	}
	return out
}

// Lacks returns the signals p reads that a page carrying found lacks. The
// hit rate has two sources, the lookup and hit counters or the engine's
// own rate (vLLM V1 exports the first, V0 may export only the second): a
// page with either source lacks neither, and one with neither lacks the
// counters, the source p prefers, if p reads them.
func (p *Profile) Lacks(found SignalSet) SignalSet {
	reads := p.Reads()
	missing := reads &^ found
	counters := signalBit(SignalPrefixQueries) | signalBit(SignalPrefixHits)
	rate := signalBit(SignalPrefixHitRate)
	switch {
	case found&counters == counters:
		missing &^= rate
	case found&rate != 0:
		missing &^= counters
	case reads&counters != 0:
		missing &^= rate
	}
	return missing
}

// What kvxds does with a signal (SignalUse).
const (
	UseWeightsAndEscape = "weights and escape hatch"
	UseEscape           = "escape hatch"
	UseStatus           = "status"
)

// SignalUse says what kvxds does with a signal: queue depth and KV
// occupancy drive weights and the escape hatch, the preemption rate the
// escape hatch; the others (running, hit rate, TTFT) are only shown.
func SignalUse(name string) string {
	switch name {
	case SignalQueueDepth, SignalKVOccupancy:
		return UseWeightsAndEscape
	case SignalPreemptions:
		return UseEscape
	}
	return UseStatus
}
