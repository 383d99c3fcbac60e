package workload

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// tokens counts words under the simulator's assumption.
func tokens(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, " ") + 1
}

// commonWords is the number of whole leading words a and b share.
func commonWords(a, b string) int {
	l := 0
	for l < len(a) && l < len(b) && a[l] == b[l] {
		l++
	}
	if (l < len(a) && a[l] != ' ') || (l < len(b) && b[l] != ' ') {
		l = max(strings.LastIndexByte(a[:l], ' '), 0)
	}
	return tokens(a[:l])
}

// wellFormed reports whether s is lowercase ASCII words separated by single
// spaces.
func wellFormed(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' || strings.Contains(s, "  ") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != ' ' && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

// checkStream asserts the invariants every generator promises.
func checkStream(t *testing.T, name string, reqs []Request, duration time.Duration) {
	t.Helper()
	for i, r := range reqs {
		if r.Seq != i {
			t.Fatalf("%s: reqs[%d].Seq = %d", name, i, r.Seq)
		}
		if r.At < 0 || r.At >= duration {
			t.Fatalf("%s: reqs[%d].At = %v outside [0, %v)", name, i, r.At, duration)
		}
		if i > 0 && r.At < reqs[i-1].At {
			t.Fatalf("%s: not sorted by At at %d", name, i)
		}
		if r.Tenant == "" || r.MaxTokens < 1 {
			t.Fatalf("%s: reqs[%d] = session %q tenant %q max %d", name, i, r.Session, r.Tenant, r.MaxTokens)
		}
		// A session key is the conversation, or the client's tenant (an
		// application keyed as a whole).
		if r.Session != "" && r.Conversation != "" && r.Conversation != r.Session && r.Session != r.Tenant {
			t.Fatalf("%s: reqs[%d] of session %q in conversation %q", name, i, r.Session, r.Conversation)
		}
		if r.DependsOn != -1 {
			// A request without a conversation is single-shot.
			if r.Session == "" && r.Conversation == "" || r.DependsOn < 0 || r.DependsOn >= i {
				t.Fatalf("%s: reqs[%d].DependsOn = %d", name, i, r.DependsOn)
			}
			if d := reqs[r.DependsOn]; d.Session != r.Session || d.Conversation != r.Conversation || d.At > r.At {
				t.Fatalf("%s: reqs[%d] depends on %d of session %q at %v", name, i, r.DependsOn, d.Session, d.At)
			}
		}
		if r.Lead > 0 {
			// The leading messages are whole words, and every request of a
			// conversation re-sends the same ones.
			if r.Lead > len(r.Prompt) || r.System >= r.Lead || r.Lead < len(r.Prompt) && r.Prompt[r.Lead] != ' ' ||
				r.System > 0 && r.Prompt[r.System] != ' ' {
				t.Fatalf("%s: reqs[%d]: system %d, lead %d in a prompt of %d bytes", name, i, r.System, r.Lead, len(r.Prompt))
			}
			if r.DependsOn >= 0 {
				if d := reqs[r.DependsOn]; d.Prompt[:d.Lead] != r.Prompt[:r.Lead] {
					t.Fatalf("%s: reqs[%d] changed its leading messages", name, i)
				}
			}
		}
	}
	// Format check on a sample (the whole stream is large).
	for i := 0; i < len(reqs); i += 1 + len(reqs)/500 {
		if !wellFormed(reqs[i].Prompt) {
			t.Fatalf("%s: reqs[%d].Prompt is not single-spaced lowercase words: %.80q", name, i, reqs[i].Prompt)
		}
	}
}

func TestNamesAndByName(t *testing.T) {
	want := []string{"chat", "chat-apps", "agent", "shared-prefix", "few-shot", "zipf-tenants", "unique-short",
		"chat-stateless", "branching", "agent-stateless", "retrieval", "system-prompt", "multi-lora"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		g, ok := ByName(n)
		if !ok || g.Name() != n {
			t.Fatalf("ByName(%q) = %v, %v", n, g, ok)
		}
		g2, _ := ByName(n)
		if g == g2 {
			t.Fatalf("ByName(%q) returned a shared instance", n)
		}
	}
	if _, ok := ByName("nope"); ok {
		t.Fatal("ByName(nope) succeeded")
	}
}

func TestWords(t *testing.T) {
	for _, n := range []int{1, 2, 4, 5, 6, 10, 11, 100, 1001} {
		s := Words(rand.New(rand.NewPCG(1, 2)), n)
		if got := len(strings.Fields(s)); got != n || tokens(s) != n || !wellFormed(s) || len(s) != 5*n-1 {
			t.Fatalf("Words(%d): %d fields, len %d, %.60q", n, got, len(s), s)
		}
		if s2 := Words(rand.New(rand.NewPCG(1, 2)), n); s2 != s {
			t.Fatalf("Words(%d) not deterministic", n)
		}
	}
	if Words(rand.New(rand.NewPCG(1, 2)), 0) != "" || Words(rand.New(rand.NewPCG(1, 2)), -3) != "" {
		t.Fatal("Words(<=0) != \"\"")
	}
	a, b := Words(rand.New(rand.NewPCG(1, 2)), 50), Words(rand.New(rand.NewPCG(1, 3)), 50)
	if commonWords(a, b) >= 16 {
		t.Fatal("different streams gave the same words")
	}
	// The vocabulary is 4,096 distinct words.
	seen := map[[4]byte]bool{}
	for _, w := range vocab {
		seen[w] = true
	}
	if len(seen) != 4096 {
		t.Fatalf("vocabulary has %d distinct words", len(seen))
	}
}

func TestBadArguments(t *testing.T) {
	for _, n := range Names() {
		g, _ := ByName(n)
		for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1)} {
			if got := g.Generate(1, rate, time.Minute); got != nil {
				t.Fatalf("%s: rate %v gave %d requests", n, rate, len(got))
			}
		}
		if got := g.Generate(1, 5, 0); got != nil {
			t.Fatalf("%s: duration 0 gave %d requests", n, len(got))
		}
	}
}

