// Package bodykey computes hash keys from an LLM request's JSON body, the
// same way in Go and in the Lua script it generates for Envoy's Lua HTTP
// filter, so that what a client computes ahead (the benchmark does) and
// what Envoy computes agree byte for byte.
//
// Two kinds of key:
//
//   - JSONField(body, path) keys on a string field of the body, found by a
//     dot path of object keys from the top level ("user",
//     "metadata.conversation_id"). The keyed bytes are the string's JSON
//     text as sent, between its quotes: escapes are not decoded (one
//     client's serialiser writes a value the same way every time). A
//     missing field, a value that is not a string, and an empty string
//     give no key.
//   - PromptPrefix(body, n) keys on the first n bytes of the prompt: the
//     raw JSON text of the top-level "messages" value (chat completions)
//     or, if there is none, of the top-level "prompt" value (completions),
//     starting at the value's first byte ('[' or '"') and ending at its
//     last byte or after n bytes, whichever comes first. Only a non-empty
//     array or a non-empty string is keyed.
//
// The scanner is deliberately small and lenient, and the Lua script runs
// the same algorithm: it follows objects, arrays and strings (with their
// escapes) as far as it must to find a key, compares object keys as
// written, takes the first occurrence of a duplicated key, and does not
// validate what lies beyond the value it needs. Anything it cannot follow
// gives no key, never an error: the request then falls through to the next
// key of the chain.
//
// A key becomes a header value as the 16 lowercase hex digits of Hash of
// the keyed bytes. The data plane hashes that value again onto its ring
// (XXH64 in Envoy), so Hash needs to tell keys apart, not to spread them;
// 64 bits do (a collision between two of a billion keys has a probability
// near 3%, and it would only make two keys share a replica), and the
// header stays short and opaque however long the prefix is.
package bodykey

