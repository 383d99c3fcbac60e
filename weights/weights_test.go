package weights

import (
	"encoding/json"
	"testing"
)

// Published decisions keep their wire form: followers of any version
// read what a leader of any version writes.
func TestDecisionJSON(t *testing.T) {
	for _, tc := range []struct {
		d    Decision
		wire string
	}{
		{Decision{Weight: 3}, `{"weight":3,"health":"serving"}`},
		{Decision{Weight: 2, Saturated: true}, `{"weight":2,"health":"saturated"}`},
		{Decision{Weight: 1, Stale: true}, `{"weight":1,"health":"serving","stale":true}`},
		{Decision{Weight: 2, Cached: 12}, `{"weight":2,"health":"serving","cached":12}`},
	} {
		b, err := json.Marshal(tc.d)
		if err != nil || string(b) != tc.wire {
			t.Errorf("%+v: %s, %v; want %s", tc.d, b, err, tc.wire)
		}
		var got Decision
		if err := json.Unmarshal([]byte(tc.wire), &got); err != nil || got != tc.d {
			t.Errorf("%s: %+v, %v; want %+v", tc.wire, got, err, tc.d)
		}
	}
	var d Decision
	if err := json.Unmarshal([]byte(`{"weight":4}`), &d); err != nil || d != (Decision{Weight: 4}) {
		t.Errorf("without a health: %+v, %v; want serving", d, err)
	}
	if err := json.Unmarshal([]byte(`{"weight":4,"cached":200}`), &d); err != nil || d != (Decision{Weight: 4, Cached: CachedMax}) {
		t.Errorf("a hit rate past the last band: %+v, %v; want it capped", d, err)
	}
	if err := json.Unmarshal([]byte(`{"weight":4,"health":"draining"}`), &d); err == nil {
		t.Error("an unknown health was accepted")
	}
	m := map[string]Decision{"a": {Weight: 2, Saturated: true}}
	b, _ := json.Marshal(m)
	if want := `{"a":{"weight":2,"health":"saturated"}}`; string(b) != want {
		t.Errorf("in a map: %s, want %s", b, want)
	}
}
