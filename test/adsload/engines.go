package adsload

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvxds/kvxds/test/sim"
)

// Engines are simulated vLLM replicas on loopback whose metrics pages
// kvxds scrapes. One request runs at a time on each (MaxRunning 1), so
// requests sent to a replica wait in its queue
// (vllm:num_requests_waiting) until they are cancelled.
type Engines struct {
	reps   []*sim.Replica
	client *http.Client

	mu      sync.Mutex
	cancel  context.CancelFunc
	driven  int // the replica whose queue is driven
	pending sync.WaitGroup
}

// maxTokens keeps a queued request busy far longer than any change lasts.
const maxTokens = 20000

// StartEngines starts n replicas on 127.0.0.1.
func StartEngines(n int) (*Engines, error) {
	reps, err := sim.StartFleet(n, sim.Config{MaxRunning: 1, KVBlocks: 2048})
	if err != nil {
		return nil, fmt.Errorf("starting %d simulated engines: %w", n, err)
	}
	return &Engines{reps: reps, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}, nil
}

// Addrs are the replicas' host:port addresses.
func (e *Engines) Addrs() []string {
	out := make([]string, len(e.reps))
	for i, r := range e.reps {
		out[i] = r.Addr()
	}
	return out
}

// Close cancels the queued requests and stops every replica.
func (e *Engines) Close() {
	e.Release(context.Background())
	for _, r := range e.reps {
		r.Close()
	}
}

// Queue sends queue+1 long requests to replica i (one runs, queue wait)
// and returns the time its metrics page first showed the queue.
func (e *Engines) Queue(ctx context.Context, i, queue int) (time.Time, error) {
	e.mu.Lock()
	if e.cancel != nil {
		e.mu.Unlock()
		return time.Time{}, errors.New("a queue is already driven; release it first")
	}
	reqCtx, cancel := context.WithCancel(context.Background())
	e.cancel, e.driven = cancel, i
	e.mu.Unlock()
	url := "http://" + e.reps[i].Addr()
	body := fmt.Sprintf(`{"model":%q,"prompt":"load generator request","max_tokens":%d}`, e.reps[i].Config().Model, maxTokens)
	for range queue + 1 {
		e.pending.Add(1)
		go func() {
			defer e.pending.Done()
			req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			if resp, err := e.client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	return e.await(ctx, i, func(waiting float64) bool { return waiting >= float64(queue) })
}

// Release cancels the requests Queue sent and returns the time the
// replica's page first showed an empty queue.
func (e *Engines) Release(ctx context.Context) (time.Time, error) {
	e.mu.Lock()
	cancel, i := e.cancel, e.driven
	e.cancel = nil
	e.mu.Unlock()
	if cancel == nil {
		return time.Now(), nil
	}
	cancel()
	e.pending.Wait()
	return e.await(ctx, i, func(waiting float64) bool { return waiting == 0 })
}

// await polls replica i's metrics page until ok(waiting) and returns the
// time the page was requested.
func (e *Engines) await(ctx context.Context, i int, ok func(float64) bool) (time.Time, error) {
	url := "http://" + e.reps[i].Addr() + "/metrics"
	deadline := time.Now().Add(10 * time.Second)
	for {
		at := time.Now()
		w, err := e.waiting(ctx, url)
		if err != nil {
			return time.Time{}, err
		}
		if ok(w) {
			return at, nil
		}
		if at.After(deadline) {
			return time.Time{}, fmt.Errorf("%s: queue stuck at %v", url, w)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waiting reads vllm:num_requests_waiting from a metrics page.
func (e *Engines) waiting(ctx context.Context, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", url, err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", url, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(page))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, sim.MetricWaiting+"{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("%s: no %s", url, sim.MetricWaiting)
}