func TestDeterminismAndInvariants(t *testing.T) {
	const rate, d = 5.0, 2 * time.Minute
	for _, n := range Names() {
		g, _ := ByName(n)
		a, b := g.Generate(42, rate, d), g.Generate(42, rate, d)
		if len(a) == 0 {
			t.Fatalf("%s: empty stream", n)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed, different streams", n)
		}
		c := g.Generate(43, rate, d)
		if reflect.DeepEqual(a, c) {
			t.Fatalf("%s: different seeds, same stream", n)
		}
		if len(a) == len(c) && a[0].Prompt == c[0].Prompt {
			t.Fatalf("%s: different seeds, same first prompt", n)
		}
		checkStream(t, n, a, d)
	}
}

// A longer horizon only appends: the first requests are identical.
func TestPrefixStableInDuration(t *testing.T) {
	const rate = 4.0
	d1, d2 := 45*time.Second, 100*time.Second
	for _, n := range Names() {
		g, _ := ByName(n)
		short, long := g.Generate(7, rate, d1), g.Generate(7, rate, d2)
		k := 0
		for k < len(long) && long[k].At < d1 {
			k++
		}
		if !reflect.DeepEqual(short, long[:k]) {
			t.Fatalf("%s: Generate(d1) is not the At < d1 part of Generate(d2) (%d vs %d)", n, len(short), k)
		}
	}
}

// tiny returns each built-in with one-to-three-word texts, to test arrivals
// over long horizons cheaply.
func tiny() []Generator {
	c := Chat()
	c.UserLen = LogNormal{Median: 2}
	c.ReplyLen = LogNormal{Median: 2}
	ca := ChatApps()
	ca.SystemPromptLen = UniformInt{Min: 2, Max: 2}
	ca.UserLen = LogNormal{Median: 2}
	ca.ReplyLen = LogNormal{Median: 2}
	a := Agent()
	a.SchemaLen, a.TaskLen = 2, LogNormal{Median: 2}
	a.ObservationLen, a.OutputLen = UniformInt{Min: 1, Max: 1}, UniformInt{Min: 1, Max: 1}
	s := SharedPrefix()
	s.SystemPromptLen, s.QuestionLen = 2, 1
	f := FewShot()
	f.ExamplesLen, f.QueryLen = UniformInt{Min: 2, Max: 2}, LogNormal{Median: 1}
	z := ZipfTenants()
	z.SystemPromptLen, z.QueryLen = 2, LogNormal{Median: 1}
	u := UniqueShort()
	u.PromptLen = UniformInt{Min: 1, Max: 3}
	return []Generator{c, ca, a, s, f, z, u}
}

