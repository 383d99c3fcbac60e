package bodykey

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// keys is the chain the tests run: three json_field keys and two prompt
// prefixes, as a pool's chain numbers them (header i is the i-th key).
var keys = []Key{
	{Header: "x-kvxds-key-1", JSONField: "prompt_cache_key"},
	{Header: "x-kvxds-key-2", JSONField: "user"},
	{Header: "x-kvxds-key-3", JSONField: "metadata.conversation_id"},
	{Header: "x-kvxds-key-4", PromptPrefix: 64},
	{Header: "x-kvxds-key-5", PromptPrefix: 4096},
}

const testMaxBody = 64 << 10

// goKeys is what the Go functions give for body: header -> value.
func goKeys(body []byte) map[string]string { return goChainKeys(keys, body) }

func goChainKeys(chain []Key, body []byte) map[string]string {
	out := map[string]string{}
	for _, k := range chain {
		var v string
		var ok bool
		if k.Conversation {
			v, ok = Conversation(body)
		} else if k.PromptPrefix > 0 {
			v, ok = PromptPrefix(body, k.PromptPrefix)
		} else {
			v, ok = JSONField(body, k.JSONField)
		}
		if ok && k.Spread {
			var b []byte
			if k.Conversation {
				b, _ = ConversationBytes(body)
			} else if k.PromptPrefix > 0 {
				b, _ = PromptPrefixBytes(body, k.PromptPrefix)
			} else {
				b, _ = JSONFieldBytes(body, k.JSONField)
			}
			v = Spread(b)
		}
		if ok {
			out[k.Header] = v
		}
	}
	return out
}

var long = strings.Repeat("lorem ipsum dolor sit amet ", 400) // 10,800 bytes

// bodies are real request bodies: chat and completions, nested, escaped,
// unicode, reordered, short, and broken ones. keyed lists the keys (by
// number) each must get; the values themselves come from the Go functions.
var bodies = []struct {
	name  string
	body  string
	keyed string
}{
	{"chat", `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi"}],"user":"alice","prompt_cache_key":"k1","metadata":{"conversation_id":"c-42"}}`, "12345"},
	{"completions", `{"model":"m","prompt":"Once upon a time","max_tokens":5}`, "45"},
	{"escaped quotes", `{"messages":[{"role":"user","content":"say \"hi\" \\ and \u00e9 \\\"x"}],"user":"bob \"the\" builder"}`, "245"},
	{"nested decoys", `{"tools":[{"type":"function","function":{"name":"f","parameters":{"messages":"decoy","prompt":"decoy","user":"decoy"}}}],"metadata":{"tags":{"conversation_id":"decoy"},"conversation_id":"real"},"messages":[{"role":"user","content":"x"}]}`, "345"},
	{"key order", `{"user":"alice","messages":[{"content":"Hi","role":"user"}],"model":"m"}`, "245"},
	{"unicode", `{"messages":[{"role":"user","content":"こんにちは, мир 🌍"}],"user":"ünïcødé"}`, "245"},
	{"pretty", "{\n  \"model\" : \"m\" ,\n  \"messages\" :\t[ {\"role\": \"user\", \"content\": \"Hi\"} ] ,\r\n  \"user\" : \"alice\"\n}\n", "245"},
	{"short prompt", `{"prompt":"a"}`, "45"},
	{"long prompt", `{"messages":[{"role":"user","content":"` + long + `"}]}`, "45"},
	{"long prompt, other tail", `{"messages":[{"role":"user","content":"` + long[:5000] + `different tail"}]}`, "45"},
	{"long prompt, other head", `{"messages":[{"role":"user","content":"X` + long[1:] + `"}]}`, "45"},
	{"token prompt", `{"prompt":[1, 2, 3],"max_tokens":5}`, "45"},
	{"both prompt fields", `{"prompt":"p","messages":[{"role":"user","content":"m"}]}`, "45"},
	{"no prompt", `{"model":"m","input":"embed me"}`, ""},
	{"empty messages", `{"messages":[ ],"prompt":"fallback? no: messages is there"}`, ""},
	{"empty prompt", `{"prompt":""}`, ""},
	{"null messages", `{"messages":null,"user":""}`, ""},
	{"object prompt", `{"prompt":{"text":"x"}}`, ""},
	{"non-string user", `{"user":42,"prompt_cache_key":null,"metadata":"c-42"}`, ""},
	{"duplicate key", `{"user":"first","user":"second"}`, "2"},
	{"escaped backslash at end", `{"user":"a\\","prompt":"b"}`, "245"},
	{"escaped key", `{"us\u0065r":"x","user":"y"}`, "2"},
	{"truncated", `{"user":"alice","messages":[{"role":"user","content":"Hi`, "2"},
	{"truncated before value", `{"messages":[{"role":"user"},"user":`, ""},
	{"not json", `hello world`, ""},
	{"top-level array", `[{"user":"alice"}]`, ""},
	{"trailing garbage", `{"user":"alice"} trailing`, "2"},
}

