package workload

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// TraceBlockTokens is the block size of a Mooncake trace's hash_ids: each
// id names one 512-token block of the prompt.
const TraceBlockTokens = 512

// TraceRecord is one request of a trace in the format Mooncake published
// with its FAST'25 paper (github.com/kvcache-ai/Mooncake,
// FAST25-release/traces): one JSON object per line, with the arrival time
// in milliseconds, the prompt and output lengths in tokens, and the
// remapped hashes of the prompt's 512-token blocks, in order. Requests
// whose hash_ids agree on a prefix share that prefix of their prompts.
type TraceRecord struct {
	Timestamp    int64   `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// ReadTrace parses a JSONL trace, plain or gzip-compressed (recognized by
// the gzip magic bytes, whatever the file is called). Blank lines are
// skipped; every other line must be a record whose hash_ids cover its
// input_length (one id per started block) and whose timestamp does not go
// back.
func ReadTrace(r io.Reader) ([]TraceRecord, error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		return readTraceLines(zr)
	}
	return readTraceLines(br)
}

func readTraceLines(r io.Reader) ([]TraceRecord, error) {
	var out []TraceRecord
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var rec TraceRecord
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		blocks := (rec.InputLength + TraceBlockTokens - 1) / TraceBlockTokens
		switch {
		case rec.InputLength <= 0:
			return nil, fmt.Errorf("line %d: input_length %d is not positive", line, rec.InputLength)
		case rec.OutputLength < 0:
			return nil, fmt.Errorf("line %d: negative output_length %d", line, rec.OutputLength)
		case len(rec.HashIDs) != blocks:
			return nil, fmt.Errorf("line %d: %d hash_ids for %d tokens; want one per %d-token block (%d)",
				line, len(rec.HashIDs), rec.InputLength, TraceBlockTokens, blocks)
		case len(out) > 0 && rec.Timestamp < out[len(out)-1].Timestamp:
			return nil, fmt.Errorf("line %d: timestamp %d goes back (previous %d)", line, rec.Timestamp, out[len(out)-1].Timestamp)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, nil
}

// TraceRequests turns trace records into requests: each hash id becomes a
// deterministic block of TraceBlockTokens pseudo-words (the same words for
// the same id, whatever the request), the last block cut to the record's
// input_length, so that the prompts share exactly what the trace's blocks
// share. Arrival times are the trace's, from its first record, divided by
// speed. Requests carry no Session; the caller decides the hash key.
func TraceRequests(recs []TraceRecord, speed float64) []Request {
	if len(recs) == 0 || !(speed > 0) {
		return nil
	}
	blocks := map[int64]string{}
	block := func(id int64) string {
		if b, ok := blocks[id]; ok {
			return b
		}
		b := Words(rngFor(0, "trace", tagShared, uint64(id)), TraceBlockTokens)
		blocks[id] = b
		return b
	}
	out := make([]Request, len(recs))
	t0 := recs[0].Timestamp
	for i, rec := range recs {
		var b strings.Builder
		left := rec.InputLength
		for j, id := range rec.HashIDs {
			if j > 0 {
				b.WriteByte(' ')
			}
			text := block(id)
			if n := min(left, TraceBlockTokens); n < TraceBlockTokens {
				text = leadingWords(text, n)
			}
			b.WriteString(text)
			left -= TraceBlockTokens
		}
		at := time.Duration(float64(rec.Timestamp-t0) * float64(time.Millisecond) / speed)
		out[i] = Request{Seq: i, At: at, Prompt: b.String(), MaxTokens: max(rec.OutputLength, 1), DependsOn: -1}
	}
	return out
}

// leadingWords returns the first n words of single-space-separated text.
func leadingWords(s string, n int) string {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			if n--; n == 0 {
				return s[:i]
			}
		}
	}
	return s
}
