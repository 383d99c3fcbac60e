package weights

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The cycle benchmark scrapes 1,000 replicas, each a distinct loopback
// host:port serving a pre-rendered vLLM-like page of ~300 series, and
// parses every page with the built-in vLLM profile, as kvxds does.
//
// Its servers run either in a child process (servers=subprocess), so that
// the process CPU measured is the scraper's alone, or in the benchmark's own
// process (servers=inprocess), where it includes the servers' side.

const (
	benchReplicas   = 1000
	benchServersEnv = "KVXDS_SCRAPE_BENCH_SERVERS"
	benchPageType   = "text/plain; version=0.0.4; charset=utf-8"
)

// benchVLLMPage renders a page shaped like vLLM's (v1 engine) /metrics: process
// and Python metrics, the engine's gauges and counters, and its latency and
// token histograms, all labelled with the model and engine.
func benchVLLMPage() (page []byte, series int) {
	var b bytes.Buffer
	v := 1.0
	val := func() string { v = v*1.37 + 3.1; return strconv.FormatFloat(float64(int64(v*10))/10, 'f', -1, 64) }
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	sample := func(name, labels, value string) {
		if labels != "" {
			labels = "{" + labels + "}"
		}
		fmt.Fprintf(&b, "%s%s %s\n", name, labels, value)
		series++
	}

	for _, f := range []string{"python_gc_objects_collected_total", "python_gc_objects_uncollectable_total", "python_gc_collections_total"} {
		family(f, "counter", "Python garbage collector statistics.")
		for g := range 3 {
			sample(f, fmt.Sprintf(`generation="%d"`, g), val())
		}
	}
	family("python_info", "gauge", "Python platform information")
	sample("python_info", `implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"`, "1.0")
	for _, f := range []string{"process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds", "process_cpu_seconds_total", "process_open_fds", "process_max_fds"} {
		family(f, "gauge", "Process statistics.")
		sample(f, "", val())
	}

	const l = `engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"`
	family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
	sample("vllm:cache_config_info", `block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="29152",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"`, "1.0")
	for _, g := range []struct{ name, help, value string }{
		{"vllm:num_requests_running", "Number of requests in model execution batches.", "17.0"},
		{"vllm:num_requests_waiting", "Number of requests waiting to be processed.", "3.0"},
		{"vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "0.4213"},
	} {
		family(g.name, "gauge", g.help)
		sample(g.name, l, g.value)
	}
	family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.")
	sample("vllm:lora_requests_info", `max_lora="0",running_lora_adapters="",waiting_lora_adapters=""`, "1.7e+09")
	for _, c := range []string{"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"} {
		family(c, "counter", "Cumulative engine counter.")
		sample(c, l, val())
	}
	family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
	for _, r := range []string{"abort", "length", "stop"} {
		sample("vllm:request_success_total", l+`,finished_reason="`+r+`"`, val())
	}

	latency := []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
	tokens := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
	itl := []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	for _, h := range []struct {
		name    string
		buckets []float64
	}{
		{"vllm:iteration_tokens_total", []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}},
		{"vllm:time_to_first_token_seconds", []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}},
		{"vllm:time_per_output_token_seconds", itl},
		{"vllm:inter_token_latency_seconds", itl},
		{"vllm:e2e_request_latency_seconds", latency},
		{"vllm:request_queue_time_seconds", latency},
		{"vllm:request_inference_time_seconds", latency},
		{"vllm:request_prefill_time_seconds", latency},
		{"vllm:request_decode_time_seconds", latency},
		{"vllm:request_prompt_tokens", tokens},
		{"vllm:request_generation_tokens", tokens},
		{"vllm:request_params_max_tokens", tokens},
		{"vllm:request_params_n", []float64{1, 2, 5, 10, 20}},
	} {
		family(h.name, "histogram", "Histogram of "+strings.TrimPrefix(h.name, "vllm:")+".")
		count := 0.0
		for _, ub := range h.buckets {
			count += float64(int64(v) % 97)
			v = v*1.11 + 1
			sample(h.name+"_bucket", l+`,le="`+strconv.FormatFloat(ub, 'f', -1, 64)+`"`, strconv.FormatFloat(count, 'f', 1, 64))
		}
		sample(h.name+"_bucket", l+`,le="+Inf"`, strconv.FormatFloat(count, 'f', 1, 64))
		sample(h.name+"_count", l, strconv.FormatFloat(count, 'f', 1, 64))
		sample(h.name+"_sum", l, val())
	}
	return b.Bytes(), series
}

// benchParseVLLM is what kvxds runs on every page: the built-in vLLM
// profile's ParseSignals.
func benchParseVLLM(body []byte, contentType string) (Signals, error) {
	p, _ := BuiltinProfile("vllm")
	return ParseSignals(p, "", body, contentType)
}

// benchPageHandler serves the pre-rendered page, so the servers' cost is as
// small as net/http allows.
func benchPageHandler(page []byte) http.Handler {
	ct := []string{benchPageType}
	cl := []string{strconv.Itoa(len(page))}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h["Content-Type"] = ct
		h["Content-Length"] = cl
		w.Write(page)
	})
}