func TestArrivalRate(t *testing.T) {
	const rate = 50.0
	for _, g := range tiny() {
		d := time.Hour
		tol := 0.02
		if g.Name() == "chat" || g.Name() == "chat-apps" || g.Name() == "agent" {
			// Requests come in correlated bursts (whole sessions) and the
			// cold start ramps up: longer horizon, wider tolerance.
			d, tol = 2*time.Hour, 0.03
		}
		reqs := g.Generate(11, rate, d)
		want := rate * d.Seconds()
		got := float64(len(reqs))
		t.Logf("%s: %d requests, %.2f%% off %.0f", g.Name(), len(reqs), 100*(got-want)/want, want)
		if math.Abs(got-want) > tol*want {
			t.Errorf("%s: %d requests over %v at %v/s, want %.0f ± %.0f%%", g.Name(), len(reqs), d, rate, want, 100*tol)
		}
		// The second half alone is also on target (no drift).
		half := 0
		for _, r := range reqs {
			if r.At >= d/2 {
				half++
			}
		}
		if math.Abs(float64(half)-want/2) > tol*want/2 {
			t.Errorf("%s: second half has %d requests, want %.0f", g.Name(), half, want/2)
		}
	}
}

// firstWords is the first n words of s (all of s if it is shorter).
func firstWords(s string, n int) string {
	end := 0
	for k := 0; k < n; k++ {
		j := strings.IndexByte(s[end:], ' ')
		if j < 0 {
			return s
		}
		end += j
		if k < n-1 {
			end++
		}
	}
	return s[:end]
}

