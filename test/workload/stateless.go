package workload

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// ChatBody returns the OpenAI chat-completions body a client without a
// session id sends for r: the system prompt and the first user message as
// messages of their own, then the rest of the prompt (later turns) as one
// more user message, and max_tokens. Its conversation key (package
// bodykey) is the same for every request of a conversation and its
// branches. r must have Lead set.
func ChatBody(model string, r Request) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []message
	if r.System > 0 {
		msgs = append(msgs, message{"system", r.Prompt[:r.System]})
	}
	msgs = append(msgs, message{"user", strings.TrimPrefix(r.Prompt[r.System:r.Lead], " ")})
	if rest := strings.TrimPrefix(r.Prompt[r.Lead:], " "); rest != "" {
		msgs = append(msgs, message{"user", rest})
	}
	b, _ := json.Marshal(struct {
		Model     string    `json:"model"`
		Messages  []message `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
	}{model, msgs, r.MaxTokens}) // strings and ints: cannot fail
	return b
}

// BranchingWorkload is chat whose conversations branch, as chat apps and
// agents make them. Each conversation (a tree) has a main path of turns
// like chat-apps' (an app's system prompt, then user and assistant turns);
// at one turn k of it, Branches alternative continuations start, all in
// the same way, picked per tree:
//
//   - regenerate: the user asks for another reply to turn k, Branches
//     times one after another: each branch re-sends turn k's prompt, gets
//     its own reply and goes on with its own turns;
//   - edit: the user edits the message of turn k (k ≥ 1) and sends it
//     again: each branch is the history up to reply k−1 and a new message;
//   - sample: a program samples Branches continuations of turn k at once
//     (tree search, best-of-n): each re-sends turn k's prompt at turn k's
//     arrival, then goes on with its own turns.
//
// Every request of a tree re-sends its leading messages (system prompt and
// first user message), and every branch shares the history up to its
// branch point. No request carries a session id (Session ""); Conversation
// is the tree ("tree-N"), Tenant the app ("app-N").
//
// Trees start as a Poisson process at rate / (expected requests per
// tree). Lengths are in tokens; texts of the main path and of each branch
// come from their own streams.
type BranchingWorkload struct {
	// Apps is the number of system prompts; a tree picks one. Default 4.
	Apps int
	// SystemPromptLen is each app's system prompt length. Default
	// uniform 200–500.
	SystemPromptLen UniformInt
	// Turns is the main path's number of turns. Default geometric, mean
	// 4, capped at 12.
	Turns Geometric
	// Branches is the number of alternative continuations. Default
	// uniform 2–4.
	Branches UniformInt
	// BranchTurns is each branch's number of turns. Default uniform 1–3.
	BranchTurns UniformInt
	// UserLen and ReplyLen are as in chat.
	UserLen, ReplyLen LogNormal
	// ThinkTime is the mean time between a reply and the next request of
	// its path (sample branches start with turn k). Default 5s.
	ThinkTime time.Duration
}

// Branching returns the branching-conversations workload with its defaults.
func Branching() *BranchingWorkload {
	return &BranchingWorkload{
		Apps:            4,
		SystemPromptLen: UniformInt{Min: 200, Max: 500},
		Turns:           Geometric{Mean: 4, Max: 12},
		Branches:        UniformInt{Min: 2, Max: 4},
		BranchTurns:     UniformInt{Min: 1, Max: 3},
		UserLen:         LogNormal{Median: 60, Sigma: 1.0, Min: 4, Max: 1024},
		ReplyLen:        LogNormal{Median: 150, Sigma: 0.8, Min: 8, Max: 512},
		ThinkTime:       5 * time.Second,
	}
}

// Name is "branching".
func (w *BranchingWorkload) Name() string { return "branching" }

// How a tree branches.
const (
	branchRegenerate = iota
	branchEdit
	branchSample
)

// pathTurn is one request of a path: its arrival, user message and reply
// lengths.
type pathTurn struct {
	at          time.Duration
	user, reply int
}

// Generate implements [Generator].
func (w *BranchingWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "branching"
	apps := max(w.Apps, 1)
	systems := sharedTexts(seed, name, apps, w.SystemPromptLen.Sample)
	perTree := w.Turns.Expected() + w.Branches.Expected()*w.BranchTurns.Expected()

	var reqs []Request
	arrivals := rngFor(seed, name, tagArrivals, 0)
	poisson(arrivals, rate/perTree, 0, duration, func(i int, start time.Duration) {
		// The whole structure first, from its own stream, so the horizon
		// only cuts it.
		r := rngFor(seed, name, tagSession, uint64(i))
		app := r.IntN(apps)
		n := max(w.Turns.Sample(r), 1)
		main := make([]pathTurn, n)
		at := start
		for k := range main {
			if k > 0 {
				at += expDuration(r, w.ThinkTime)
			}
			main[k] = pathTurn{at: at, user: w.UserLen.Sample(r), reply: w.ReplyLen.Sample(r)}
		}
		point := r.IntN(n)
		how := r.IntN(3)
		if how == branchEdit && point == 0 {
			how = branchRegenerate // an edited first message is another conversation
		}
		branches := make([][]pathTurn, max(w.Branches.Sample(r), 1))
		for b := range branches {
			branches[b] = make([]pathTurn, max(w.BranchTurns.Sample(r), 1))
			for k := range branches[b] {
				branches[b][k] = pathTurn{user: w.UserLen.Sample(r), reply: w.ReplyLen.Sample(r)}
				if k == 0 && how != branchEdit {
					branches[b][k].user = main[point].user // turn k's prompt again
				}
			}
		}

		tree := id("tree-", i)
		system := systems[app]
		emit := func(at time.Duration, prompt string, maxTokens, dep, lead int) int {
			reqs = append(reqs, Request{At: at, Tenant: id("app-", app), Prompt: prompt, MaxTokens: maxTokens,
				DependsOn: dep, Conversation: tree, System: len(system), Lead: lead})
			return len(reqs) - 1
		}

		// The main path, as chat: one string, each turn a prefix of it.
		text := rngFor(seed, name, tagText, uint64(i)<<8)
		var b strings.Builder
		b.WriteString(system)
		ends := make([]int, n)
		replyEnds := make([]int, n)
		for k, t := range main {
			b.WriteByte(' ')
			writeWords(&b, text, t.user)
			ends[k] = b.Len()
			b.WriteByte(' ')
			writeWords(&b, text, t.reply)
			replyEnds[k] = b.Len()
		}
		full := b.String()
		lead := ends[0]
		idx := make([]int, n)
		for k, t := range main {
			dep := -1
			if k > 0 {
				dep = idx[k-1]
			}
			idx[k] = emit(t.at, full[:ends[k]], t.reply, dep, lead)
		}

		// The branches: each its own string from the branch point on.
		prev := idx[point] // regenerations follow one another
		for bi, turns := range branches {
			text := rngFor(seed, name, tagText, uint64(i)<<8|uint64(bi+1))
			var bb strings.Builder
			var at time.Duration
			dep := -1
			switch how {
			case branchRegenerate:
				bb.WriteString(full[:ends[point]])
				at = reqs[prev].At + expDuration(r, w.ThinkTime)
				dep = prev
			case branchEdit:
				bb.WriteString(full[:replyEnds[point-1]])
				bb.WriteByte(' ')
				writeWords(&bb, text, turns[0].user)
				at = main[point].at + expDuration(r, w.ThinkTime)
				dep = idx[point]
			case branchSample:
				bb.WriteString(full[:ends[point]])
				at = main[point].at
				if point > 0 {
					dep = idx[point-1]
				}
			}
			for k, t := range turns {
				if k > 0 {
					bb.WriteByte(' ')
					writeWords(&bb, text, turns[k-1].reply)
					bb.WriteByte(' ')
					writeWords(&bb, text, t.user)
					at += expDuration(r, w.ThinkTime)
				}
				dep = emit(at, bb.String(), t.reply, dep, lead)
				if k == 0 && how == branchRegenerate {
					prev = dep
				}
			}
		}
	})
	return finalize(reqs, duration)
}

// RetrievalWorkload is retrieval-augmented chat over a shared library:
// every conversation opens with one short system prompt (the same for
// all), then a user message carrying one of Docs long documents, which
// many users send (Zipf popularity), followed by the user's own question;
// some users ask follow-ups. A key over the leading messages must tell
// the users of one document apart (by their questions), or the popular
// documents pin their traffic to one replica; an index of prefixes would
// instead see the document shared across users.
//
// Prompt of turn k: system ␣ document ␣ question ␣ reply₀ ␣ user₁ ␣ … ␣
// user_k. No request carries a session id; Conversation is "rag-N",
// Tenant the document ("doc-N").
type RetrievalWorkload struct {
	// Docs is the number of documents. Default 32.
	Docs int
	// S is the Zipf exponent of their popularity. Default 1.0 (the most
	// popular document opens about 25% of conversations).
	S float64
	// DocLen is each document's length. Default uniform 2,000–6,000.
	DocLen UniformInt
	// SystemPromptLen is the shared system prompt's length. Default 100.
	SystemPromptLen int
	// QuestionLen is the first question's length. Default log-normal,
	// median 30, σ 0.6, clamped to 4–200.
	QuestionLen LogNormal
	// Turns is the number of turns per conversation. Default geometric,
	// mean 2, capped at 6.
	Turns Geometric
	// UserLen and ReplyLen are the follow-ups' and replies' lengths.
	UserLen, ReplyLen LogNormal
	// ThinkTime is the mean time between a reply and the next turn.
	// Default 5s.
	ThinkTime time.Duration
}

// Retrieval returns the retrieval workload with its defaults.
func Retrieval() *RetrievalWorkload {
	return &RetrievalWorkload{
		Docs:            32,
		S:               1.0,
		DocLen:          UniformInt{Min: 2000, Max: 6000},
		SystemPromptLen: 100,
		QuestionLen:     LogNormal{Median: 30, Sigma: 0.6, Min: 4, Max: 200},
		Turns:           Geometric{Mean: 2, Max: 6},
		UserLen:         LogNormal{Median: 30, Sigma: 0.8, Min: 4, Max: 300},
		ReplyLen:        LogNormal{Median: 150, Sigma: 0.8, Min: 8, Max: 512},
		ThinkTime:       5 * time.Second,
	}
}

// Name is "retrieval".
func (w *RetrievalWorkload) Name() string { return "retrieval" }

// Generate implements [Generator].
func (w *RetrievalWorkload) Generate(seed uint64, rate float64, duration time.Duration) []Request {
	if !validArgs(rate, duration) {
		return nil
	}
	const name = "retrieval"
	docs := max(w.Docs, 1)
	system := sharedTexts(seed, name, 1, func(*rand.Rand) int { return w.SystemPromptLen })[0]
	// Documents after the system prompt in the shared streams.
	library := make([]string, docs)
	for d := range library {
		r := rngFor(seed, name, tagShared, uint64(d+1))
		library[d] = Words(r, max(w.DocLen.Sample(r), 1))
	}
	cum := make([]float64, docs)
	sum := 0.0
	for d := range cum {
		sum += math.Pow(float64(d+1), -w.S)
		cum[d] = sum
	}

	var reqs []Request
	arrivals := rngFor(seed, name, tagArrivals, 0)
	poisson(arrivals, rate/w.Turns.Expected(), 0, duration, func(i int, start time.Duration) {
		r := rngFor(seed, name, tagSession, uint64(i))
		doc := min(sort.SearchFloat64s(cum, r.Float64()*sum), docs-1)
		n := max(w.Turns.Sample(r), 1)
		turns := make([]pathTurn, n)
		at := start
		for k := range turns {
			if k > 0 {
				at += expDuration(r, w.ThinkTime)
			}
			user := w.UserLen.Sample(r)
			if k == 0 {
				user = w.QuestionLen.Sample(r)
			}
			turns[k] = pathTurn{at: at, user: user, reply: w.ReplyLen.Sample(r)}
		}
		text := rngFor(seed, name, tagText, uint64(i))
		var b strings.Builder
		b.WriteString(system)
		b.WriteByte(' ')
		b.WriteString(library[doc])
		ends := make([]int, n)
		for k, t := range turns {
			if k > 0 {
				b.WriteByte(' ')
				writeWords(&b, text, turns[k-1].reply)
			}
			b.WriteByte(' ')
			writeWords(&b, text, t.user)
			ends[k] = b.Len()
		}
		full := b.String()
		conv := id("rag-", i)
		first := len(reqs)
		for k, t := range turns {
			dep := -1
			if k > 0 {
				dep = first + k - 1
			}
			reqs = append(reqs, Request{At: t.at, Tenant: id("doc-", doc), Prompt: full[:ends[k]], MaxTokens: t.reply,
				DependsOn: dep, Conversation: conv, System: len(system), Lead: ends[0]})
		}
	})
	return finalize(reqs, duration)
}
