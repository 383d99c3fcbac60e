package workload

import (
	"bytes"
	"compress/gzip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReadTraceSample(t *testing.T) {
	f, err := os.Open("../bench/testdata/mooncake_conversation_trace.sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 50 {
		t.Fatalf("%d records", len(recs))
	}
	// The conversation trace's trap: every request starts with block 0.
	for i, r := range recs {
		if r.HashIDs[0] != 0 {
			t.Fatalf("record %d starts with block %d", i, r.HashIDs[0])
		}
	}
	reqs := TraceRequests(recs, 2)
	for i, r := range reqs {
		if got := strings.Count(r.Prompt, " ") + 1; got != recs[i].InputLength {
			t.Errorf("request %d: %d tokens, want %d", i, got, recs[i].InputLength)
		}
		if want := time.Duration(recs[i].Timestamp-recs[0].Timestamp) * time.Millisecond / 2; r.At != want {
			t.Errorf("request %d at %v, want %v", i, r.At, want)
		}
	}
}

func TestTraceRequestsSharing(t *testing.T) {
	recs := []TraceRecord{
		{Timestamp: 0, InputLength: 1024, OutputLength: 3, HashIDs: []int64{7, 8}},
		{Timestamp: 10, InputLength: 1100, OutputLength: 0, HashIDs: []int64{7, 8, 9}},
		{Timestamp: 20, InputLength: 600, OutputLength: 5, HashIDs: []int64{7, 10}},
		{Timestamp: 30, InputLength: 700, OutputLength: 5, HashIDs: []int64{7, 10}},
	}
	r := TraceRequests(recs, 1)
	if !strings.HasPrefix(r[1].Prompt, r[0].Prompt+" ") {
		t.Error("request 1 does not extend request 0's blocks")
	}
	words := func(s string) []string { return strings.Split(s, " ") }
	a, c := words(r[0].Prompt), words(r[2].Prompt)
	if strings.Join(a[:512], " ") != strings.Join(c[:512], " ") || a[512] == c[512] {
		t.Error("requests 0 and 2 should share exactly their first block")
	}
	if !strings.HasPrefix(r[3].Prompt, r[2].Prompt) || len(words(r[3].Prompt)) != 700 {
		t.Error("a partial last block should be a prefix of the same block cut longer")
	}
	if r[1].MaxTokens != 1 || r[1].DependsOn != -1 {
		t.Errorf("request 1: %+v", r[1])
	}
}

func TestReadTraceErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"timestamp":0,"input_length":600,"output_length":1,"hash_ids":[1]}`, "1 hash_ids"},
		{`{"timestamp":5,"input_length":1,"output_length":1,"hash_ids":[1]}` + "\n" + `{"timestamp":4,"input_length":1,"output_length":1,"hash_ids":[1]}`, "goes back"},
		{`{"timestamp":0,"input_length":0,"output_length":1,"hash_ids":[]}`, "not positive"},
		{`{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[1],"extra":1}`, "unknown field"},
		{`not json`, "line 1"},
	} {
		if _, err := ReadTrace(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadTrace(%s) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func readTraceFile(t *testing.T, path string) []TraceRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestReadTraceConversation reads the compressed first 21 minutes of the
// conversation trace: it begins with the sample, and its conversations
// come back, so blocks other than block 0 repeat.
func TestReadTraceConversation(t *testing.T) {
	recs := readTraceFile(t, "../bench/testdata/mooncake_conversation_trace.jsonl.gz")
	if len(recs) != 3894 || recs[len(recs)-1].Timestamp != 1265999 {
		t.Fatalf("%d records up to %d ms, want 3894 up to 1265999 ms", len(recs), recs[len(recs)-1].Timestamp)
	}
	sample := readTraceFile(t, "../bench/testdata/mooncake_conversation_trace.sample.jsonl")
	if !reflect.DeepEqual(recs[:len(sample)], sample) {
		t.Error("the trace does not begin with the sample")
	}
	seen := map[int64]bool{}
	later := 0 // requests whose second block an earlier request had
	for _, r := range recs {
		if len(r.HashIDs) > 1 && seen[r.HashIDs[1]] {
			later++
		}
		for _, id := range r.HashIDs {
			seen[id] = true
		}
	}
	if later < 1000 {
		t.Errorf("%d requests continue an earlier prompt past block 0, want at least 1000", later)
	}
}

func TestReadTraceGzip(t *testing.T) {
	const plain = `{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}
{"timestamp": 3000, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}
`
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write([]byte(plain)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	want, err := ReadTrace(strings.NewReader(plain))
	if err != nil || len(want) != 2 {
		t.Fatalf("plain: %v, %d records", err, len(want))
	}
	got, err := ReadTrace(bytes.NewReader(z.Bytes()))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("gzip: %v, %+v, want %+v", err, got, want)
	}
	if _, err := ReadTrace(bytes.NewReader(z.Bytes()[:z.Len()-6])); err == nil {
		t.Error("a truncated gzip stream was accepted")
	}
	if _, err := ReadTrace(bytes.NewReader([]byte{0x1f, 0x8b, 0})); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("a broken gzip header: %v, want a gzip error", err)
	}
}
