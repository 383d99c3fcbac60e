package bench

import "testing"

// Chat's targets against round robin compare what each prefills (the
// share of prompt tokens missed), so that round robin's own hit rate,
// which moves by a hundredth between runs, decides nothing near the
// line: 0.22 and 0.23 give the same verdict for kvxds at 0.89.
func TestChatTargets(t *testing.T) {
	const goal = "kvxds prompt tokens prefilled ≤ 0.25 × round_robin's"
	for _, tc := range []struct {
		name   string
		rr, kv float64
		met    bool
	}{
		{"round robin 0.22", 0.22, 0.893, true},
		{"round robin 0.23", 0.23, 0.893, true},
		{"kvxds prefills over a quarter of what round robin does", 0.22, 0.80, false},
		{"just under a quarter", 0.20, 0.81, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &WorkloadReport{Name: "chat", Modes: []ModeResult{
				{Mode: RoundRobin, HitRate: tc.rr, ClientTTFT: Quantiles{P95: 0.4}, EngineTTFT: Quantiles{P95: 0.4}},
				{Mode: KVXDS, HitRate: tc.kv, ClientTTFT: Quantiles{P95: 0.07}, EngineTTFT: Quantiles{P95: 0.06}},
				{Mode: UpperBound, HitRate: 0.903},
			}}
			found := false
			for _, tg := range Targets(w) {
				if tg.Goal != goal {
					continue
				}
				found = true
				if tg.Met != tc.met {
					t.Errorf("%s: met = %v (%s), want %v", tg.Goal, tg.Met, tg.Measured, tc.met)
				}
			}
			if !found {
				t.Fatalf("no target %q in %+v", goal, Targets(w))
			}
		})
	}
}