func TestChat(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *ChatWorkload
		apps int // distinct tenants that are apps; 0: Tenant = Session
	}{
		{"chat", Chat(), 0},
		{"chat-apps", ChatApps(), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			if c.Name() != tc.name || c.Apps != tc.apps {
				t.Fatalf("Name() = %q, Apps %d; want %q, %d", c.Name(), c.Apps, tc.name, tc.apps)
			}
			const d = 10 * time.Minute
			reqs := c.Generate(3, 10, d)
			checkStream(t, tc.name, reqs, d)
			if again := c.Generate(3, 10, d); !reflect.DeepEqual(reqs, again) {
				t.Fatal("same seed, different streams")
			}

			bySession := map[string][]Request{}
			var sessions []string
			for _, r := range reqs {
				if _, ok := bySession[r.Session]; !ok {
					sessions = append(sessions, r.Session)
				}
				bySession[r.Session] = append(bySession[r.Session], r)
			}
			multi := 0
			appPrefix := map[string]string{}
			for _, s := range sessions {
				turns := bySession[s]
				if len(turns) > c.Turns.Max {
					t.Fatalf("%s has %d turns", s, len(turns))
				}
				if len(turns) > 1 {
					multi++
				}
				if tc.apps == 0 && turns[0].Tenant != s {
					t.Fatalf("%s has tenant %q, want the session", s, turns[0].Tenant)
				}
				for k, r := range turns {
					if r.Tenant != turns[0].Tenant {
						t.Fatalf("%s changes tenant", s)
					}
					if r.MaxTokens < c.ReplyLen.Min || r.MaxTokens > c.ReplyLen.Max {
						t.Fatalf("MaxTokens %d outside %v", r.MaxTokens, c.ReplyLen)
					}
					if k == 0 {
						if r.DependsOn != -1 {
							t.Fatalf("%s turn 0 depends on %d", s, r.DependsOn)
						}
						if tc.apps == 0 {
							// The first prompt is the first user message.
							if n := tokens(r.Prompt); n < c.UserLen.Min || n > c.UserLen.Max {
								t.Fatalf("%s turn 0: %d tokens, want one user message", s, n)
							}
						}
						if _, ok := appPrefix[r.Tenant]; !ok {
							appPrefix[r.Tenant] = r.Prompt
						}
						continue
					}
					prev := turns[k-1]
					if r.DependsOn != prev.Seq {
						t.Fatalf("%s turn %d depends on %d, want %d", s, k, r.DependsOn, prev.Seq)
					}
					// Turn k−1's prompt is a strict prefix of turn k's,
					// followed by the reply (MaxTokens of turn k−1) and the
					// new user message.
					if len(r.Prompt) <= len(prev.Prompt) || !strings.HasPrefix(r.Prompt, prev.Prompt) || r.Prompt[len(prev.Prompt)] != ' ' {
						t.Fatalf("%s turn %d: turn %d's prompt is not a strict prefix", s, k, k-1)
					}
					user := tokens(r.Prompt) - tokens(prev.Prompt) - prev.MaxTokens
					if user < c.UserLen.Min || user > c.UserLen.Max {
						t.Fatalf("%s turn %d: user message of %d tokens", s, k, user)
					}
					if r.At <= prev.At {
						t.Fatalf("%s turn %d: At %v not after %v", s, k, r.At, prev.At)
					}
				}
			}
			if multi < len(sessions)/2 {
				t.Fatalf("only %d of %d conversations have several turns", multi, len(sessions))
			}

			if tc.apps == 0 {
				// No system prompt: no two conversations share their first
				// 16-token block.
				first := map[string]string{}
				for _, s := range sessions {
					block := firstWords(bySession[s][0].Prompt, 16)
					if other, ok := first[block]; ok {
						t.Fatalf("%s and %s share their first block %q", other, s, block)
					}
					first[block] = s
				}
				return
			}
			if len(appPrefix) != tc.apps {
				t.Fatalf("%d apps seen, want %d", len(appPrefix), tc.apps)
			}
			// Every conversation of an app starts with the app's system
			// prompt.
			sys := map[string]int{}
			for _, r := range reqs {
				if r.DependsOn == -1 {
					p := appPrefix[r.Tenant]
					n := commonWords(p, r.Prompt)
					if m, ok := sys[r.Tenant]; !ok || n < m {
						sys[r.Tenant] = n
					}
				}
			}
			for app, n := range sys {
				if n < c.SystemPromptLen.Min || n > c.SystemPromptLen.Max+16 {
					t.Fatalf("%s: conversations share %d words, want a %v system prompt", app, n, c.SystemPromptLen)
				}
			}
		})
	}
}

// chat-apps is chat with a system prompt in front of every conversation,
// turn for turn: the same arrivals, turns, messages and replies.
func TestChatAppsExtendsChat(t *testing.T) {
	const d = 5 * time.Minute
	for _, warmup := range []time.Duration{0, 2 * time.Minute} {
		plain, apps := Chat(), ChatApps()
		plain.Warmup, apps.Warmup = warmup, warmup
		a, b := plain.Generate(6, 10, d), apps.Generate(6, 10, d)
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("warmup %v: chat has %d requests, chat-apps %d", warmup, len(a), len(b))
		}
		for i := range a {
			x, y := a[i], b[i]
			sys, rest, ok := strings.Cut(y.Prompt, " "+x.Prompt)
			if !ok || rest != "" || tokens(sys) < apps.SystemPromptLen.Min || tokens(sys) > apps.SystemPromptLen.Max {
				t.Fatalf("warmup %v: request %d: chat-apps prompt is not a system prompt + the chat prompt", warmup, i)
			}
			if y.System != len(sys) || y.Lead != len(sys)+1+x.Lead || x.System != 0 {
				t.Fatalf("warmup %v: request %d: system %d and lead %d, chat's %d and %d, system prompt %d bytes", warmup, i, y.System, y.Lead, x.System, x.Lead, len(sys))
			}
			y.Prompt, y.Tenant, y.System, y.Lead = x.Prompt, x.Tenant, x.System, x.Lead
			if x != y {
				t.Fatalf("warmup %v: request %d differs beyond prompt and tenant:\n%+.80v\n%+.80v", warmup, i, x, y)
			}
		}
	}
}

