// Package kube runs a real Kubernetes API server for tests and the
// benchmark: kube-apiserver backed by etcd, both built from their Go
// modules (test/kube/build.sh, or make kube-deps) and started per test on
// free loopback ports.
//
// There are no nodes, controllers or kubelets: objects are only stored and
// watched, which is what clients of the API (informers, RBAC, tokens) need.
// Authentication is a static admin token and service-account tokens;
// authorization is RBAC, so least-privilege roles can be tested as they
// would be in a cluster.
package kube

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Version is the Kubernetes release test/kube/build.sh builds.
const Version = "v1.37.2"

// BinDirEnv names the environment variable that overrides where the
// binaries are (build.sh honours it too).
const BinDirEnv = "KVXDS_KUBE_BIN"

// stopGrace bounds a server's graceful exit before it is killed.
const stopGrace = 5 * time.Second

// Cluster is a running kube-apiserver and its etcd.
type Cluster struct {
	dir    string // the servers' files: data, keys, logs
	pki    *pki
	token  string // the admin's bearer token
	host   string // https://127.0.0.1:port
	bin    string // kube-apiserver
	args   []string
	etcd   *process
	client kubernetes.Interface

	mu  sync.Mutex
	api *process // nil while stopped
}

// BinDir is where the binaries are looked for: $KVXDS_KUBE_BIN, or the
// cache directory build.sh fills by default.
func BinDir() string {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "kvxds", "kube-"+Version)
}

// Start runs etcd and kube-apiserver for the test, waits until the API
// server is ready, and stops both when the test ends. It fails the test
// if the binaries have not been built: they take minutes to build, which
// a test should not do behind the back of its runner.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatalf("kube: %v", err)
	}
	began := time.Now()
	c, err := start(t.TempDir())
	if err != nil {
		t.Fatalf("kube: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-apiserver's last output:\n%s", tail(c.apiLog(), 30))
			t.Logf("etcd's last output:\n%s", tail(c.etcd.log, 30))
		}
		if err := c.Close(); err != nil {
			t.Errorf("kube: %v", err)
		}
	})
	t.Logf("kube: kube-apiserver %s ready at %s in %s", Version, c.host, time.Since(began).Round(time.Millisecond))
	return c
}

// StartCluster is Start for programs that are not tests (the benchmark):
// the servers keep their files in dir, which must exist, and run until
// Close. logf, if not nil, is told when the API server is ready.
func StartCluster(dir string, logf func(format string, args ...any)) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	began := time.Now()
	c, err := start(dir)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	if logf != nil {
		logf("kube: kube-apiserver %s ready at %s in %s", Version, c.host, time.Since(began).Round(time.Millisecond))
	}
	return c, nil
}

// Available says why a cluster cannot be started here (the binaries have
// not been built), or nil.
func Available() error {
	bins := BinDir()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bins, b)); err != nil {
			return fmt.Errorf("%s not found in %s (run make kube-deps, or test/kube/build.sh): %w", b, bins, err)
		}
	}
	return nil
}

// start runs etcd and kube-apiserver with their files in dir. On error
// it stops whatever it started.
func start(dir string) (c *Cluster, err error) {
	bins := BinDir()
	c = &Cluster{dir: dir, bin: filepath.Join(bins, "kube-apiserver")}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	if c.pki, err = newPKI(c.dir); err != nil {
		return nil, err
	}
	if c.token, err = randomToken(); err != nil {
		return nil, err
	}
	tokens := filepath.Join(c.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing the token file: %w", err)
	}
	etcdURL, err := c.startEtcd(filepath.Join(bins, "etcd"))
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c.host = "https://127.0.0.1:" + strconv.Itoa(port)
	c.args = []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + c.pki.certFile,
		"--tls-private-key-file=" + c.pki.keyFile,
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kvxds.test",
		"--service-account-key-file=" + c.pki.saPubFile,
		"--service-account-signing-key-file=" + c.pki.saSigningKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// No controller manager creates service-account token secrets,
		// and no node runs the API server's own endpoints.
		"--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	if err := c.StartAgain(); err != nil {
		return nil, err
	}
	if c.client, err = kubernetes.NewForConfig(c.Config()); err != nil {
		return nil, fmt.Errorf("building the admin client: %w", err)
	}
	return c, nil
}

// startEtcd starts etcd on free ports and returns its client URL once it
// is healthy.
func (c *Cluster) startEtcd(bin string) (string, error) {
	clientPort, err := freePort()
	if err != nil {
		return "", err
	}
	peerPort, err := freePort()
	if err != nil {
		return "", err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	c.etcd, err = startProcess("etcd", bin, filepath.Join(c.dir, "etcd.log"), []string{
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		// Test data need not survive a power cut.
		"--unsafe-no-fsync",
		"--log-level=warn",
	})
	if err != nil {
		return "", err
	}
	if err := waitHealthy(c.etcd, clientURL+"/health", nil, ""); err != nil {
		return "", err
	}
	return clientURL, nil
}

// Close stops kube-apiserver, then etcd (kube-apiserver is slow to exit
// once etcd is gone). Its files stay in the directory it was started in.
func (c *Cluster) Close() error {
	err := c.Stop()
	if c.etcd != nil {
		err = errors.Join(err, c.etcd.stop(stopGrace))
	}
	return err
}

func (c *Cluster) apiLog() string { return filepath.Join(c.dir, "kube-apiserver.log") }

// Stop stops kube-apiserver (etcd keeps running), as an API server outage
// would; StartAgain brings it back on the same address. Stopping a stopped
// server does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api == nil {
		return nil
	}
	err := c.api.stop(stopGrace)
	c.api = nil
	return err
}

// StartAgain starts kube-apiserver on the address it had, with the same
// etcd, keys and tokens, and waits until it is ready. Starting a running
// server does nothing.
func (c *Cluster) StartAgain() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api != nil {
		return nil
	}
	p, err := startProcess("kube-apiserver", c.bin, c.apiLog(), c.args)
	if err != nil {
		return err
	}
	if err := waitHealthy(p, c.host+"/readyz", c.pki.caPEM, c.token); err != nil {
		_ = p.stop(0)
		return err
	}
	c.api = p
	return nil
}

// Restart stops kube-apiserver and starts it again, failing the test if
// either fails.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	if err := c.Stop(); err != nil {
		t.Fatalf("kube: %v", err)
	}
	if err := c.StartAgain(); err != nil {
		t.Fatalf("kube: %v", err)
	}
}

// Config is the admin's client configuration (group system:masters).
func (c *Cluster) Config() *rest.Config { return c.ConfigFor(c.token) }

// ConfigFor is a client configuration authenticating with token.
func (c *Cluster) ConfigFor(token string) *rest.Config {
	return &rest.Config{
		Host:            c.host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		// Tests create objects in bursts; client-side throttling would
		// only slow them down.
		QPS:   200,
		Burst: 400,
	}
}

// Client is a clientset for the admin.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
