package sim

import (
	"slices"
	"strings"
)

// loraSlots is an engine's LoRA adapter slots and its count of the
// adapters in flight, as vLLM keeps them:
//
//   - Slots (vLLM's LRUCacheWorkerLoRAManager on the GPU): at most
//     Config.MaxLoRA adapters are loaded. A request under an adapter that
//     holds a slot is admitted as any other; one whose adapter holds none
//     takes a free slot, or the slot of the least recently used adapter
//     with no running request (an eviction), and the step that admits it
//     pays Config.AdapterLoad first (a swap-in). When every slot holds an
//     adapter with running requests, the request is passed over and waits,
//     while requests behind it may be admitted (vLLM V1's scheduler skips
//     it when its batch already has max_loras adapters and puts it back at
//     the head of the queue afterwards).
//   - In flight (LoRARequestStates in vllm/v1/metrics/stats.py): every
//     adapter with a request waiting or running, in the order it first
//     arrived, dropped once its last request ends. vLLM writes this list
//     into both labels of vllm:lora_requests_info.
type loraSlots struct {
	max    int
	loaded map[string]*loraSlot

	inflight  []string       // in order of first arrival
	inflightN map[string]int // requests in flight per adapter
	joined    string         // strings.Join(inflight, ","), kept current
}

type loraSlot struct {
	running  int     // running requests under the adapter
	lastUsed float64 // simulated time of its last admission or release
}

func newLoRASlots(max int) *loraSlots {
	return &loraSlots{max: max, loaded: map[string]*loraSlot{}, inflightN: map[string]int{}}
}

// arrive counts a new request in flight.
func (l *loraSlots) arrive(adapter string) {
	if adapter == "" {
		return
	}
	if l.inflightN[adapter] == 0 {
		l.inflight = append(l.inflight, adapter)
		l.joined = strings.Join(l.inflight, ",")
	}
	l.inflightN[adapter]++
}

// leave counts a request out of flight (finished, aborted, failed).
func (l *loraSlots) leave(adapter string) {
	if adapter == "" {
		return
	}
	if l.inflightN[adapter]--; l.inflightN[adapter] > 0 {
		return
	}
	delete(l.inflightN, adapter)
	if i := slices.Index(l.inflight, adapter); i >= 0 {
		l.inflight = slices.Delete(l.inflight, i, i+1)
	}
	l.joined = strings.Join(l.inflight, ",")
}

// victim returns the least recently used adapter with no running request
// (ties by name, so runs are reproducible), "" if every slot is busy.
func (l *loraSlots) victim() string {
	best := ""
	var bestT float64
	for name, s := range l.loaded {
		if s.running > 0 {
			continue
		}
		if best == "" || s.lastUsed < bestT || s.lastUsed == bestT && name < best {
			best, bestT = name, s.lastUsed
		}
	}
	return best
}

// canAdmit reports whether a request under adapter may run now: the base
// model always, an adapter if it holds a slot or can get one.
func (l *loraSlots) canAdmit(adapter string) bool {
	if adapter == "" || l.loaded[adapter] != nil || len(l.loaded) < l.max {
		return true
	}
	return l.victim() != ""
}

// admit gives a running request its adapter's slot at time now, loading
// the adapter if it holds none. It reports the adapter evicted to make
// room ("" if none) and whether it had to load; canAdmit must hold.
func (l *loraSlots) admit(adapter string, now float64) (evicted string, loaded bool) {
	if adapter == "" {
		return "", false
	}
	if s := l.loaded[adapter]; s != nil {
		s.running++
		s.lastUsed = now
		return "", false
	}
	if len(l.loaded) >= l.max {
		evicted = l.victim()
		delete(l.loaded, evicted)
	}
	l.loaded[adapter] = &loraSlot{running: 1, lastUsed: now}
	return evicted, true
}

// release takes a request that stops running (finished, preempted,
// aborted) off its adapter's slot; the adapter stays loaded.
func (l *loraSlots) release(adapter string, now float64) {
	if s := l.loaded[adapter]; adapter != "" && s != nil {
		s.running--
		s.lastUsed = now
	}
}

// loadedNames returns the adapters holding a slot, sorted.
func (l *loraSlots) loadedNames() []string {
	out := make([]string, 0, len(l.loaded))
	for name := range l.loaded {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
