package bodykey

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// benchChat is an OpenAI chat body of about size bytes: a system prompt
// and alternating turns of prose with escaped newlines and quotes, as a
// serialiser writes them. Deterministic.
func benchChat(size int) []byte {
	r := rand.New(rand.NewPCG(1, uint64(size)))
	words := strings.Fields(`the a model cache prefix replica "quoted" request token
		attention layer batch kv block engine route hash conversation document question`)
	msg := func(role string, n int) string {
		var b strings.Builder
		for b.Len() < n {
			w := words[r.IntN(len(words))]
			b.WriteString(strings.ReplaceAll(w, `"`, `\"`))
			if r.IntN(12) == 0 {
				b.WriteString(`.\n`)
			} else {
				b.WriteByte(' ')
			}
		}
		return `{"role":"` + role + `","content":"` + b.String() + `"}`
	}
	msgs := []string{msg("system", 400), msg("user", 200)}
	total := 600
	for i := 0; total < size-200; i++ {
		role := map[bool]string{true: "assistant", false: "user"}[i%2 == 0]
		m := msg(role, min(2000, size-total-150))
		msgs = append(msgs, m)
		total += len(m) + 1
	}
	return []byte(`{"model":"m","messages":[` + strings.Join(msgs, ",") + `],"stream":true,"max_tokens":512}`)
}

// BenchmarkLuaFilter times the generated filter per request under LuaJIT
// (p50 and p99 of the thread's CPU time in µs, ns/op its mean; wall-*
// also count waiting for a CPU), on chat bodies of 1 KiB to
// 1 MiB: a conversation key, a conversation key with a prompt prefix to
// fall through to, a prompt prefix alone, a json_field the body lacks
// (every top-level value skipped), and the spread sub-key alone by
// conversation (a header-keyed pool with hot keys). go test ./xds/translate/bodykey -run - -bench LuaFilter
func BenchmarkLuaFilter(b *testing.B) {
	bin, err := exec.LookPath("luajit")
	if err != nil {
		b.Skip("luajit not installed")
	}
	chains := []struct {
		name  string
		chain []Key
	}{
		{"conversation", []Key{{Header: Header(0), Conversation: true}}},
		{"conversation+prompt_prefix", []Key{{Header: Header(0), Conversation: true}, {Header: Header(1), PromptPrefix: 4096}}},
		{"prompt_prefix", []Key{{Header: Header(0), PromptPrefix: 4096}}},
		{"json_field", []Key{{Header: Header(0), JSONField: "user"}}},
		// A header-keyed pool with hot keys: the spread sub-key alone,
		// by conversation (spread_by's default).
		{"spread", []Key{{Header: SpreadHeader, Conversation: true, Spread: true}}},
	}
	dir := b.TempDir()
	for _, size := range []int{1 << 10, 32 << 10, 256 << 10, 1 << 20} {
		body := benchChat(size)
		bodyPath := filepath.Join(dir, fmt.Sprintf("body%d", size))
		if err := os.WriteFile(bodyPath, body, 0o644); err != nil {
			b.Fatal(err)
		}
		want, _ := Conversation(body)
		conv, _ := ConversationBytes(body)
		wantSpread := Spread(conv)
		for _, c := range chains {
			b.Run(fmt.Sprintf("%s/%dKiB", c.name, size>>10), func(b *testing.B) {
				src, err := Lua(c.chain, 4<<20)
				if err != nil {
					b.Fatal(err)
				}
				script := filepath.Join(dir, c.name+".lua")
				if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
					b.Fatal(err)
				}
				iters := max(200, min(b.N, 20000))
				out, err := exec.Command(bin, "testdata/bench.lua", script, bodyPath, strconv.Itoa(iters)).Output()
				if err != nil {
					b.Fatalf("luajit: %v", err)
				}
				lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
				if len(lines) != 2 {
					b.Fatalf("luajit printed %q", out)
				}
				switch k := c.chain[0]; {
				case k.Spread && lines[0] != SpreadHeader+"="+wantSpread:
					b.Fatalf("filter set %q, Go computes %s", lines[0], wantSpread)
				case k.Conversation && !k.Spread && !strings.Contains(lines[0], want):
					b.Fatalf("filter set %q, Go computes %s", lines[0], want)
				}
				var p50, p99, mean, wp50, wp99, wmean float64
				if _, err := fmt.Sscan(lines[1], &p50, &p99, &mean, &wp50, &wp99, &wmean); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(mean, "ns/op")
				b.ReportMetric(p50/1e3, "p50-µs")
				b.ReportMetric(p99/1e3, "p99-µs")
				b.ReportMetric(wp50/1e3, "wall-p50-µs")
				b.ReportMetric(wp99/1e3, "wall-p99-µs")
			})
		}
	}
}