// luajit returns the path of LuaJIT, skipping the test where it is absent
// unless KVXDS_REQUIRE_LUAJIT is set (CI sets it).
func luajit(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("luajit")
	if err != nil {
		if os.Getenv("KVXDS_REQUIRE_LUAJIT") != "" {
			t.Fatalf("luajit not found: %v", err)
		}
		t.Skip("luajit not installed (Debian: apt-get install luajit)")
	}
	return p
}

type luaCase struct {
	contentLength string // "-" for none
	body          string
}

// runLua runs the generated script on each case under the stand-in and
// returns, per case, the number of body() calls and the x-kvxds-* headers
// after the run.
func runLua(t *testing.T, bin string, nobit bool, limit int, cases []luaCase) ([]int, []map[string]string) {
	t.Helper()
	return runChain(t, bin, keys, nobit, limit, cases)
}

func runChain(t *testing.T, bin string, chain []Key, nobit bool, limit int, cases []luaCase) ([]int, []map[string]string) {
	t.Helper()
	dir := t.TempDir()
	src, err := Lua(chain, testMaxBody)
	if err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "keys.lua")
	if err := os.WriteFile(scriptPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"testdata/standin.lua", scriptPath, map[bool]string{true: "1", false: "0"}[nobit], strconv.Itoa(limit)}
	for i, c := range cases {
		p := filepath.Join(dir, fmt.Sprintf("case%03d", i))
		if err := os.WriteFile(p, []byte(c.contentLength+"\n"+c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("luajit: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("luajit printed %d lines for %d cases:\n%s", len(lines), len(cases), out)
	}
	calls := make([]int, len(cases))
	hdrs := make([]map[string]string, len(cases))
	for i, l := range lines {
		f := strings.Split(l, "\t")
		if calls[i], err = strconv.Atoi(f[1]); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		hdrs[i] = map[string]string{}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			hdrs[i][k] = v
		}
	}
	return calls, hdrs
}

func TestLuaMatchesGo(t *testing.T) {
	bin := luajit(t)
	cases := make([]luaCase, len(bodies))
	for i, b := range bodies {
		cases[i] = luaCase{strconv.Itoa(len(b.body)), b.body}
	}
	for _, nobit := range []bool{false, true} {
		t.Run(fmt.Sprintf("nobit=%v", nobit), func(t *testing.T) {
			_, got := runLua(t, bin, nobit, testMaxBody, cases)
			for i, b := range bodies {
				want := goKeys([]byte(b.body))
				if fmt.Sprint(got[i]) != fmt.Sprint(want) {
					t.Errorf("%s: Lua set %v, Go computes %v", b.name, got[i], want)
				}
				var keyed string
				for j, k := range keys {
					if _, ok := want[k.Header]; ok {
						keyed += strconv.Itoa(j + 1)
					}
				}
				if keyed != b.keyed {
					t.Errorf("%s: keyed by %q, want %q", b.name, keyed, b.keyed)
				}
			}
		})
	}
}

// TestPrefixIdentity: bodies whose first n prompt bytes agree get one key,
// and bodies that differ there get different ones.
func TestPrefixIdentity(t *testing.T) {
	key := func(name string, n int) string {
		for _, b := range bodies {
			if b.name == name {
				v, ok := PromptPrefix([]byte(b.body), n)
				if !ok {
					t.Fatalf("%s: no key", name)
				}
				return v
			}
		}
		t.Fatalf("no body %q", name)
		return ""
	}
	if a, b := key("long prompt", 4096), key("long prompt, other tail", 4096); a != b {
		t.Errorf("same first 4096 bytes, different keys %s and %s", a, b)
	}
	if a, b := key("long prompt", 8192), key("long prompt, other tail", 8192); a == b {
		t.Errorf("prompts that differ within 8192 bytes share key %s", a)
	}
	if a, b := key("long prompt", 4096), key("long prompt, other head", 4096); a == b {
		t.Errorf("prompts that differ in their first byte share key %s", a)
	}
	if a, b := key("chat", 4096), key("key order", 4096); a == b {
		t.Errorf("different conversations share key %s", a)
	}
}

func TestPromptPrefixBytes(t *testing.T) {
	for _, tc := range []struct {
		body string
		n    int
		want string
	}{
		{`{"messages":[{"role":"user","content":"Hi"}]}`, 1000, `[{"role":"user","content":"Hi"}]`},
		{`{"messages":[{"role":"user","content":"Hi"}]}`, 10, `[{"role":"`},
		{`{"prompt" :  "abc" }`, 1000, `"abc"`},
		{`{"prompt":"abc"}`, 2, `"a`},
		{`{"prompt":[1,2]}`, 1000, `[1,2]`},
	} {
		got, ok := PromptPrefixBytes([]byte(tc.body), tc.n)
		if !ok || string(got) != tc.want {
			t.Errorf("PromptPrefixBytes(%s, %d) = %q, %v; want %q", tc.body, tc.n, got, ok, tc.want)
		}
	}
}

// TestLuaLimits: the script reads no body without a content-length or
// above the limit (so it never makes Envoy answer 413), and always drops
// the headers a client sent.
func TestLuaLimits(t *testing.T) {
	bin := luajit(t)
	small := `{"user":"alice","prompt":"Hi"}`
	big := `{"user":"alice","prompt":"` + strings.Repeat("x", testMaxBody) + `"}`
	cases := []luaCase{
		{strconv.Itoa(len(small)), small},
		{"-", small},                                   // chunked: length unknown
		{strconv.Itoa(len(big)), big},                  // over the limit
		{"0", ""},                                      // no body
		{strconv.Itoa(len(`{}`)), `{}`},                // nothing to key
		{"12x", small},                                 // garbage length
		{strconv.Itoa(testMaxBody), big[:testMaxBody]}, // exactly at the limit (truncated JSON: user still keyed)
	}
	calls, got := runLua(t, bin, false, testMaxBody, cases)
	wantCalls := []int{1, 0, 0, 0, 1, 0, 1}
	for i, c := range cases {
		if calls[i] != wantCalls[i] {
			t.Errorf("case %d: body() called %d times, want %d", i, calls[i], wantCalls[i])
		}
		want := goKeys([]byte(c.body))
		if wantCalls[i] == 0 {
			want = map[string]string{}
		}
		if fmt.Sprint(got[i]) != fmt.Sprint(want) {
			t.Errorf("case %d: headers %v, want %v", i, got[i], want)
		}
		for k, v := range got[i] {
			if v == "spoofed" {
				t.Errorf("case %d: client's %s kept", i, k)
			}
		}
	}
	if len(got[0]) != 3 {
		t.Errorf("small body: %v, want user and both prefixes", got[0])
	}
}

func TestHash(t *testing.T) {
	// Pinned: a changed value moves every body-keyed session once.
	for in, want := range map[string]string{
		"": "515029d20266ea94", "a": "901e1170264548b7", "foobar": "ada80c1a7a69f7cb",
		"\x00": "8b9e13f2c49f83d8", "\x00\x00\x00\x00": "50d2414095362254",
	} {
		if got := Hash([]byte(in)); got != want {
			t.Errorf("Hash(%q) = %s, want %s", in, got, want)
		}
	}
	// Inputs that differ in one byte, or only in trailing zero bytes
	// (the padding of the last word), never collide.
	base := []byte(strings.Repeat(`{"role":"user","content":"word "}`, 40))
	seen := map[string]int{}
	for i := range base {
		b := bytes.Clone(base)
		b[i] ^= 0x20
		seen[Hash(b)]++
	}
	for n := range 9 {
		seen[Hash(make([]byte, n))]++
	}
	seen[Hash(base)]++
	if len(seen) != len(base)+10 {
		t.Errorf("%d distinct hashes of %d inputs", len(seen), len(base)+10)
	}
}

func TestLuaRejects(t *testing.T) {
	for _, tc := range []struct {
		keys []Key
		max  int
	}{
		{[]Key{{Header: "h", JSONField: "a"}}, 0},
		{[]Key{{JSONField: "a"}}, 10},
		{[]Key{{Header: "h"}}, 10},
		{[]Key{{Header: "h", JSONField: "a", PromptPrefix: 3}}, 10},
		{[]Key{{Header: "h", JSONField: "a..b"}}, 10},
	} {
		if _, err := Lua(tc.keys, tc.max); err == nil {
			t.Errorf("Lua(%+v, %d) accepted", tc.keys, tc.max)
		}
	}
}

func TestLuaString(t *testing.T) {
	if got, want := luaString("a\"b\\c\né"), `"a\034b\092c\010\195\169"`; got != want {
		t.Errorf("luaString = %s, want %s", got, want)
	}
}

// Spread is the first two hex digits of Hash as bits, most significant
// first, always SpreadBits characters.
func TestSpread(t *testing.T) {
	seen := map[string]bool{}
	for i := range 2000 {
		b := []byte(fmt.Sprintf("conversation-%d", i))
		got := Spread(b)
		want, err := strconv.ParseUint(Hash(b)[:2], 16, 8)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseUint(got, 2, 8)
		if len(got) != SpreadBits || err != nil || n != want || !ValidSpread(got) {
			t.Fatalf("Spread(%q) = %q, want the bits of %02x", b, got, want)
		}
		seen[got] = true
	}
	// 2,000 sub-keys cover nearly all 256 values: the bits spread.
	if len(seen) < 250 {
		t.Errorf("%d distinct spread values of 2000 sub-keys", len(seen))
	}
}

// The Lua filter sets the spread header as Spread does, from the pool's
// spread_by body key, next to the chain's own keys, and drops a
// client-sent one.
func TestLuaSpreadMatchesGo(t *testing.T) {
	bin := luajit(t)
	t.Setenv("KVXDS_STANDIN_SPOOF", SpreadHeader)
	for _, spreadBy := range []Key{
		{Header: SpreadHeader, Conversation: true, Spread: true},
		{Header: SpreadHeader, PromptPrefix: 64, Spread: true},
		{Header: SpreadHeader, JSONField: "user", Spread: true},
	} {
		chain := append(slices.Clone(keys), spreadBy)
		cases := make([]luaCase, len(bodies))
		for i, b := range bodies {
			cases[i] = luaCase{strconv.Itoa(len(b.body)), b.body}
		}
		for _, nobit := range []bool{false, true} {
			t.Run(fmt.Sprintf("%+v/nobit=%v", spreadBy, nobit), func(t *testing.T) {
				_, got := runChain(t, bin, chain, nobit, testMaxBody, cases)
				spread := 0
				for i, b := range bodies {
					want := goChainKeys(chain, []byte(b.body))
					if fmt.Sprint(got[i]) != fmt.Sprint(want) {
						t.Errorf("%s: Lua set %v, Go computes %v", b.name, got[i], want)
					}
					if _, ok := want[SpreadHeader]; ok {
						spread++
					}
				}
				if spread == 0 {
					t.Error("no body got a spread header")
				}
			})
		}
	}
}

func TestValidSpread(t *testing.T) {
	for v, want := range map[string]bool{
		"10110010":          true,
		"00000000":          true,
		"11111111":          true,
		"":                  false,
		"1011001":           false, // short
		"101100101":         false, // long
		"1011001x":          false,
		"10110010,01010101": false, // two values joined, as Envoy's get returns them
		" 1011001":          false,
		"spoofed":           false,
	} {
		if got := ValidSpread(v); got != want {
			t.Errorf("ValidSpread(%q) = %v, want %v", v, got, want)
		}
	}
}

// A spread sub-key a client sent stays when it is well-formed and the body
// gives none (no spread_by key in it, no body, a body over the limit or of
// unknown length); the body's own sub-key replaces it; a malformed one is
// always dropped. The chain's own keys are dropped as ever.
func TestLuaKeepsClientSpread(t *testing.T) {
	bin := luajit(t)
	// A pool keyed on headers alone: the filter computes only the spread
	// sub-key, by the "user" field.
	chain := []Key{{Header: SpreadHeader, JSONField: "user", Spread: true}}
	withUser := `{"user":"alice","prompt":"Hi"}`
	noUser := `{"prompt":"Hi"}`
	big := `{"user":"alice","prompt":"` + strings.Repeat("x", testMaxBody) + `"}`
	cases := []luaCase{
		{strconv.Itoa(len(withUser)), withUser},
		{strconv.Itoa(len(noUser)), noUser},
		{"-", withUser}, // length unknown: the body is not read
		{strconv.Itoa(len(big)), big},
		{"0", ""},
	}
	fromBody := Spread([]byte("alice"))
	for _, tc := range []struct {
		sent string
		want []string // per case; "" for no header
	}{
		{"10110010", []string{fromBody, "10110010", "10110010", "10110010", "10110010"}},
		{"spoofed", []string{fromBody, "", "", "", ""}},
		{"1011001", []string{fromBody, "", "", "", ""}},
		{"10110010,01010101", []string{fromBody, "", "", "", ""}},
		{"", []string{fromBody, "", "", "", ""}},
	} {
		t.Run(tc.sent, func(t *testing.T) {
			if tc.sent != "" {
				t.Setenv("KVXDS_STANDIN_SPOOF", SpreadHeader+"="+tc.sent)
			}
			for _, nobit := range []bool{false, true} {
				_, got := runChain(t, bin, chain, nobit, testMaxBody, cases)
				for i, want := range tc.want {
					wantHdrs := map[string]string{}
					if want != "" {
						wantHdrs[SpreadHeader] = want
					}
					// The stand-in's spoofed x-kvxds-key-1 and -5 are
					// not this chain's: they pass through untouched.
					delete(got[i], "x-kvxds-key-1")
					delete(got[i], "x-kvxds-key-5")
					if fmt.Sprint(got[i]) != fmt.Sprint(wantHdrs) {
						t.Errorf("nobit=%v case %d: headers %v, want %v", nobit, i, got[i], wantHdrs)
					}
				}
			}
		})
	}
	if fromBody == "10110010" {
		t.Fatal("the body's sub-key equals the client's: the test cannot tell them apart")
	}
}

// The adapter field is copied into its header only when it names an
// adapter; a present field that does not says why, and a base model or
// an absent field sets nothing. A client's own copies are removed.
func TestLuaAdapter(t *testing.T) {
	bin := luajit(t)
	a := &Adapter{Header: "x-kvxds-adapter", Rejected: "x-kvxds-adapter-rejected", Field: "model", BaseModels: []string{"llama-3", "base"}, MaxName: 16}
	// Alone, and beside a spread sub-key, whose handler replaces the
	// plain one: the client's adapter headers go in both.
	for _, spread := range []bool{false, true} {
		var keys []Key
		if spread {
			keys = []Key{{Header: SpreadHeader, Conversation: true, Spread: true}}
		}
		t.Run(fmt.Sprintf("spread=%t", spread), func(t *testing.T) { testLuaAdapter(t, bin, a, keys) })
	}
	// Without an adapter the script is Lua's, byte for byte.
	plain, _ := Lua(keys, testMaxBody)
	same, _ := LuaAdapter(keys, testMaxBody, nil)
	if plain != same {
		t.Error("LuaAdapter without an adapter differs from Lua")
	}
}

func testLuaAdapter(t *testing.T, bin string, a *Adapter, keys []Key) {
	src, err := LuaAdapter(keys, testMaxBody, a)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	scriptPath := filepath.Join(dir, "adapter.lua")
	if err := os.WriteFile(scriptPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ body, adapter, rejected string }{
		{`{"model":"sql-lora","messages":[]}`, "sql-lora", ""},
		{`{"messages":[], "model" : "a/b:c"}`, "a/b:c", ""},
		{`{"model":"llama-3"}`, "", ""},
		{`{"messages":[]}`, "", ""},
		{`{"model":null}`, "", RejectNotString},
		{`{"model":42}`, "", RejectNotString},
		{`{"model":{"x":"y"}}`, "", RejectNotString},
		{`{"model":""}`, "", RejectEmpty},
		{`{"model":"seventeen-bytes-xx"}`, "", RejectTooLong},
		{`{"model":"has space"}`, "", RejectBadByte},
		{`{"model":"esc\"aped"}`, "", RejectBadByte},
		{`{"model":"caf` + "\u00e9" + `"}`, "", RejectBadByte},
		{`not json`, "", ""},
		{`{"nested":{"model":"x"}}`, "", ""},
	} {
		t.Run(tc.body, func(t *testing.T) {
			p := filepath.Join(dir, "case")
			if err := os.WriteFile(p, []byte(strconv.Itoa(len(tc.body))+"\n"+tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "testdata/standin.lua", scriptPath, "0", strconv.Itoa(testMaxBody), p)
			cmd.Env = append(os.Environ(), "KVXDS_STANDIN_SPOOF=x-kvxds-adapter")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("luajit: %v\n%s", err, stderr.String())
			}
			got := map[string]string{}
			for _, kv := range strings.Split(strings.TrimSpace(string(out)), "\t")[2:] {
				k, v, _ := strings.Cut(kv, "=")
				if !strings.HasPrefix(k, HeaderPrefix) && k != SpreadHeader { // the stand-in's spoofed keys, and the spread sub-key
					got[k] = v
				}
			}
			want := map[string]string{}
			if tc.adapter != "" {
				want[a.Header] = tc.adapter
			}
			if tc.rejected != "" {
				want[a.Rejected] = tc.rejected
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("headers %v, want %v", got, want)
			}
		})
	}
}
