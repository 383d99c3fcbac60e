package fleet

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// hotPool is a pool with a header key, a body key and a cookie key, and
// hot keys on with defaults.
func hotPool(table ...HotKey) Pool {
	hot := DefaultHotKeys()
	return Pool{Name: "p", Settings: Settings{Port: 1000, Hash: Hash{
		MaxBodyBytes: 1 << 20,
		Keys:         []HashKey{{Header: "x-tenant"}, {Conversation: true}, {Cookie: "sid"}},
		Hot:          &hot,
	}}, Endpoints: []Endpoint{{Host: "10.0.0.1", Port: 80}}, HotKeys: table}
}

// Prepare drops every entry that cannot be served, with its reason, and
// serves the pool with the rest: a bad table never fails a push.
func TestPrepareDropsBadHotKeys(t *testing.T) {
	ok := HotKey{Key: 0, Value: "acme", Share: 0.5, Spread: 4}
	for _, tc := range []struct {
		name   string
		entry  HotKey
		reason string // "" = kept
	}{
		{"good header key", ok, ""},
		{"good body key", HotKey{Key: 1, Value: "0123456789abcdef", Share: 0.2, Spread: 256}, ""},
		{"key out of range", HotKey{Key: 3, Value: "a", Spread: 2}, "outside the chain"},
		{"negative key", HotKey{Key: -1, Value: "a", Spread: 2}, "outside the chain"},
		{"cookie key", HotKey{Key: 2, Value: "a", Spread: 2}, "not a header or body key"},
		{"empty value", HotKey{Key: 0, Spread: 2}, "empty value"},
		{"long value", HotKey{Key: 0, Value: strings.Repeat("a", MaxHotKeyValue+1), Spread: 2}, "above 128"},
		{"longest value", HotKey{Key: 0, Value: strings.Repeat("a", MaxHotKeyValue), Spread: 2}, ""},
		{"control byte", HotKey{Key: 0, Value: "a\nb", Spread: 2}, "not printable"},
		{"non-ASCII", HotKey{Key: 0, Value: "é", Spread: 2}, "not printable"},
		{"surrounding space", HotKey{Key: 0, Value: "a ", Spread: 2}, "space"},
		{"inner space", HotKey{Key: 0, Value: "a b", Spread: 2}, ""},
		{"spread 1", HotKey{Key: 0, Value: "a", Spread: 1}, "power of two"},
		{"spread 3", HotKey{Key: 0, Value: "a", Spread: 3}, "power of two"},
		{"spread 512", HotKey{Key: 0, Value: "a", Spread: 512}, "power of two"},
		{"share above 1", HotKey{Key: 0, Value: "a", Spread: 2, Share: 1.5}, "share"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Prepare(Fleet{Pools: []Pool{hotPool(tc.entry)}})
			if err != nil {
				t.Fatalf("Prepare failed: %v", err)
			}
			got := m.Fleet().Pools[0].HotKeys
			drops := m.HotKeyDrops()
			if tc.reason == "" {
				if len(got) != 1 || len(drops) != 0 {
					t.Errorf("table %v, drops %v; want the entry kept", got, drops)
				}
				return
			}
			if len(got) != 0 || len(drops) != 1 || !strings.Contains(drops[0].Reason, tc.reason) || drops[0].Pool != "p" {
				t.Errorf("table %v, drops %+v; want it dropped for %q", got, drops, tc.reason)
			}
		})
	}
}

