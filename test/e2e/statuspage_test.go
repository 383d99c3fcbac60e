package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvxds/kvxds/test/sim"
)

// browserNames are the names Chromium goes by.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findBrowser returns Chromium's path. Without one the test is skipped,
// or fails if KVXDS_REQUIRE_BROWSER=1 (as in CI).
func findBrowser(t *testing.T) string {
	t.Helper()
	for _, name := range browserNames {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	msg := fmt.Sprintf("no headless browser: none of %s is on PATH (Debian: apt-get install -y chromium)", strings.Join(browserNames, ", "))
	if os.Getenv("KVXDS_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + "; KVXDS_REQUIRE_BROWSER=1 requires one")
	}
	t.Skip(msg)
	return ""
}

// newBrowser starts a headless Chromium for the test; its context ends
// with ctx.
func newBrowser(t *testing.T, ctx context.Context, width, height int) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findBrowser(t)),
		chromedp.WindowSize(width, height),
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root in its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return bctx
}

// testOutDir is where a test leaves files for review: $KVXDS_TEST_OUT if
// set, else the test's temporary directory.
func testOutDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("KVXDS_TEST_OUT"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// pageRow is a replica's row as the browser shows it.
type pageRow struct {
	ID     string `json:"id"`
	Health string `json:"health"`
	State  string `json:"state"` // the visible state text
	Shown  bool   `json:"shown"`
}

// readPage loads url and returns the replica rows and the text of every
// data plane's last NACK, by node id.
func readPage(ctx context.Context, url string) ([]pageRow, map[string]string, error) {
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		return nil, nil, fmt.Errorf("loading %s: %w", url, err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]pageRow](`Array.from(document.querySelectorAll("tr[data-replica]")).map(r => ({
		id: r.dataset.replica, health: r.dataset.health,
		state: r.querySelector(".state").innerText, shown: r.getClientRects().length > 0}))`))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the replicas of %s: %w", url, err)
	}
	nacks, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries(Array.from(document.querySelectorAll("tr[data-node]")).map(r =>
		[r.dataset.node, (r.querySelector(".nack-message") || {innerText: ""}).innerText]))`))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the data planes of %s: %w", url, err)
	}
	return rows, nacks, nil
}

// adsClient is a raw ADS stream of an Envoy-like node that asks for
// clusters and answers the first response with an ACK, or with a NACK
// carrying nack when it is set.
func adsClient(t *testing.T, ctx context.Context, xdsAddr, node, nack string) {
	t.Helper()
	cc, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("%s: ADS stream: %v", node, err)
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node, UserAgentName: "envoy"}, TypeUrl: resourcev3.ClusterType}); err != nil {
		t.Fatalf("%s: %v", node, err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("%s: %v", node, err)
	}
	next := &discovery.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
	if nack != "" {
		next.VersionInfo = "" // a NACK names the last version it accepted: none
		next.ErrorDetail = &rpcstatus.Status{Code: 3, Message: nack}
	}
	if err := stream.Send(next); err != nil {
		t.Fatalf("%s: %v", node, err)
	}
}

// complete sends one completion straight to a simulated replica and waits
// for it (or for ctx).
func complete(ctx context.Context, r *sim.Replica, prompt string, maxTokens int) error {
	body, err := json.Marshal(map[string]any{"model": r.Config().Model, "prompt": prompt, "max_tokens": maxTokens})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.Addr()+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("completion on %s: %s", r.ID(), resp.Status)
	}
	return nil
}

// The status page in a real browser, served by a real kvxds scraping
// simulated vLLM replicas: every replica is listed with its state, one
// whose queue is driven up shows as saturated within two scrape
// intervals, and a data plane that rejects a configuration shows the
// error it sent. A screenshot is left for review.
func TestStatusPageInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	browser := newBrowser(t, ctx, 1280, 900)

	// MaxRunning 2: a burst of long requests queues on the engine.
	const replicas, maxQueue = 4, 6
	reps, err := sim.StartFleet(replicas, sim.Config{MaxRunning: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range reps {
			r.Close()
		}
	})
	const interval = 500 * time.Millisecond
	path, xdsAddr, adminAddr := policyFile(t)
	var eps []string
	for _, r := range reps {
		eps = append(eps, fmt.Sprintf("    endpoint %q { hash_key = %q }\n", r.Addr(), r.ID()))
	}
	writeAtomic(t, path, fmt.Sprintf(`xds   { address = %q }
