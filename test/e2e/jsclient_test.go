package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvxds/kvxds/xds/bootstrap"
)

// client is a proxyless gRPC data plane of pool "chat".
type client interface {
	name() string
	// callMany sends one call per entry of mds (metadata pairs; nil =
	// none) and returns the serving replica ids, in order; a failed call
	// has id "" and its error.
	callMany(mds [][]string) ([]string, []error)
}

const (
	// callDeadline bounds each call; calls wait for ready until then.
	callDeadline = 10 * time.Second
	// callConcurrency bounds the calls in flight per callMany.
	callConcurrency = 32
)

// goClient is grpc-go's xDS client.
type goClient struct{ cl testgrpc.TestServiceClient }

func newGoClient(t *testing.T, xdsAddr string) client {
	t.Helper()
	return &goClient{cl: newClient(t, xdsAddr)}
}

func (*goClient) name() string { return "grpc-go" }

func (c *goClient) callMany(mds [][]string) ([]string, []error) {
	ids, errs := make([]string, len(mds)), make([]error, len(mds))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(callConcurrency, len(mds)) {
		wg.Go(func() {
			for i := range next {
				ids[i], errs[i] = c.call(mds[i])
			}
		})
	}
	for i := range mds {
		next <- i
	}
	close(next)
	wg.Wait()
	return ids, errs
}

func (c *goClient) call(md []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	resp, err := c.cl.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return resp.GetServerId(), nil
}

// jsClient is grpc-js (with @grpc/grpc-js-xds) in a node process that runs
// grpcjs/client.js: one channel per process, driven by one JSON line per
// command on stdin and answering one JSON line per command on stdout.
// Python's grpcio (pygrpc/client.py) speaks the same protocol.
type jsClient struct {
	label string // the data plane's name
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan []byte // stdout, closed at EOF
	exit  chan struct{}

	mu     sync.Mutex // one command at a time, so answers pair with commands
	broken error      // set once an answer is missing: later ones would not pair
}

// jsDir holds client.js and its package-lock.json, relative to the test's
// working directory (the package directory under go test).
const jsDir = "grpcjs"

// newJSClient starts a grpc-js client of xds:///chat whose bootstrap is
// what `kvxds bootstrap --grpc` prints; it is stopped in t.Cleanup.
func newJSClient(t *testing.T, xdsAddr string) client {
	t.Helper()
	return newJSClientWithCap(t, xdsAddr, 0)
}

// newJSClientWithCap is newJSClient with the channel's ring hash cap
// raised to ringCap (0: grpc-js's default).
func newJSClientWithCap(t *testing.T, xdsAddr string, ringCap int) client {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("grpc-js tests need Node.js (node on PATH): %v", err)
	}
	dir, err := filepath.Abs(jsDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@grpc", "grpc-js-xds")); err != nil {
		t.Fatalf("grpc-js is not installed in %s: run `make e2e-deps` (npm ci there) first", dir)
	}
	cfg, err := bootstrap.GRPCJSON(bootstrap.Options{NodeID: "e2e-js-" + t.Name(), XDSAddress: xdsAddr})
	if err != nil {
		t.Fatal(err)
	}

	args := []string{"client.js", "xds:///chat"}
	if ringCap != 0 {
		args = append(args, strconv.Itoa(ringCap))
	}
	cmd := exec.Command(node, args...)
	cmd.Dir = dir
	// GRPC_XDS_BOOTSTRAP, if inherited, would take precedence over the
	// inline config.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRPC_XDS_BOOTSTRAP") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GRPC_XDS_BOOTSTRAP_CONFIG="+string(cfg))
	return startStdioClient(t, "grpc-js", cmd)
}