// The table is sorted, repeated pairs keep their first, and Max keeps the
// highest shares, ties by key and value.
func TestPrepareHotKeyTable(t *testing.T) {
	p := hotPool(
		HotKey{Key: 1, Value: "b", Share: 0.1, Spread: 2},
		HotKey{Key: 0, Value: "z", Share: 0.3, Spread: 4},
		HotKey{Key: 0, Value: "a", Share: 0.2, Spread: 8},
		HotKey{Key: 0, Value: "a", Share: 0.9, Spread: 2},
		HotKey{Key: 0, Value: "c", Share: 0.1, Spread: 2},
	)
	p.Hash.Hot.Max = 3
	m, err := Prepare(Fleet{Pools: []Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	want := []HotKey{
		{Key: 0, Value: "a", Share: 0.9, Spread: 2},
		{Key: 0, Value: "c", Share: 0.1, Spread: 2},
		{Key: 0, Value: "z", Share: 0.3, Spread: 4},
	}
	if got := m.Fleet().Pools[0].HotKeys; !reflect.DeepEqual(got, want) {
		t.Errorf("table %+v, want %+v", got, want)
	}
	var reasons []string
	for _, d := range m.HotKeyDrops() {
		reasons = append(reasons, d.Entry.Value+": "+d.Reason)
	}
	if want := []string{`a: repeats key 0 value "a"`, "b: beyond the pool's 3 hot keys"}; !reflect.DeepEqual(reasons, want) {
		t.Errorf("drops %q, want %q", reasons, want)
	}
	if p.HotKeys[0].Value != "b" {
		t.Error("Prepare modified its input's table")
	}

	// A declared entry stays under max whatever the learned shares.
	decl := hotPool(HotKey{Key: 0, Value: "z", Spread: 16, Declared: true},
		HotKey{Key: 0, Value: "a", Share: 0.5, Spread: 4}, HotKey{Key: 0, Value: "b", Share: 0.4, Spread: 4})
	decl.Hash.Hot.Max = 2
	m, err = Prepare(Fleet{Pools: []Pool{decl}})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, k := range m.Fleet().Pools[0].HotKeys {
		kept = append(kept, k.Value)
	}
	if want := []string{"a", "z"}; !reflect.DeepEqual(kept, want) {
		t.Errorf("kept %q under max 2, want %q", kept, want)
	}

	// A pool without hot keys serves no table.
	off := hotPool(HotKey{Key: 0, Value: "a", Spread: 2})
	off.Hash.Hot = nil
	m, err = Prepare(Fleet{Pools: []Pool{off}})
	if err != nil || len(m.Fleet().Pools[0].HotKeys) != 0 || len(m.HotKeyDrops()) != 1 {
		t.Errorf("pool without hot keys: %v, %+v, %+v", err, m.Fleet().Pools, m.HotKeyDrops())
	}
}

// Bad settings are the policy's to report; the model rejects them too.
func TestValidateHotKeySettings(t *testing.T) {
	for name, mutate := range map[string]func(h *HotKeys){
		"share 1":           func(h *HotKeys) { h.Share = 1 },
		"negative share":    func(h *HotKeys) { h.Share = -0.1 },
		"max above 256":     func(h *HotKeys) { h.Max = MaxHotKeys + 1 },
		"header spread":     func(h *HotKeys) { h.SpreadBy = HashKey{Header: "x"} },
		"two spread keys":   func(h *HotKeys) { h.SpreadBy = HashKey{Conversation: true, PromptPrefix: 64} },
		"negative spread":   func(h *HotKeys) { h.SpreadBy = HashKey{PromptPrefix: -1} },
		"negative halving":  func(h *HotKeys) { h.HalfLife = -time.Second },
		"declared body key": func(h *HotKeys) { h.Declared = []DeclaredHotKey{{Key: 1, Value: "a"}} },
		"declared cookie":   func(h *HotKeys) { h.Declared = []DeclaredHotKey{{Key: 2, Value: "a"}} },
		"declared outside":  func(h *HotKeys) { h.Declared = []DeclaredHotKey{{Key: 3, Value: "a"}} },
		"declared empty":    func(h *HotKeys) { h.Declared = []DeclaredHotKey{{Key: 0, Value: ""}} },
		"declared tab":      func(h *HotKeys) { h.Declared = []DeclaredHotKey{{Key: 0, Value: "a\tb"}} },
		"declared repeated": func(h *HotKeys) { h.Declared = []DeclaredHotKey{{Key: 0, Value: "a"}, {Key: 0, Value: "a"}} },
		"declared over max": func(h *HotKeys) { h.Max = 1; h.Declared = []DeclaredHotKey{{Key: 0, Value: "a"}, {Key: 0, Value: "b"}} },
	} {
		p := hotPool()
		mutate(p.Hash.Hot)
		if _, err := Prepare(Fleet{Pools: []Pool{p}}); err == nil || !strings.Contains(err.Error(), "hot keys") {
			t.Errorf("%s: %v, want a hot keys error", name, err)
		}
	}
	// Zero settings take the defaults.
	p := hotPool()
	p.Hash.Hot = &HotKeys{}
	m, err := Prepare(Fleet{Pools: []Pool{p}})
	if err != nil {
		t.Fatal(err)
	}
	if got := *m.Fleet().Pools[0].Hash.Hot; !reflect.DeepEqual(got, DefaultHotKeys()) {
		t.Errorf("defaults %+v, want %+v", got, DefaultHotKeys())
	}
	if p.Hash.Hot.Max != 0 {
		t.Error("Normalize modified its input's settings")
	}
}

// The settings' durations serialise as Go duration strings and read back.
func TestHotKeysJSON(t *testing.T) {
	h := DefaultHotKeys()
	h.Share = 0.25
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"share":0.25,"max":32,"spread_by":{"conversation":true},"log_cluster":"kvxds","interval":"10s","half_life":"1m0s"}`
	if string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back HotKeys
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, h) {
		t.Errorf("read back %+v, %v; want %+v", back, err, h)
	}
	// Declared values travel with the settings.
	h.Declared = []DeclaredHotKey{{Key: 0, Value: "app-0"}}
	if b, err = json.Marshal(h); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"declared":[{"key":0,"value":"app-0"}]`) {
		t.Errorf("JSON %s lacks the declared values", b)
	}
	back = HotKeys{}
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, h) {
		t.Errorf("read back %+v, %v; want %+v", back, err, h)
	}
	if err := json.Unmarshal([]byte(`{"interval":"soon"}`), &back); err == nil {
		t.Error("bad duration read without error")
	}
}

func TestSpreadLevel(t *testing.T) {
	for spread, want := range map[int]int{2: 1, 4: 2, 128: 7, MaxSpread: SpreadBits} {
		if got := SpreadLevel(spread); got != want {
			t.Errorf("SpreadLevel(%d) = %d, want %d", spread, got, want)
		}
	}
}

// Normalize gives a pool with hot keys the default body limit, which
// Envoy's filter needs to read the spread sub-key, and keeps a set one.
func TestNormalizeHotKeysBodyLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		hash Hash
		want int
	}{
		{"hot keys, no limit", Hash{Hot: &HotKeys{}, Keys: []HashKey{{Header: "h"}}}, DefaultMaxBodyBytes},
		{"hot keys, a limit", Hash{Hot: &HotKeys{}, MaxBodyBytes: 4096, Keys: []HashKey{{Header: "h"}}}, 4096},
		{"no hot keys", Hash{Keys: []HashKey{{Header: "h"}}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Fleet{Pools: []Pool{{Name: "a", Settings: Settings{Port: 1, Balancer: ConsistentHash, Hash: tc.hash}}}}.Normalize()
			if got := f.Pools[0].Hash.MaxBodyBytes; got != tc.want {
				t.Errorf("body limit %d, want %d", got, tc.want)
			}
		})
	}
}
