package bodykey

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// convChain is a conversation key with a prompt_prefix to fall through to.
var convChain = []Key{
	{Header: "x-kvxds-key-1", Conversation: true},
	{Header: "x-kvxds-key-2", PromptPrefix: 64},
}

// fullChain runs every kind of key in one filter, so the conversation
// code is checked not to disturb the other keys.
var fullChain = append(append([]Key{}, keys...), Key{Header: "x-kvxds-key-6", Conversation: true})

const (
	sysMsg   = `{"role":"system","content":"You are terse."}`
	user1    = `{"role":"user","content":"Plan a trip to Kyoto"}`
	asst1    = `{"role":"assistant","content":"Day 1: temples."}`
	asst1b   = `{"role":"assistant","content":"Day 1: markets."}`
	user2    = `{"role":"user","content":"Cheaper?"}`
	toolCall = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":\"kyoto\"}"}}]}`
	toolRes  = `{"role":"tool","tool_call_id":"c1","content":"[{\"title\":\"Kyoto\"}]"}`
)

func chat(msgs ...string) string {
	return `{"model":"m","messages":[` + strings.Join(msgs, ",") + `],"stream":true}`
}

var doc = strings.Repeat("The quick brown fox jumps over the lazy dog. \\n", 1000) // 47,000 bytes of JSON text

var convBodies = []struct {
	name, body, want string // want: the keyed bytes, "" for no key
}{
	{"turn 1", chat(sysMsg, user1), `[` + sysMsg + `,` + user1},
	{"turn 2", chat(sysMsg, user1, asst1, user2), `[` + sysMsg + `,` + user1},
	{"regenerated", chat(sysMsg, user1, asst1b, user2), `[` + sysMsg + `,` + user1},
	{"tool loop", chat(sysMsg, user1, toolCall, toolRes), `[` + sysMsg + `,` + user1},
	{"no system", chat(user1, asst1, user2), `[` + user1},
	{"developer and system", chat(`{"role":"developer","content":"d"}`, sysMsg, user1), `[{"role":"developer","content":"d"},` + sysMsg + `,` + user1},
	{"role last", `{"messages":[{"content":"Hi","role":"user"}]}`, `[{"content":"Hi","role":"user"}`},
	{"content parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}]}`, `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}`},
	{"anthropic", `{"max_tokens":1024,"messages":[` + user1 + `,` + asst1 + `],"model":"claude","system":"Be brief."}`, `"Be brief.",[` + user1},
	{"anthropic blocks", `{"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[` + user1 + `]}`, `[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],[` + user1},
	{"chatml", `{"prompt":"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n","max_tokens":8}`, `"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>`},
	{"llama 3", `{"prompt":"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>"}`, `"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>`},
	{"human assistant", `{"prompt":"\n\nHuman: Hi\n\nAssistant: Hello\n\nHuman: More"}`, `"\n\nHuman: Hi\n\nAssistant:`},
	{"mistral", `{"prompt":"<s>[INST] Hi [/INST] Hello</s>[INST] More [/INST]"}`, `"<s>[INST] Hi [/INST]`},
	{"marker beyond the prompt", `{"prompt":"<|im_start|>user\nHi","suffix":"<|im_end|>"}`, ""},
	{"plain prompt", `{"prompt":"Once upon a time"}`, ""},
	{"token prompt", `{"prompt":[1,2,3]}`, ""},
	{"messages before prompt", `{"messages":[{"role":"system","content":"s"}],"prompt":"<|im_start|>user\nHi<|im_end|>"}`, ""},
	{"no user message", chat(sysMsg, asst1), ""},
	{"element not an object", `{"messages":["hi",` + user1 + `]}`, ""},
	{"empty messages", `{"messages":[]}`, ""},
	{"null messages", `{"messages":null}`, ""},
	{"string messages", `{"messages":"hi"}`, ""},
	{"empty object", `{}`, ""},
	{"other shape", `{"model":"m","input":"embed me"}`, ""},
	{"not json", `hello world`, ""},
	{"top-level array", `[` + user1 + `]`, ""},
	{"truncated after the user message", `{"messages":[` + user1 + `,{"role":"assis`, ""},
	{"truncated at the end", chat(user1)[:len(chat(user1))-1], ""},
	{"missing comma", `{"model":"m" "messages":[` + user1 + `]}`, ""},
	{"escaped quotes", `{"messages":[{"role":"user","content":"say \"hi\" \\\\\" x \\\\"}]}`, `[{"role":"user","content":"say \"hi\" \\\\\" x \\\\"}`},
	{"decoy in tools", `{"tools":[{"messages":[` + user1 + `]}],"messages":[{"role":"user","content":"real"}]}`, `[{"role":"user","content":"real"}`},
}

func TestConversationBytes(t *testing.T) {
	for _, tc := range convBodies {
		got, ok := ConversationBytes([]byte(tc.body))
		if tc.want == "" {
			if ok {
				t.Errorf("%s: keyed on %q, want no key", tc.name, got)
			}
			continue
		}
		if !ok || string(got) != tc.want {
			t.Errorf("%s: keyed on %q (%v), want %q", tc.name, got, ok, tc.want)
		}
	}
}

// docBody is a retrieval request: a shared document and a question in the
// first user message, under a shared system prompt.
func docBody(question string, later ...string) string {
	first := `{"role":"user","content":"` + doc + `\n\nQuestion: ` + question + `"}`
	return chat(append([]string{sysMsg, first}, later...)...)
}

// TestConversationWindow: a long first message is keyed on its ends and
// length, so the question after a shared document tells conversations
// apart, and the conversation keeps its key on later turns.
func TestConversationWindow(t *testing.T) {
	key := func(body string) string {
		v, ok := Conversation([]byte(body))
		if !ok {
			t.Fatalf("no key for %.80s", body)
		}
		return v
	}
	a, b := docBody("Who wrote it?"), docBody("When?")
	if key(a) == key(b) {
		t.Errorf("different questions on one document share a key")
	}
	if key(a) != key(docBody("Who wrote it?", asst1, user2)) {
		t.Errorf("a retrieval conversation changed key on its second turn")
	}
	kb, _ := ConversationBytes([]byte(a))
	if n := len(kb); n > 2*ConversationWindow+10 {
		t.Errorf("keyed %d bytes of a long message, want at most %d", n, 2*ConversationWindow+10)
	}
	if !strings.HasSuffix(string(kb), "Question: Who wrote it?\"}#"+strconv.Itoa(len(`[`+sysMsg+`,`)+len(doc)+len(`{"role":"user","content":"\n\nQuestion: Who wrote it?"}`))) {
		t.Errorf("keyed bytes end %q", kb[len(kb)-60:])
	}
	// The same question on the same document is the same prefix: one key.
	if key(a) != key(docBody("Who wrote it?")) {
		t.Errorf("identical requests, different keys")
	}
}

func TestConversationLua(t *testing.T) {
	bin := luajit(t)
	var cases []luaCase
	var names []string
	add := func(name, body string) {
		names = append(names, name)
		cases = append(cases, luaCase{strconv.Itoa(len(body)), body})
	}
	for _, b := range convBodies {
		add(b.name, b.body)
	}
	for _, b := range bodies {
		add(b.name, b.body)
	}
	add("document", docBody("Who wrote it?"))
	add("anthropic document", `{"messages":[`+user1+`],"system":"`+doc+`"}`)
	add("long chatml", `{"prompt":"<|im_start|>user\n`+doc+`<|im_end|>"}`)
	for _, chain := range [][]Key{convChain, fullChain} {
		for _, nobit := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d keys, nobit=%v", len(chain), nobit), func(t *testing.T) {
				_, got := runChain(t, bin, chain, nobit, testMaxBody, cases)
				for i, c := range cases {
					want := goChainKeys(chain, []byte(c.body))
					if len(chain) < 5 {
						delete(got[i], "x-kvxds-key-5") // the stand-in's spoofed header, outside the chain
					}
					if fmt.Sprint(got[i]) != fmt.Sprint(want) {
						t.Errorf("%s: Lua set %v, Go computes %v", names[i], got[i], want)
					}
				}
			})
		}
	}
}

// TestConversationFallsThrough: a body the conversation key cannot read
// goes to the next key of the chain, or to none; a body too long or of
// unknown length is not read at all.
func TestConversationFallsThrough(t *testing.T) {
	bin := luajit(t)
	big := chat(`{"role":"user","content":"` + strings.Repeat("x", testMaxBody) + `"}`)
	cases := []luaCase{
		{strconv.Itoa(len(chat(user1))), chat(user1)},                                       // conversation and prefix
		{"12", `{"prompt":"Once upon a time, in a land far away, there lived a fox."}`},     // prefix only
		{strconv.Itoa(len("hello world")), "hello world"},                                   // neither
		{strconv.Itoa(len(chat(user1)) - 1), chat(user1)[:len(chat(user1))-1]},              // truncated: prefix only
		{strconv.Itoa(len(big)), big},                                                       // over max_body_bytes
		{"-", chat(user1)},                                                                  // unknown length
		{strconv.Itoa(len(`{"messages":[1,2]}`)), `{"messages":[1,2]}`},                     // other shape: prefix only
		{strconv.Itoa(len(`{"messages":{"role":"user"}}`)), `{"messages":{"role":"user"}}`}, // other shape: nothing
	}
	want := []string{"12", "2", "", "2", "", "", "2", ""}
	calls, got := runChain(t, bin, convChain, false, testMaxBody, cases)
	for i := range cases {
		var keyed string
		for j, k := range convChain {
			if _, ok := got[i][k.Header]; ok {
				keyed += strconv.Itoa(j + 1)
			}
		}
		if keyed != want[i] {
			t.Errorf("case %d: keyed by %q, want %q (%v)", i, keyed, want[i], got[i])
		}
		if (i == 4 || i == 5) && calls[i] != 0 {
			t.Errorf("case %d: body read", i)
		}
	}
}
