package sim

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// VocabSize is the size of the simulated vocabulary; token ids are in
// [0, VocabSize).
const VocabSize = 32000

// Tokenize is the deterministic tokenizer shared by the replicas and the load
// generators. Text splits into words (maximal runs of letters, digits and
// combining marks) and single punctuation or symbol characters; whitespace
// only separates. Each piece becomes FNV-1a-32(piece) mod VocabSize.
//
// So one English word is about one token (a BPE tokenizer gives ≈ 1.3), and
// the same text always gives the same ids. Because whitespace and punctuation
// are boundaries, Tokenize(a + b) == Tokenize(a) + Tokenize(b) whenever a ends
// or b starts at a boundary; chat rendering relies on that so that a
// conversation's next turn extends the previous turn's tokens exactly.
func Tokenize(text string) []int {
	out := make([]int, 0, len(text)/5+1)
	const (
		offset = 2166136261
		prime  = 16777619
	)
	h := uint32(offset)
	inWord := false
	flush := func() {
		if inWord {
			out = append(out, int(h%VocabSize))
			h, inWord = offset, false
		}
	}
	for i := 0; i < len(text); {
		r, size := rune(text[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(text[i:])
		}
		switch {
		case isWordRune(r):
			for j := i; j < i+size; j++ {
				h ^= uint32(text[j])
				h *= prime
			}
			inWord = true
		case unicode.IsSpace(r):
			flush()
		default: // punctuation, symbols, control: a token each
			flush()
			for j := i; j < i+size; j++ {
				h ^= uint32(text[j])
				h *= prime
			}
			inWord = true
			flush()
		}
		i += size
	}
	flush()
	return out
}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// RenderChat is the simulated chat template: "<|role|>\n" + content + "\n"
// per message, then the generation prompt "<|assistant|>\n". A reply is
// appended to the rendered prompt verbatim, so turn k+1's prompt (history +
// reply + new message) starts with exactly the tokens of turn k's prompt and
// reply, as with a real chat template.
func RenderChat(messages []Message) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>\n")
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// outputWords is the vocabulary of generated text. Each word is one token
// under Tokenize, so a reply's token ids are exactly Tokenize(reply).
var outputWords = []string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as",
	"with", "was", "on", "be", "at", "by", "this", "from", "or", "an",
	"are", "which", "cache", "prefix", "token", "block", "route", "model",
	"replica", "request", "kv", "hit",
}

var outputTokenIDs = func() []int {
	ids := make([]int, len(outputWords))
	for i, w := range outputWords {
		ids[i] = Tokenize(w)[0]
	}
	return ids
}()

// outputWord picks generated token number i for a sequence with the given
// seed: a deterministic function of the prompt, as greedy decoding is.
func outputWord(seed uint64, i int) int {
	x := seed + uint64(i)*0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return int(x % uint64(len(outputWords)))
}

// OutputText is the text of the first n tokens a replica generates for
// prompt (the same on every replica): " w1 w2 ...".
func OutputText(prompt []int, n int) string {
	seed := promptSeed(prompt)
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteByte(' ')
		b.WriteString(outputWords[outputWord(seed, i)])
	}
	return b.String()
}

func promptSeed(prompt []int) uint64 {
	h := uint64(14695981039346656037)
	for _, t := range prompt {
		h ^= uint64(t)
		h *= 1099511628211
	}
	return h
}