// TestScrapeBenchServersHelper is not a test: it is the child process of
// BenchmarkScrapeCycle1000/servers=subprocess. It serves the page on
// benchReplicas loopback listeners, prints their URLs, and exits when its
// standard input closes.
func TestScrapeBenchServersHelper(t *testing.T) {
	if os.Getenv(benchServersEnv) == "" {
		t.Skip("helper process of BenchmarkScrapeCycle1000")
	}
	n, err := strconv.Atoi(os.Getenv(benchServersEnv))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := benchVLLMPage()
	h := benchPageHandler(page)
	w := bufio.NewWriter(os.Stdout)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go (&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
		fmt.Fprintf(w, "http://%s/metrics\n", ln.Addr())
	}
	fmt.Fprintln(w, "READY")
	w.Flush()
	bufio.NewReader(os.Stdin).ReadString(0) // until EOF
}

// benchServerProcess starts the helper; it returns the URLs and the
// child's pid.
func benchServerProcess(b *testing.B, n int) ([]string, int) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestScrapeBenchServersHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", benchServersEnv, n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	var urls []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "READY" {
			return urls, cmd.Process.Pid
		}
		if strings.HasPrefix(line, "http://") {
			urls = append(urls, line)
		}
	}
	b.Fatalf("server process ended before READY (%d URLs)", len(urls))
	return nil, 0
}

func BenchmarkScrapeCycle1000(b *testing.B) {
	page, series := benchVLLMPage()
	if sig, err := benchParseVLLM(page, benchPageType); err != nil || sig.QueueDepth != 3 || sig.KVOccupancy != 0.4213 {
		b.Fatal(sig, err)
	}
	// parse=none is the scraper's own cost: the page is fetched and read
	// but not looked at.
	parseNone := func([]byte, string) (Signals, error) { return Signals{QueueDepth: 3}, nil }

	urls, pid := benchServerProcess(b, benchReplicas)
	if len(urls) != benchReplicas {
		b.Fatalf("%d servers", len(urls))
	}
	b.Run("servers=subprocess/parse=vllm", func(b *testing.B) {
		benchCycles(b, urls, benchParseVLLM, page, series, pid)
	})
	b.Run("servers=subprocess/parse=none", func(b *testing.B) {
		benchCycles(b, urls, parseNone, page, series, pid)
	})
	b.Run("servers=inprocess/parse=vllm", func(b *testing.B) {
		h := benchPageHandler(page)
		urls := make([]string, benchReplicas)
		for i := range urls {
			srv := httptest.NewServer(h)
			b.Cleanup(srv.Close)
			urls[i] = srv.URL + "/metrics"
		}
		benchCycles(b, urls, benchParseVLLM, page, series, 0)
	})
}

// benchCycles runs b.N scrape cycles over urls and reports the process
// CPU per cycle; with serverPid > 0 (servers in that process) it reports
// the servers' CPU too.
func benchCycles(b *testing.B, urls []string, parse func([]byte, string) (Signals, error), page []byte, series, serverPid int) {
	targets := make([]Target, len(urls))
	for i, u := range urls {
		targets[i] = Target{ID: fmt.Sprint("replica-", i), URL: u, Parse: parse}
	}
	// A generous timeout: on a shared 2-core machine a CPU-starved
	// benchmark must not fail on timeouts; it measures CPU.
	s := NewScraper(ScraperOptions{Pool: "bench", Timeout: 30 * time.Second})
	cycle := func() {
		for _, o := range s.Scrape(context.Background(), targets) {
			if o.Err != nil || o.Signals.QueueDepth != 3 {
				b.Fatalf("%s: %v", o.ID, o.Err)
			}
		}
	}
	cycle() // connect once: steady state reuses the connections

	b.ReportAllocs()
	cpu0, srv0 := benchProcessCPU(b), benchChildCPU(serverPid)
	b.ResetTimer()
	for range b.N {
		cycle()
	}
	b.StopTimer()
	cpu := (benchProcessCPU(b) - cpu0).Seconds() / float64(b.N)
	if serverPid > 0 {
		b.ReportMetric(cpu, "cpu-s/cycle")
		if srv := benchChildCPU(serverPid); srv >= 0 && srv0 >= 0 {
			b.ReportMetric((srv-srv0).Seconds()/float64(b.N), "server-cpu-s/cycle")
		}
	} else {
		b.ReportMetric(cpu, "client+server-cpu-s/cycle")
	}
	b.ReportMetric(float64(len(page)), "page-bytes")
	b.ReportMetric(float64(series), "series/page")
}

func benchProcessCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchChildCPU reads a process's user+system CPU from /proc (Linux), or -1.
func benchChildCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line, in clock ticks (USER_HZ, 100).
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * (time.Second / 100)
}

// BenchmarkScrapeCycleParseOnly1000 is the parsing share of a cycle: the
// same page parsed 1,000 times, no network.
func BenchmarkScrapeCycleParseOnly1000(b *testing.B) {
	page, _ := benchVLLMPage()
	b.ReportAllocs()
	cpu0 := benchProcessCPU(b)
	for range b.N {
		for range benchReplicas {
			if _, err := benchParseVLLM(page, benchPageType); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric((benchProcessCPU(b)-cpu0).Seconds()/float64(b.N), "cpu-s/cycle")
}
