package bodykey

import (
	"bytes"
	"strconv"
)

// Conversation keys follow a conversation with no help from the client.
// Every turn of a chat, and every branch of it (a regenerated reply, an
// edited later message, a tool-call loop), sends its leading messages
// again unchanged, so a key over them is the same for all of its requests,
// everywhere, with no index. The leading messages are:
//
//   - chat completions and Anthropic messages: the raw JSON text of the
//     top-level "messages" array from its '[' through the end of its first
//     element whose "role" is "user" (system and developer messages before
//     it included), preceded by the raw JSON text of the top-level
//     "system" value when there is one (Anthropic's system prompt) and a
//     comma;
//   - completions: the top-level "prompt" string from its opening quote
//     through the end of the first user turn of a chat template
//     (TurnMarkers), when "messages" is absent. A prompt without a
//     recognised turn gives no key: chain a prompt_prefix key after it.
//
// A popular first message (a document many users send, an app's fixed
// opener) must not pin every conversation to one replica, and hashing a
// megabyte per request costs milliseconds in Lua. So each part longer than
// 2 × ConversationWindow is keyed on its first and last ConversationWindow
// bytes and its length in decimal: the question a user appends to a shared
// document, or the first message under a shared system prompt, lands in
// the tail and tells the conversations apart. A body must be a complete
// JSON object (its top-level object closes) to be keyed.
//
// The keyed bytes are the body's, as for prompt_prefix: one client
// serialises a history the same way every turn.

// ConversationWindow is how many bytes of each end of a long part are keyed.
const ConversationWindow = 1024

// TurnMarkers are the chat templates whose first user turn ends a
// completions prompt's leading part, tried in order: the first pair whose
// user marker occurs in the prompt, with its end marker after it, wins.
// Markers are matched as written in the JSON text.
var TurnMarkers = [][2]string{
	{"<|im_start|>user", "<|im_end|>"},                         // ChatML (Qwen, Yi, many fine-tunes)
	{"<|start_header_id|>user<|end_header_id|>", "<|eot_id|>"}, // Llama 3
	{"<start_of_turn>user", "<end_of_turn>"},                   // Gemma
	{"<|user|>", "<|end|>"},                                    // Phi-3
	{"[INST]", "[/INST]"},                                      // Llama 2, Mistral
	{"Human:", "Assistant:"},                                   // Anthropic text completions
}

// Conversation returns the header value of body's conversation key, or
// false if body has none.
func Conversation(body []byte) (string, bool) {
	b, ok := ConversationBytes(body)
	if !ok {
		return "", false
	}
	return Hash(b), true
}

// ConversationBytes returns the bytes Conversation keys on.
func ConversationBytes(body []byte) ([]byte, bool) {
	msgs, sys, prompt, ok := topFields(body)
	if !ok {
		return nil, false
	}
	if msgs >= 0 {
		if body[msgs] != '[' {
			return nil, false
		}
		end := leadingEnd(body, msgs)
		if end < 0 {
			return nil, false
		}
		var out []byte
		if sys >= 0 {
			se := skipValue(body, sys)
			out = append(window(out, body[sys:se]), ',')
		}
		return window(out, body[msgs:end]), true
	}
	if prompt < 0 || body[prompt] != '"' {
		return nil, false
	}
	pe := skipString(body, prompt)
	for _, m := range TurnMarkers {
		u := bytes.Index(body[prompt:pe], []byte(m[0]))
		if u < 0 {
			continue
		}
		u += prompt + len(m[0])
		e := bytes.Index(body[u:pe], []byte(m[1]))
		if e < 0 {
			continue
		}
		return window(nil, body[prompt:u+e+len(m[1])]), true
	}
	return nil, false
}

// window appends part to out, or only its ends and its length if it is
// long.
func window(out, part []byte) []byte {
	if len(part) <= 2*ConversationWindow {
		return append(out, part...)
	}
	out = append(out, part[:ConversationWindow]...)
	out = append(out, part[len(part)-ConversationWindow:]...)
	return strconv.AppendInt(append(out, '#'), int64(len(part)), 10)
}

// topFields returns the indexes of the values of the top-level
// "messages", "system" and "prompt" (first occurrences; -1 if absent), and
// whether the body is one complete object.
func topFields(s []byte) (msgs, sys, prompt int, ok bool) {
	msgs, sys, prompt = -1, -1, -1
	i, ok := object(s)
	if !ok {
		return
	}
	ok = false
	if i = skipWS(s, i+1); i < 0 {
		return
	}
	if s[i] == '}' {
		ok = true
		return
	}
	for {
		if s[i] != '"' {
			return
		}
		end := skipString(s, i)
		if end < 0 {
			return
		}
		key := string(s[i+1 : end-1])
		if i = skipWS(s, end); i < 0 || s[i] != ':' {
			return
		}
		if i = skipWS(s, i+1); i < 0 {
			return
		}
		switch {
		case key == "messages" && msgs < 0:
			msgs = i
		case key == "system" && sys < 0:
			sys = i
		case key == "prompt" && prompt < 0:
			prompt = i
		}
		if i = skipValue(s, i); i < 0 {
			return
		}
		if i = skipWS(s, i); i < 0 {
			return
		}
		if s[i] == '}' {
			ok = true
			return
		}
		if s[i] != ',' {
			return
		}
		if i = skipWS(s, i+1); i < 0 {
			return
		}
	}
}

// leadingEnd returns the index after the first element of the array
// opening at a whose "role" is "user", or -1. Every element before it must
// be an object.
func leadingEnd(s []byte, a int) int {
	i := skipWS(s, a+1)
	for i >= 0 && s[i] == '{' {
		e := skipValue(s, i)
		if e < 0 {
			return -1
		}
		if r := findKey(s, i, "role"); r >= 0 && bytes.HasPrefix(s[r:], []byte(`"user"`)) {
			return e
		}
		if i = skipWS(s, e); i < 0 || s[i] != ',' {
			return -1
		}
		i = skipWS(s, i+1)
	}
	return -1
}