import (
	"bytes"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Hash is the header value of keyed bytes, 16 hex digits: two 32-bit
// lanes, each folding in the bytes as little-endian 32-bit words (the last
// one zero-padded) by h = rotl((h XOR w) × m, r), then the length, then two
// rounds that mix each lane into the other. It is built for the Lua
// filter: every product of a 32-bit value and a multiplier below 2^19 is
// exact in a double, so LuaJIT's bit operations compute it a word at a
// time, several times faster than a byte-at-a-time 64-bit hash. Each step
// is a bijection of the lane's state, so two inputs that differ in one
// word never collide.
func Hash(b []byte) string {
	h1, h2 := uint32(hashSeed1), uint32(hashSeed2)
	for i := 0; i < len(b); i += 4 {
		var w uint32
		for k := 0; k < 4 && i+k < len(b); k++ {
			w |= uint32(b[i+k]) << (8 * k)
		}
		h1 = bits.RotateLeft32((h1^w)*hashMul1, hashRot1)
		h2 = bits.RotateLeft32((h2^w)*hashMul2, hashRot2)
	}
	n := uint32(len(b))
	h1 ^= n
	h2 ^= n
	for range 2 {
		h1 = bits.RotateLeft32((h1^h2)*hashMul1, hashRot1)
		h2 = bits.RotateLeft32((h2^h1)*hashMul2, hashRot2)
	}
	return fmt.Sprintf("%08x%08x", h1, h2)
}

// SpreadHeader is the request header that carries a request's spread
// sub-key in a pool with hot keys (fleet.DefaultSpreadHeader): Envoy's Lua
// filter sets it from the body, and proxyless gRPC clients send it
// themselves, as Spread computes it.
const SpreadHeader = "x-kvxds-spread"

// SpreadBits is the length of a spread header value (fleet.SpreadBits).
const SpreadBits = 8

// Spread returns the spread header value of a sub-key's bytes: the first
// SpreadBits bits of Hash(b) (its first two hex digits), as characters
// '0' and '1', most significant first. A route of a hot key hashes on its
// first log2(spread) characters, so requests with the same sub-key (one
// conversation) stay on one replica while the key's other sub-keys spread.
// A gRPC client passes the bytes it spreads by, such as a conversation id;
// the Lua filter passes the bytes of the pool's spread_by body key.
func Spread(b []byte) string {
	h, _ := strconv.ParseUint(Hash(b)[:2], 16, 8)
	s := strconv.FormatUint(h, 2)
	return strings.Repeat("0", SpreadBits-len(s)) + s
}

// ValidSpread reports whether v is a spread header value as Spread
// writes it: SpreadBits characters '0' and '1'. Envoy's Lua filter keeps
// such a value a client sent when the body gives no spread sub-key, and
// drops any other.
func ValidSpread(v string) bool {
	return len(v) == SpreadBits && strings.Trim(v, "01") == ""
}

// Hash's constants, written into the Lua script: odd multipliers below
// 2^19 (see Hash).
const (
	hashSeed1, hashSeed2 = 0x9e3779b9, 0x85ebca6b
	hashMul1, hashMul2   = 0x5bd1f, 0x4f6cd
	hashRot1, hashRot2   = 13, 17
)

// PromptFields are the top-level fields PromptPrefix keys on, in order of
// preference.
var PromptFields = []string{"messages", "prompt"}

// PromptPrefix returns the header value of body's prompt_prefix key of n
// bytes, or false if body has no keyable prompt.
func PromptPrefix(body []byte, n int) (string, bool) {
	b, ok := PromptPrefixBytes(body, n)
	if !ok {
		return "", false
	}
	return Hash(b), true
}

// PromptPrefixBytes returns the bytes PromptPrefix keys on.
func PromptPrefixBytes(body []byte, n int) ([]byte, bool) {
	if n <= 0 {
		return nil, false
	}
	top, ok := object(body)
	if !ok {
		return nil, false
	}
	v := -1
	for _, f := range PromptFields {
		if v = findKey(body, top, f); v >= 0 {
			break
		}
	}
	if v < 0 {
		return nil, false
	}
	var end int
	switch body[v] {
	case '"':
		if end = skipString(body, v); end < 0 || end-v == 2 {
			return nil, false
		}
	case '[':
		if end = skipValue(body, v); end < 0 {
			return nil, false
		}
		if i := skipWS(body, v+1); i < 0 || body[i] == ']' {
			return nil, false
		}
	default:
		return nil, false
	}
	return body[v:min(end, v+n)], true
}

// JSONField returns the header value of body's json_field key at path
// (object keys separated by dots), or false if there is no non-empty
// string there.
func JSONField(body []byte, path string) (string, bool) {
	b, ok := JSONFieldBytes(body, path)
	if !ok {
		return "", false
	}
	return Hash(b), true
}

// JSONFieldBytes returns the bytes JSONField keys on: the string's JSON
// text between its quotes.
func JSONFieldBytes(body []byte, path string) ([]byte, bool) {
	i, ok := object(body)
	if !ok {
		return nil, false
	}
	for _, seg := range strings.Split(path, ".") {
		if body[i] != '{' {
			return nil, false
		}
		if i = findKey(body, i, seg); i < 0 {
			return nil, false
		}
	}
	if body[i] != '"' {
		return nil, false
	}
	end := skipString(body, i)
	if end < 0 || end-i == 2 {
		return nil, false
	}
	return body[i+1 : end-1], true
}

// object returns the index of the '{' that opens body's top-level object.
func object(body []byte) (int, bool) {
	i := skipWS(body, 0)
	if i < 0 || body[i] != '{' {
		return 0, false
	}
	return i, true
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipWS returns the index of the first non-whitespace byte at or after
// i, or -1.
func skipWS(s []byte, i int) int {
	for ; i < len(s); i++ {
		if !isWS(s[i]) {
			return i
		}
	}
	return -1
}

// skipString returns the index after the string whose opening quote is at
// i, or -1 if it does not end.
func skipString(s []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexAny(s[j:], `"\`)
		if k < 0 {
			return -1
		}
		k += j
		if s[k] == '\\' {
			j = k + 2
			if j > len(s) {
				return -1
			}
			continue
		}
		return k + 1
	}
}

// skipValue returns the index after the value starting at i, or -1. Nested
// brackets are counted, not matched by kind.
func skipValue(s []byte, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		j := i
		for {
			k := bytes.IndexAny(s[j:], "\"{}[]")
			if k < 0 {
				return -1
			}
			k += j
			switch s[k] {
			case '"':
				if j = skipString(s, k); j < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			default:
				depth--
			}
			if depth == 0 {
				return k + 1
			}
			j = k + 1
		}
	}
	// A number or a literal runs to the next delimiter.
	j := i
	for j < len(s) && !isWS(s[j]) && s[j] != ',' && s[j] != '}' && s[j] != ']' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// findKey returns the index of the value of key in the object opening at
// i, or -1. Keys are compared as written, and the first occurrence wins.
func findKey(s []byte, i int, key string) int {
	i = skipWS(s, i+1)
	if i < 0 || s[i] == '}' {
		return -1
	}
	for {
		if s[i] != '"' {
			return -1
		}
		end := skipString(s, i)
		if end < 0 {
			return -1
		}
		match := string(s[i+1:end-1]) == key
		if i = skipWS(s, end); i < 0 || s[i] != ':' {
			return -1
		}
		if i = skipWS(s, i+1); i < 0 {
			return -1
		}
		if match {
			return i
		}
		if i = skipValue(s, i); i < 0 {
			return -1
		}
		if i = skipWS(s, i); i < 0 || s[i] != ',' {
			return -1
		}
		if i = skipWS(s, i+1); i < 0 {
			return -1
		}
	}
}