func TestChatWarmup(t *testing.T) {
	for _, mk := range []func() *ChatWorkload{Chat, ChatApps} {
		const rate, first = 20.0, time.Minute
		cold := mk()
		warm := mk()
		warm.Warmup = 10 * time.Minute
		name := warm.Name() + " warm"
		reqs := warm.Generate(5, rate, 10*time.Minute)
		checkStream(t, name, reqs, 10*time.Minute)
		count := func(rs []Request) int {
			n := 0
			for _, r := range rs {
				if r.At < first {
					n++
				}
			}
			return n
		}
		w, c := count(reqs), count(cold.Generate(5, rate, 10*time.Minute))
		want := rate * first.Seconds()
		t.Logf("%s: first minute: warm %d, cold %d, target %.0f", name, w, c, want)
		if math.Abs(float64(w)-want) > 0.2*want || c >= w {
			t.Fatalf("%s: first minute: warm %d, cold %d requests; want warm ≈ %.0f > cold", name, w, c, want)
		}
		// A conversation already under way at 0 opens with DependsOn −1
		// but carries its history, longer than any first turn can be.
		longest := warm.UserLen.Max
		if warm.Apps > 0 {
			longest += warm.SystemPromptLen.Max
		}
		orphans := 0
		for _, r := range reqs {
			if r.DependsOn == -1 && tokens(r.Prompt) > longest {
				orphans++
			}
		}
		if orphans == 0 {
			t.Fatalf("%s: no conversation was under way at time 0", name)
		}
	}
}

func TestAgent(t *testing.T) {
	a := Agent()
	const d = 10 * time.Minute
	reqs := a.Generate(9, 10, d)
	checkStream(t, "agent", reqs, d)
	traces := map[string][]Request{}
	for _, r := range reqs {
		traces[r.Session] = append(traces[r.Session], r)
		if r.MaxTokens < a.OutputLen.Min || r.MaxTokens > a.OutputLen.Max {
			t.Fatalf("MaxTokens %d outside %v", r.MaxTokens, a.OutputLen)
		}
	}
	schema := map[string]string{}
	for s, steps := range traces {
		if len(steps) > a.Steps.Max {
			t.Fatalf("%s has %d steps", s, len(steps))
		}
		if steps[0].At < d/2 && len(steps) < a.Steps.Min {
			t.Fatalf("%s started at %v but has %d steps", s, steps[0].At, len(steps))
		}
		if p, ok := schema[steps[0].Tenant]; !ok {
			schema[steps[0].Tenant] = steps[0].Prompt
		} else if n := commonWords(p, steps[0].Prompt); n < a.SchemaLen {
			t.Fatalf("%s shares %d words with its agent type, want >= %d", s, n, a.SchemaLen)
		}
		for k := 1; k < len(steps); k++ {
			r, prev := steps[k], steps[k-1]
			if r.DependsOn != prev.Seq || !strings.HasPrefix(r.Prompt, prev.Prompt) || len(r.Prompt) <= len(prev.Prompt) {
				t.Fatalf("%s step %d does not extend step %d", s, k, k-1)
			}
			obs := tokens(r.Prompt) - tokens(prev.Prompt) - prev.MaxTokens
			if obs < a.ObservationLen.Min || obs > a.ObservationLen.Max {
				t.Fatalf("%s step %d: observation of %d tokens", s, k, obs)
			}
		}
	}
	if len(schema) != a.AgentTypes {
		t.Fatalf("%d agent types, want %d", len(schema), a.AgentTypes)
	}
}

