package adsload

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// process is a server under measurement, run as its own process so that
// its memory can be read from /proc.
type process struct {
	name  string
	cmd   *exec.Cmd
	admin string // host:port of its admin endpoints
	done  chan error
}

// startProcess runs bin with args, its output appended to log.
func startProcess(name, admin string, log io.Writer, bin string, args ...string) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, admin: admin, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// stop ends the process with SIGTERM, then SIGKILL after 5 s.
func (p *process) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	return nil
}

// awaitReady polls the admin /readyz until it answers 200, or the
// process exits.
func (p *process) awaitReady(ctx context.Context, timeout time.Duration) error {
	return awaitReadyz(ctx, p.name, p.admin, timeout, func() error {
		select {
		case err := <-p.done:
			return fmt.Errorf("%s exited before it was ready: %v", p.name, err)
		default:
			return nil
		}
	})
}

// awaitReadyz polls http://admin/readyz until it answers 200, alive
// reports an error, or timeout passes.
func awaitReadyz(ctx context.Context, name, admin string, timeout time.Duration, alive func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := alive(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready on %s after %v", name, admin, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// memory is a server's memory at one moment.
type memory struct {
	RSS       float64 // VmRSS, bytes
	HeapInuse float64 // go_memstats_heap_inuse_bytes
}

// memory reads VmRSS and the Go heap in use, after the heap has been
// given a moment to settle.
func (p *process) memory(ctx context.Context) (memory, error) {
	rss, err := vmRSS(p.cmd.Process.Pid)
	if err != nil {
		return memory{}, err
	}
	fams, err := scrape(ctx, "http://"+p.admin+"/metrics")
	if err != nil {
		return memory{}, err
	}
	return memory{RSS: rss, HeapInuse: gauge(fams, "go_memstats_heap_inuse_bytes")}, nil
}

// metric reads one metric's value (summed over its series) from the
// admin /metrics.
func (p *process) metric(ctx context.Context, name string) (float64, error) {
	fams, err := scrape(ctx, "http://"+p.admin+"/metrics")
	if err != nil {
		return 0, err
	}
	return gauge(fams, name), nil
}

// vmRSS reads a process's resident set size from /proc/PID/status.
func vmRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading VmRSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("parsing VmRSS %q: %w", rest, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return fams, nil
}

// gauge sums a family's gauge, counter or untyped values; NaN if absent.
func gauge(fams map[string]*dto.MetricFamily, name string) float64 {
	f, ok := fams[name]
	if !ok {
		return math.NaN()
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		switch {
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// freeAddr returns a loopback address with a port free at the time.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
