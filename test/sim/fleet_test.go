package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// TestAffinityRoutingRaisesHitRate is the point of the simulator in
// miniature: multi-turn chat sessions spread at random over four engines
// reuse mostly the shared system prompt (and history only where a turn lands
// on a replica an earlier turn used), while session affinity reuses each
// conversation's whole history, so hit rate rises and TTFT falls.
func TestAffinityRoutingRaisesHitRate(t *testing.T) {
	const (
		replicas = 4
		sessions = 22
		turns    = 6
		reply    = 60
	)
	system := longText(200)
	type turn struct {
		session, k int
		at         float64
		prompt     []int
	}
	var all []turn
	for s := 0; s < sessions; s++ {
		msgs := []Message{{Role: "system", Content: system}}
		for k := 0; k < turns; k++ {
			msgs = append(msgs, Message{Role: "user", Content: taggedText(fmt.Sprintf("s%dk%d", s, k), 80)})
			prompt := Tokenize(RenderChat(msgs))
			all = append(all, turn{s, k, float64(k)*10 + float64(s)*0.3, prompt})
			msgs = append(msgs, Message{Role: "assistant", Content: OutputText(prompt, reply)})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at < all[j].at })

	simulate := func(route func(i int, tr turn) int) (hitRate, meanTTFT float64) {
		engines := make([]*testEngine, replicas)
		for i := range engines {
			engines[i] = newTestEngine(t, Config{KVBlocks: 4000})
			engines[i].skipChecks = true
		}
		var reqs []*request
		for i, tr := range all {
			reqs = append(reqs, engines[route(i, tr)].addAt(tr.prompt, reply, tr.at))
		}
		var queries, hits int64
		for _, e := range engines {
			e.run()
			s := e.snapshot()
			queries += s.PrefixQueries
			hits += s.PrefixHits
		}
		for _, q := range reqs {
			r, _ := q.result(t)
			meanTTFT += r.TTFT / float64(len(reqs))
		}
		return float64(hits) / float64(queries), meanTTFT
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rndHit, rndTTFT := simulate(func(int, turn) int { return rng.IntN(replicas) })
	affHit, affTTFT := simulate(func(_ int, tr turn) int { return tr.session % replicas })
	t.Logf("random: hit rate %.3f, mean TTFT %.1f ms; affinity: hit rate %.3f, mean TTFT %.1f ms",
		rndHit, rndTTFT*1000, affHit, affTTFT*1000)
	if !(affHit > rndHit+0.1) || !(affTTFT < rndTTFT) {
		t.Errorf("affinity did not win: hit %.3f vs %.3f, TTFT %.4f vs %.4f", affHit, rndHit, affTTFT, rndTTFT)
	}
}

// taggedText is n words unique to tag.
func taggedText(tag string, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%sw%d ", tag, i)
	}
	return b.String()
}