admin { address = %q }

pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
  static {
%s  }
  metrics {
    engine      = "vllm"
    interval    = %q
    timeout     = "400ms"
    stale_after = "5s"
  }
  escape {
    max_queue_depth    = %d
    resume_queue_depth = 2
    hold               = "2s"
  }
}
`, xdsAddr, adminAddr, strings.Join(eps, ""), interval.String(), maxQueue))
	k := startInProcess(t, path, xdsAddr, adminAddr)
	defer k.stop()

	// Some traffic on every replica, a prompt repeated so that it hits
	// the prefix cache: hit rates and TTFT for the page.
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Go(func() {
			prompt := strings.Repeat(fmt.Sprintf("conversation %d turn ", i), 40)
			for range 3 {
				if err := complete(ctx, r, prompt, 4); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	adsClient(t, ctx, xdsAddr, "envoy-ok", "")
	const nackMessage = `cluster "chat": unknown field "kvxds_test"`
	adsClient(t, ctx, xdsAddr, "envoy-nack", nackMessage)

	pageURL := "http://" + adminAddr + "/?refresh=0"
	var rows []pageRow
	var nacks map[string]string
	eventually(t, "every replica scraped and both data planes on the page", func() bool {
		rows, nacks, err = readPage(browser, pageURL)
		if err != nil {
			t.Fatal(err)
		}
		return len(rows) == replicas && len(nacks) == 2 && metric(t, adminAddr, "kvxds_scrapes_total") >= 2*replicas
	})
	want := map[string]bool{}
	for _, r := range reps {
		want[r.ID()] = true
	}
	for _, row := range rows {
		if !want[row.ID] || !row.Shown || row.Health != "serving" || row.State != row.Health {
			t.Errorf("row %+v: want a visible serving row of each replica", row)
		}
		delete(want, row.ID)
	}
	if len(want) > 0 {
		t.Errorf("replicas missing from the page: %v", want)
	}
	if got := nacks["envoy-nack"]; got != nackMessage {
		t.Errorf("the NACKing data plane shows %q, want %q", got, nackMessage)
	}
	if got, ok := nacks["envoy-ok"]; !ok || got != "" {
		t.Errorf("the ACKing data plane shows a NACK %q (listed: %v)", got, ok)
	}

	// Drive one replica's queue past max_queue_depth: long requests, two
	// running at a time.
	hot := reps[2]
	burst, stopBurst := context.WithCancel(ctx)
	defer stopBurst()
	for i := range maxQueue + 4 {
		go complete(burst, hot, fmt.Sprintf("burst %d", i), 20000)
	}
	for hot.Stats().Waiting < maxQueue {
		if ctx.Err() != nil {
			t.Fatal("the burst never queued on the engine")
		}
		time.Sleep(10 * time.Millisecond)
	}
	queued := time.Now()
	var load time.Duration
	for {
		start := time.Now()
		rows, _, err = readPage(browser, pageURL)
		if err != nil {
			t.Fatal(err)
		}
		load = time.Since(start)
		if len(rows) > 0 && rows[0].ID == hot.ID() && rows[0].Health == "saturated" && rows[0].State == "saturated" {
			break
		}
		if time.Since(queued) > 10*interval {
			t.Fatalf("the page did not show %s saturated after %v: %+v", hot.ID(), time.Since(queued), rows)
		}
	}
	shown := time.Since(queued)
	t.Logf("%s saturated on the page %v after its queue passed %d (scrape interval %v, one page load %v)", hot.ID(), shown, maxQueue, interval, load)
	// The page is read by polling: allow one load beyond two intervals.
	if shown > 2*interval+load {
		t.Errorf("%v from the queue passing the threshold to the page showing it, more than two scrape intervals (%v) and one page load", shown, 2*interval)
	}

	if err := chromedp.Do(browser, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(testOutDir(t), "status-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
