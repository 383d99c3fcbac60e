package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesReplicasUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--replicas", "3", "--kv-blocks", "1000", "--time-scale", "100"}, pw, &stderr)
		pw.Close()
	}()

	sc := bufio.NewScanner(pr)
	for i := 0; i < 3; i++ {
		if !sc.Scan() {
			t.Fatalf("output ended after %d lines; stderr:\n%s", i, stderr.String())
		}
		var id, addr string
		if _, err := fmt.Sscan(sc.Text(), &id, &addr); err != nil || id != fmt.Sprintf("replica-%d", i) || !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("line %q", sc.Text())
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `num_gpu_blocks="1000"`) {
			t.Errorf("%s: --kv-blocks not applied", id)
		}
	}
	go io.Copy(io.Discard, pr)
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancellation")
	}
	if !strings.Contains(stderr.String(), "replica done") {
		t.Errorf("no final counters logged:\n%s", stderr.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--replicas", "0"}, {"extra"}, {"--nope"}, {"--time-scale", "-1"}} {
		var out, errb syncBuffer
		if code := run(context.Background(), args, &out, &errb); code == 0 {
			t.Errorf("%v: exit 0", args)
		}
	}
}
