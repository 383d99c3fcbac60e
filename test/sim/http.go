package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTP headers a replica adds to OpenAI API responses. For a streamed
// response they are sent with the first token, when all are known.
const (
	HeaderReplicaID    = "X-Replica-Id"
	HeaderPromptTokens = "X-Prompt-Tokens"
	HeaderCachedTokens = "X-Cached-Tokens"
	HeaderTTFT         = "X-Ttft-Seconds" // simulated seconds
)

// defaultMaxTokens is used when a request sets neither max_tokens nor
// max_completion_tokens: the OpenAI completions default (vLLM's too). vLLM
// lets chat run to the context limit instead; 16 keeps unbounded runs out.
const defaultMaxTokens = 16

// openAIRequest is the subset of the OpenAI completions and chat request
// bodies the replica understands.
type openAIRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chatMessage accepts content as a string or as an array of text parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func (m chatMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", errors.New("message content must be a string or an array of text parts")
	}
	var out string
	for _, p := range parts {
		if p.Type == "text" {
			out += p.Text
		}
	}
	return out, nil
}

func renderMessages(msgs []chatMessage) ([]int, error) {
	if len(msgs) == 0 {
		return nil, errors.New("messages must not be empty")
	}
	ms := make([]Message, len(msgs))
	for i, m := range msgs {
		text, err := m.text()
		if err != nil {
			return nil, err
		}
		ms[i] = Message{Role: m.Role, Content: text}
	}
	return Tokenize(RenderChat(ms)), nil
}

// promptTokens accepts a string, a one-element array of strings, or an
// array of token ids.
func promptTokens(raw json.RawMessage) ([]int, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return Tokenize(s), nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		if len(ss) != 1 {
			return nil, errors.New("exactly one prompt per request is supported")
		}
		return Tokenize(ss[0]), nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil {
		for _, id := range ids {
			if id < 0 || id >= VocabSize {
				return nil, fmt.Errorf("token id %d out of range [0, %d)", id, VocabSize)
			}
		}
		return ids, nil
	}
	return nil, errors.New("prompt must be a string, an array with one string, or an array of token ids")
}

func (q *openAIRequest) maxTokens() int {
	switch {
	case q.MaxTokens != nil:
		return *q.MaxTokens
	case q.MaxCompletionTokens != nil:
		return *q.MaxCompletionTokens
	}
	return defaultMaxTokens
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func makeUsage(res result, completion int) *usage {
	u := &usage{PromptTokens: res.PromptTokens, CompletionTokens: completion, TotalTokens: res.PromptTokens + completion}
	u.PromptTokensDetails.CachedTokens = res.CachedTokens
	return u
}

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	var e apiError
	e.Error.Message, e.Error.Code = msg, code
	e.Error.Type = http.StatusText(code)
	if code == http.StatusBadRequest {
		e.Error.Type = "BadRequestError"
	} else if code == http.StatusNotFound {
		e.Error.Type = "NotFoundError"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(e)
}

func (r *Replica) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, req *http.Request) { r.serveOpenAI(w, req, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, req *http.Request) { r.serveOpenAI(w, req, true) })
	mux.HandleFunc("GET /v1/models", r.serveModels)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.m.reg, promhttp.HandlerOpts{}))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set(HeaderReplicaID, r.cfg.ID)
		if r.cfg.Role == RolePrefill {
			w.Header().Set(ReplicaAddrHeader, r.Addr())
		}
		mux.ServeHTTP(w, req)
	})
}