func TestSharedPrefix(t *testing.T) {
	s := SharedPrefix()
	slots := s.Groups * s.PromptsPerGroup
	const d = 25 * time.Second
	reqs := s.Generate(1, 100, d) // about 2.4 rounds
	checkStream(t, "shared-prefix", reqs, d)
	if len(reqs) < 2*slots {
		t.Fatalf("%d requests, want two rounds of %d", len(reqs), slots)
	}
	seen := map[string]bool{}
	for round := 0; round < 2; round++ {
		rs := reqs[round*slots : (round+1)*slots]
		groups := map[string][]string{}
		switches := 0
		for i, r := range rs {
			if r.Session != r.Tenant || r.MaxTokens != s.OutputLen || tokens(r.Prompt) != s.SystemPromptLen+s.QuestionLen {
				t.Fatalf("bad request %+.80v", r)
			}
			if seen[r.Prompt] {
				t.Fatalf("round %d repeats a prompt", round)
			}
			seen[r.Prompt] = true
			groups[r.Session] = append(groups[r.Session], r.Prompt)
			if i > 0 && rs[i-1].Session != r.Session {
				switches++
			}
		}
		if len(groups) != s.Groups {
			t.Fatalf("round %d: %d groups", round, len(groups))
		}
		if switches < slots*9/10 {
			t.Fatalf("round %d: groups are not interleaved (%d switches)", round, switches)
		}
		var firsts []string
		for g, ps := range groups {
			if len(ps) != s.PromptsPerGroup {
				t.Fatalf("round %d: %s has %d prompts", round, g, len(ps))
			}
			common := tokens(ps[0])
			for _, p := range ps[1:] {
				common = min(common, commonWords(ps[0], p))
			}
			if common != s.SystemPromptLen {
				t.Fatalf("%s: prompts share %d words, want %d", g, common, s.SystemPromptLen)
			}
			firsts = append(firsts, ps[0])
		}
		for i := range firsts {
			for j := i + 1; j < len(firsts); j++ {
				if n := commonWords(firsts[i], firsts[j]); n >= 16 {
					t.Fatalf("two groups share %d words", n)
				}
			}
		}
	}
}

func TestFewShot(t *testing.T) {
	f := FewShot()
	const d = 2 * time.Minute
	reqs := f.Generate(2, 10, d)
	checkStream(t, "few-shot", reqs, d)
	byTemplate := map[string][]string{}
	for _, r := range reqs {
		byTemplate[r.Session] = append(byTemplate[r.Session], r.Prompt)
	}
	if len(byTemplate) != f.Templates {
		t.Fatalf("%d templates, want %d", len(byTemplate), f.Templates)
	}
	for tpl, ps := range byTemplate {
		common := tokens(ps[0])
		for _, p := range ps[1:] {
			common = min(common, commonWords(ps[0], p))
		}
		if common < f.ExamplesLen.Min || common > f.ExamplesLen.Max {
			t.Fatalf("%s: %d calls share %d words, want %v", tpl, len(ps), common, f.ExamplesLen)
		}
	}
}

func TestZipfTenants(t *testing.T) {
	z := ZipfTenants()
	shares := z.Shares()
	sum := 0.0
	for k, s := range shares {
		sum += s
		if k > 0 && s > shares[k-1] {
			t.Fatalf("shares not decreasing at %d", k)
		}
	}
	if math.Abs(sum-1) > 1e-9 || shares[0] != z.HotShare || len(shares) != z.Tenants {
		t.Fatalf("Shares() = %v (sum %v)", shares, sum)
	}
	pure := *z
	pure.HotShare = 0
	if s0 := pure.Shares()[0]; math.Abs(s0-0.2612) > 0.001 {
		t.Fatalf("pure Zipf(1.1) over 50 tenants gives tenant 0 %.4f, want 0.2612", s0)
	}

	// Shares over a long tiny-text run.
	var tz *ZipfTenantsWorkload
	for _, g := range tiny() {
		if z, ok := g.(*ZipfTenantsWorkload); ok {
			tz = z
		}
	}
	reqs := tz.Generate(4, 100, 5*time.Minute) // ~30,000 requests
	counts := map[string]int{}
	for _, r := range reqs {
		counts[r.Tenant]++
	}
	for k, want := range []float64{shares[0], shares[1], shares[2]} {
		got := float64(counts[id("tenant-", k)]) / float64(len(reqs))
		sd := math.Sqrt(want * (1 - want) / float64(len(reqs)))
		if math.Abs(got-want) > 4*sd {
			t.Fatalf("tenant %d: share %.4f, want %.4f ± %.4f", k, got, want, 4*sd)
		}
	}

	// Full-size: every request carries its tenant's system prompt.
	const d = time.Minute
	full := z.Generate(4, 20, d)
	checkStream(t, "zipf-tenants", full, d)
	sys := map[string]string{}
	for _, r := range full {
		if p, ok := sys[r.Tenant]; !ok {
			sys[r.Tenant] = r.Prompt
		} else if n := commonWords(p, r.Prompt); n < z.SystemPromptLen || n >= z.SystemPromptLen+16 {
			t.Fatalf("%s: two requests share %d words, want %d", r.Tenant, n, z.SystemPromptLen)
		}
	}
}

