//go:build unix

package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReplicaGRPCStream measures whole-process CPU per request through
// a real replica over loopback gRPC: tokenizing a 2,176-word prompt (2,048
// shared by a group), scheduling, and streaming 64 tokens, one message
// each. The client runs in the same process, so cpu-us/req is an upper
// bound on the simulator's share. TimeScale is huge so the engine never
// sleeps: this is the CPU-bound cost, not a latency measurement.
func BenchmarkReplicaGRPCStream(b *testing.B) {
	r, err := Start(Config{TimeScale: 1e6}, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	client := testpb.NewTestServiceClient(dialGRPC(b, r.Addr()))
	shared := make([]string, 16)
	for g := range shared {
		shared[g] = strings.Repeat(fmt.Sprintf("group%d system prompt words ", g), 512)
	}
	const workers = 32
	var wg sync.WaitGroup
	jobs := make(chan int)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, wall0 := cpuTime(), time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				body, _ := json.Marshal(GenerateRequest{Prompt: shared[i%16] + longText(128), MaxTokens: 64})
				stream, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}})
				if err != nil {
					b.Error(err)
					return
				}
				for {
					if _, err := stream.Recv(); err == io.EOF {
						break
					} else if err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	for i := 0; i < b.N; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	cpu, wall := cpuTime()-cpu0, time.Since(wall0)
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/req")
	b.ReportMetric(float64(b.N)/wall.Seconds(), "req/s")
	b.ReportMetric(r.Stats().HitRate(), "hit-rate")
}

func TestIdleReplicasUseNoCPU(t *testing.T) {
	fleet, err := StartFleet(8, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range fleet {
			r.Close()
		}
	}()
	time.Sleep(50 * time.Millisecond) // let start-up settle
	cpu0 := cpuTime()
	time.Sleep(300 * time.Millisecond)
	if used := cpuTime() - cpu0; used > 30*time.Millisecond {
		t.Errorf("8 idle replicas used %v of CPU in 300ms", used)
	}
}
