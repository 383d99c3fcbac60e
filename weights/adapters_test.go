package weights

import (
	"os"
	"reflect"
	"testing"
	"time"
)

// loraT0 is LORA_T0 of testdata/pages/gen/gen.py.
var loraT0 = time.Date(2025, 7, 1, 16, 0, 0, 500_000_000, time.UTC)

func TestAdaptersFromPages(t *testing.T) {
	full := &Adapters{Running: []string{"chat-lora"}, Waiting: []string{"chat-lora"}, MaxLoRA: 4,
		Observed: loraT0.Add(31500 * time.Millisecond)}
	tests := []struct {
		name   string
		page   string
		ct     string
		engine string
		model  string
		want   *Adapters
	}{
		// Four series over time, the newest (not the last line) wins.
		{"newest of several", "vllm_v1_lora.txt", ctText, EngineVLLM, "", full},
		{"openmetrics", "vllm_v1_lora.openmetrics.txt", ctOM, EngineVLLM, "", full},
		// The gauge has no model_name: a model filter keeps it.
		{"model filter", "vllm_v1_lora.txt", ctText, EngineVLLM, llamaName, full},
		// Empty labels: LoRA on, nothing in flight.
		{"idle", "vllm_v1_lora_idle.txt", ctText, EngineVLLM, "", &Adapters{MaxLoRA: 4, Observed: loraT0}},
		// Five adapters, two slots: believed, flagged.
		{"overfull", "vllm_v1_lora_overfull.txt", ctText, EngineVLLM, "", &Adapters{
			Running: []string{"a", "b", "c", "d", "e"}, Waiting: []string{"a", "b", "c", "d", "e"},
			MaxLoRA: 2, Observed: loraT0.Add(5 * time.Second), Overfull: true}},
		// No max_lora label: unknown, never overfull; blanks after commas.
		{"no max_lora", "lora_no_max.txt", ctText, EngineVLLM, "", &Adapters{
			Running: []string{"chat-lora", "sql-lora"}, Observed: loraT0}},
		// NaN, +Inf and negative times are skipped; max_lora="four" is unknown.
		{"bad values skipped", "lora_bad_values.txt", ctText, EngineVLLM, "", &Adapters{
			Running: []string{"ok"}, Observed: loraT0}},
		// LoRA off: no gauge, no state.
		{"lora off", "vllm_v1.txt", ctText, EngineVLLM, "", nil},
		// SGLang counts slots but names no adapter.
		{"sglang counts only", "sglang_lora.txt", ctText, EngineSGLang, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, err := os.ReadFile("testdata/pages/" + tc.page)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := BuiltinProfile(tc.engine)
			got, err := ParseSignals(p, tc.model, body, tc.ct)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Adapters, tc.want) {
				t.Errorf("Adapters = %+v, want %+v", got.Adapters, tc.want)
			}
			// The filtered parse sees what the whole page holds.
			fams, err := ParsePage(body, tc.ct)
			if err != nil {
				t.Fatal(err)
			}
			whole, err := Extract(p, tc.model, fams)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(whole.Adapters, got.Adapters) {
				t.Errorf("Extract on the whole page: %+v, ParseSignals: %+v", whole.Adapters, got.Adapters)
			}
		})
	}
}

// A page with bad adapter series still gives the replica's other signals.
func TestAdaptersNeverFailAScrape(t *testing.T) {
	s := pageSignals(t, "lora_bad_values.txt")
	if s.QueueDepth != 3 || s.Running != 12 || s.KVOccupancy != 0.4375 {
		t.Fatalf("signals %+v", s)
	}
}

// Equal times: the choice does not depend on line order.
func TestAdaptersTieIsDeterministic(t *testing.T) {
	head := "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n# TYPE vllm:lora_requests_info gauge\n"
	a := `vllm:lora_requests_info{max_lora="4",running_lora_adapters="a",waiting_lora_adapters="a"} 1751385600` + "\n"
	b := `vllm:lora_requests_info{max_lora="4",running_lora_adapters="b",waiting_lora_adapters="b"} 1751385600` + "\n"
	p, _ := BuiltinProfile(EngineVLLM)
	var got [2]*Adapters
	for i, page := range []string{head + a + b, head + b + a} {
		s, err := ParseSignals(p, "", []byte(page), ctText)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = s.Adapters
	}
	if !reflect.DeepEqual(got[0], got[1]) || got[0] == nil || got[0].Running[0] != "b" {
		t.Fatalf("tie broken by line order: %+v, %+v", got[0], got[1])
	}
}

func TestAdaptersHelpers(t *testing.T) {
	a := &Adapters{Running: []string{"a", "c"}, Waiting: []string{"b", "c"}}
	if got := a.InFlight(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("InFlight = %v", got)
	}
	for name, want := range map[string]bool{"a": true, "b": true, "c": true, "d": false, "": false} {
		if a.Has(name) != want {
			t.Errorf("Has(%q) = %v", name, !want)
		}
	}
	var none *Adapters
	if none.Has("a") || none.InFlight() != nil {
		t.Error("a nil Adapters has adapters")
	}
	if got := adapterNames(" b, a,,b ,"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("adapterNames = %v", got)
	}
}

func TestAdaptersProfileClone(t *testing.T) {
	p, _ := BuiltinProfile(EngineVLLM)
	c := p.Clone()
	c.LoRAInfo[0].Name = "x"
	if p.LoRAInfo[0].Name != "vllm:lora_requests_info" {
		t.Fatal("Clone shares LoRAInfo")
	}
}