func TestUniqueShort(t *testing.T) {
	u := UniqueShort()
	const d = 5 * time.Minute
	reqs := u.Generate(8, 20, d)
	checkStream(t, "unique-short", reqs, d)
	blocks, tenants := map[string]bool{}, map[string]bool{}
	for _, r := range reqs {
		n := tokens(r.Prompt)
		if n < u.PromptLen.Min || n > u.PromptLen.Max {
			t.Fatalf("prompt of %d tokens", n)
		}
		// Single-shot API calls carry no session key.
		if r.Session != "" || r.DependsOn != -1 {
			t.Fatalf("request %d: session %q, depends on %d; want a keyless single-shot request", r.Seq, r.Session, r.DependsOn)
		}
		block := r.Prompt[:5*16-1] // the first 16-token block
		if blocks[block] || tenants[r.Tenant] {
			t.Fatalf("request %d shares a first block or tenant", r.Seq)
		}
		blocks[block], tenants[r.Tenant] = true, true
	}
}

func TestDistributions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	g := Geometric{Mean: 5, Max: 20}
	sum, n := 0, 200000
	for range n {
		v := g.Sample(r)
		if v < 1 || v > 20 {
			t.Fatalf("geometric sample %d", v)
		}
		sum += v
	}
	if mean := float64(sum) / float64(n); math.Abs(mean-g.Expected()) > 0.03 {
		t.Fatalf("geometric mean %.3f, Expected %.3f", mean, g.Expected())
	}
	if e := (Geometric{Mean: 5}).Expected(); e != 5 {
		t.Fatalf("uncapped Expected %v", e)
	}
	if (Geometric{Mean: 0.5}).Sample(r) != 1 || (UniformInt{Min: 3, Max: 1}).Sample(r) != 3 {
		t.Fatal("degenerate distributions")
	}
	ln := LogNormal{Median: 60, Sigma: 1, Min: 4, Max: 1024}
	vals := make([]int, 100001)
	for i := range vals {
		vals[i] = ln.Sample(r)
	}
	slices.Sort(vals)
	if med := vals[len(vals)/2]; med < 58 || med > 62 || vals[0] < 4 || vals[len(vals)-1] > 1024 {
		t.Fatalf("lognormal median %d, range %d..%d", med, vals[0], vals[len(vals)-1])
	}
	if (LogNormal{Median: 0}).Sample(r) != 1 {
		t.Fatal("LogNormal below 1")
	}
}

// Generators are read-only: concurrent use is safe and gives the same result.
func TestConcurrentGenerate(t *testing.T) {
	for _, n := range Names() {
		g, _ := ByName(n)
		want := g.Generate(1, 5, 30*time.Second)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if got := g.Generate(1, 5, 30*time.Second); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: concurrent Generate differs", n)
				}
			}()
		}
		wg.Wait()
	}
}

// Ten minutes of chat at 20 req/s must be cheap to generate.
func TestChatGenerationSpeed(t *testing.T) {
	start := time.Now()
	reqs := Chat().Generate(1, 20, 10*time.Minute)
	took := time.Since(start)
	total := 0
	for _, r := range reqs {
		total += tokens(r.Prompt)
	}
	t.Logf("chat 10m@20/s: %d requests, %d prompt tokens, generated in %v", len(reqs), total, took)
	if took > 10*time.Second { // generous: -race and shared CI machines
		t.Fatalf("generation took %v", took)
	}
}

func benchmarkGen(b *testing.B, g Generator) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = len(g.Generate(1, 20, 10*time.Minute))
	}
	b.ReportMetric(float64(n), "requests")
}

// 10 minutes at 20 req/s for each workload.
func BenchmarkGenerate(b *testing.B) {
	for _, n := range Names() {
		g, _ := ByName(n)
		b.Run(n, func(b *testing.B) { benchmarkGen(b, g) })
	}
}