// startStdioClient starts cmd, a client that speaks client.js's protocol
// on its stdin and stdout; it is stopped in t.Cleanup.
func startStdioClient(t *testing.T, label string, cmd *exec.Cmd) *jsClient {
	t.Helper()
	cmd.Stderr = testWriter{t}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &jsClient{label: label, cmd: cmd, stdin: stdin, lines: make(chan []byte), exit: make(chan struct{})}
	// The reader owns stdout, and Wait may only run once it has hit EOF.
	go func() {
		defer close(c.exit)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			c.lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(c.lines)
		cmd.Wait()
	}()
	t.Cleanup(func() {
		// Closing stdin asks for a clean exit; a client stuck on calls is
		// killed.
		stdin.Close()
		go func() {
			for range c.lines {
			}
		}()
		select {
		case <-c.exit:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-c.exit
		}
	})
	return c
}

func (c *jsClient) name() string { return c.label }

type jsCommand struct {
	Calls       [][]string `json:"calls"`
	DeadlineMS  int64      `json:"deadline_ms"`
	Concurrency int        `json:"concurrency"`
}

type jsAnswer struct {
	IDs    []string `json:"ids"`
	Errors []string `json:"errors"`
	Fatal  string   `json:"fatal"`
}

func (c *jsClient) callMany(mds [][]string) ([]string, []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids, errs := make([]string, len(mds)), make([]error, len(mds))
	failAll := func(err error) ([]string, []error) {
		for i := range errs {
			errs[i] = err
		}
		return ids, errs
	}
	if c.broken != nil {
		return failAll(c.broken)
	}
	cmd := jsCommand{Calls: make([][]string, len(mds)), DeadlineMS: callDeadline.Milliseconds(), Concurrency: callConcurrency}
	for i, md := range mds {
		cmd.Calls[i] = append([]string{}, md...) // [] rather than null
	}
	line, err := json.Marshal(cmd)
	if err != nil {
		return failAll(err)
	}
	if _, err := c.stdin.Write(append(line, '\n')); err != nil {
		return failAll(fmt.Errorf("%s client: writing command: %w", c.label, err))
	}
	// Every call ends by its deadline, so the answer comes after at most
	// one deadline per round of concurrent calls.
	rounds := (len(mds) + callConcurrency - 1) / callConcurrency
	timeout := time.Duration(rounds)*callDeadline + 30*time.Second
	var out []byte
	select {
	case l, ok := <-c.lines:
		if !ok {
			<-c.exit
			return failAll(fmt.Errorf("%s client exited (%v)", c.label, c.cmd.ProcessState))
		}
		out = l
	case <-time.After(timeout):
		c.broken = fmt.Errorf("%s client did not answer within %v", c.label, timeout)
		c.cmd.Process.Kill()
		return failAll(c.broken)
	}
	var ans jsAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		return failAll(fmt.Errorf("%s client: bad answer %q: %w", c.label, out, err))
	}
	if ans.Fatal != "" {
		return failAll(fmt.Errorf("%s client: %s", c.label, ans.Fatal))
	}
	if len(ans.IDs) != len(mds) || len(ans.Errors) != len(mds) {
		return failAll(fmt.Errorf("%s client: %d ids and %d errors for %d calls", c.label, len(ans.IDs), len(ans.Errors), len(mds)))
	}
	for i := range mds {
		ids[i] = ans.IDs[i]
		if ans.Errors[i] != "" {
			errs[i] = jsStatus(ans.Errors[i])
		}
	}
	return ids, errs
}

// jsStatus turns grpc-js's "DEADLINE_EXCEEDED: details" into a status
// error, so status.Code works the same for both clients.
func jsStatus(s string) error {
	name, details, _ := strings.Cut(s, ": ")
	var code codes.Code
	if err := code.UnmarshalJSON([]byte(`"` + name + `"`)); err != nil {
		return errors.New(s)
	}
	return status.Error(code, details)
}

func TestJSStatus(t *testing.T) {
	err := jsStatus("DEADLINE_EXCEEDED: Deadline exceeded after 10.001s")
	if s := status.Convert(err); s.Code() != codes.DeadlineExceeded || s.Message() != "Deadline exceeded after 10.001s" {
		t.Errorf("got %v", err)
	}
	if err := jsStatus("boom"); status.Code(err) != codes.Unknown || err.Error() != "boom" {
		t.Errorf("got %v", err)
	}
}