func (r *Replica) serveModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		Root        string `json:"root"`
		MaxModelLen int    `json:"max_model_len"`
	}
	resp := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{{
		ID: r.cfg.Model, Object: "model", Created: r.wall0.Unix(), OwnedBy: "vllm", Root: r.cfg.Model,
		MaxModelLen: r.cfg.KVBlocks * r.cfg.BlockSize,
	}}}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func (r *Replica) serveOpenAI(w http.ResponseWriter, req *http.Request, chat bool) {
	var body openAIRequest
	// A decode replica told to prefill elsewhere keeps the body as sent,
	// to send it there.
	var prefiller string
	var raw bytes.Buffer
	src := io.Reader(http.MaxBytesReader(w, req.Body, 64<<20))
	if r.cfg.Role == RoleDecode {
		if prefiller = prefillerOf(req.Header.Values(PrefillerHeader)); prefiller != "" {
			src = io.TeeReader(src, &raw)
		}
	}
	dec := json.NewDecoder(src)
	if err := dec.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	// The model field names the base model or a LoRA adapter (vLLM serves
	// adapters under their own names); empty is the base model.
	model, adapter := r.cfg.Model, ""
	if body.Model != "" && body.Model != r.cfg.Model {
		model, adapter = body.Model, body.Model
	}
	var prompt []int
	var err error
	if chat {
		prompt, err = renderMessages(body.Messages)
	} else if len(body.Prompt) == 0 {
		err = errors.New("prompt is required")
	} else {
		prompt, err = promptTokens(body.Prompt)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	call := r.httpPrefill(req.URL.Path, raw.Bytes(), prefiller)
	if r.cfg.Role == RoleDecode {
		if from := prefillerOf(req.Header.Values(KVFromHeader)); from != "" {
			prefiller, call = from, pulled(from)
		}
	}
	q, err := r.generate(req.Context(), prompt, body.maxTokens(), adapter, prefiller, call)
	if err != nil {
		if req.Context().Err() != nil {
			return // the client went away during a remote prefill
		}
		code := http.StatusBadRequest
		if errors.Is(err, errClosed) {
			code = http.StatusServiceUnavailable
		}
		writeError(w, code, err.Error())
		return
	}

	id := fmt.Sprintf("cmpl-%s-%d", r.cfg.ID, r.reqSeq.Add(1))
	object := "text_completion"
	if chat {
		id = "chat" + id
		object = "chat.completion"
	}
	created := time.Now().Unix()
	h := w.Header()
	setResultHeaders := func(res result) {
		h.Set(HeaderPromptTokens, strconv.Itoa(res.PromptTokens))
		h.Set(HeaderCachedTokens, strconv.Itoa(res.CachedTokens))
		h.Set(HeaderTTFT, strconv.FormatFloat(res.TTFT, 'f', 6, 64))
		if r.cfg.Role == RoleDecode {
			res.PD.setHeaders(h)
		}
	}

	if !body.Stream {
		n := 0
		var text []byte
		res, err := r.follow(req.Context(), q, func(words []uint8, _ result) error {
			for _, wd := range words {
				text = append(text, ' ')
				text = append(text, outputWords[wd]...)
			}
			n += len(words)
			return nil
		})
		if err != nil {
			if req.Context().Err() == nil {
				writeError(w, http.StatusServiceUnavailable, err.Error())
			}
			return
		}
		choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": res.Reason, "stop_reason": nil}
		if chat {
			object = "chat.completion"
			choice["message"] = map[string]any{"role": "assistant", "content": string(text)}
		} else {
			choice["text"] = string(text)
		}
		setResultHeaders(res)
		h.Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": id, "object": object, "created": created, "model": model,
			"choices": []any{choice}, "usage": makeUsage(res, n),
		})
		return
	}

	// Server-sent events: one chunk per token, the finish reason on the
	// last, an optional usage chunk, then [DONE].
	if chat {
		object = "chat.completion.chunk"
	}
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	sendChunk := func(v any) error {
		if _, err := w.Write([]byte("data: ")); err != nil {
			return err
		}
		if err := enc.Encode(v); err != nil { // Encode ends with "\n"
			return err
		}
		_, err := w.Write([]byte("\n"))
		return err
	}
	// Token chunks are appended by hand, byte for byte what encoding/json
	// writes for them (map keys sorted): they are most of what a replica
	// sends, and reflection over maps cost more than the rest of a
	// request's handling.
	tail := jsonTail(created, id, model, object)
	var buf []byte
	appendChunk := func(b []byte, text string, role, finish bool) []byte {
		return appendChunk(b, chat, text, role, finish, tail)
	}
	n := 0
	res, err := r.follow(req.Context(), q, func(words []uint8, res result) error {
		buf = buf[:0]
		if n == 0 {
			setResultHeaders(res)
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			if chat {
				buf = appendChunk(buf, "", true, false)
			}
		}
		for _, wd := range words {
			n++
			buf = appendChunk(buf, " "+outputWords[wd], false, n == q.maxTokens)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	if err != nil {
		if req.Context().Err() != nil {
			return
		}
		if n == 0 {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		var e apiError
		e.Error.Message, e.Error.Type, e.Error.Code = err.Error(), "ServiceUnavailable", http.StatusServiceUnavailable
		sendChunk(e)
	} else if body.StreamOptions != nil && body.StreamOptions.IncludeUsage {
		sendChunk(map[string]any{"id": id, "object": object, "created": created, "model": model,
			"choices": []any{}, "usage": makeUsage(res, n)})
	}
	w.Write([]byte("data: [DONE]\n\n"))
	if flusher != nil {
		flusher.Flush()
	}
}

// appendChunk appends one streamed token chunk as a server-sent event,
// byte for byte what encoding/json writes for it (map keys sorted): token
// chunks are most of what a replica sends, and reflection over maps cost
// more than the rest of a request's handling. tail is jsonTail's.
func appendChunk(b []byte, chat bool, text string, role, finish bool, tail []byte) []byte {
	b = append(b, `data: {"choices":[{`...)
	if chat {
		b = append(b, `"delta":{"content":`...)
		b = appendJSONString(b, text)
		if role {
			b = append(b, `,"role":"assistant"`...)
		}
		b = append(b, '}', ',')
	}
	if finish {
		b = append(b, `"finish_reason":"`+finishLength+`",`...)
	} else {
		b = append(b, `"finish_reason":null,`...)
	}
	b = append(b, `"index":0,"logprobs":null`...)
	if !chat {
		b = append(b, `,"text":`...)
		b = appendJSONString(b, text)
	}
	b = append(b, `}],`...)
	b = append(b, tail...)
	return append(b, "\n\n"...)
}

// jsonTail is the end of a streamed chunk after its choices: the
// remaining keys in encoding/json's (sorted) order.
func jsonTail(created int64, id, model, object string) []byte {
	b := []byte(`"created":`)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"object":`...)
	b = appendJSONString(b, object)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json encodes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
