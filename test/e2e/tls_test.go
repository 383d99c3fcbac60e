package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/kvxds/kvxds/certs/certstest"
	"github.com/kvxds/kvxds/controller"
	"github.com/kvxds/kvxds/xds/bootstrap"
)

// withXDSBlock replaces the one-line xds block of a policy from
// policyText with one that also holds body.
func withXDSBlock(t *testing.T, text, xdsAddr, body string) string {
	t.Helper()
	line := fmt.Sprintf("xds   { address = %q }\n", xdsAddr)
	if !strings.Contains(text, line) {
		t.Fatalf("policy has no %q", line)
	}
	return strings.Replace(text, line, fmt.Sprintf("xds {\n  address = %q\n%s}\n", xdsAddr, body), 1)
}

// tlsBlock is an xds tls block for files; no client CA without one.
func tlsBlock(f certstest.Files) string {
	s := fmt.Sprintf("  tls {\n    cert_file = %q\n    key_file  = %q\n", f.Cert, f.Key)
	if f.CA != "" {
		s += fmt.Sprintf("    client_ca_file = %q\n", f.CA)
	}
	return s + "  }\n"
}

// newTLSClient is a grpc-go xDS client of pool "chat" whose bootstrap is
// what `kvxds bootstrap --grpc --tls-ca ...` prints.
func newTLSClient(t *testing.T, xdsAddr string, creds *bootstrap.TLS) testgrpc.TestServiceClient {
	t.Helper()
	cfg, err := bootstrap.GRPCJSON(bootstrap.Options{NodeID: "e2e-" + t.Name(), XDSAddress: xdsAddr, TLS: creds})
	if err != nil {
		t.Fatal(err)
	}
	r, err := xds.NewXDSResolverWithConfigForTesting(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///chat", grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// callOnce makes one call of session, waiting for the channel to be ready
// for at most d, and returns the replica that served it.
func callOnce(cl testgrpc.TestServiceClient, session string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-session-id", session)
	resp, err := cl.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return resp.GetServerId(), nil
}

// writeClientFiles writes a client certificate of ca, with the CA file
// that verifies kvxds, and returns them as bootstrap credentials.
func writeClientFiles(t *testing.T, client certstest.Pair, trusted *certstest.CA, withCert bool) *bootstrap.TLS {
	t.Helper()
	f := certstest.WriteFiles(t, t.TempDir(), client, trusted)
	out := &bootstrap.TLS{CAFile: f.CA}
	if withCert {
		out.CertFile, out.KeyFile = f.Cert, f.Key
	}
	return out
}

// TestTLSMutual: grpc-go's xDS client routes calls through the
// configuration it receives from kvxds over mutual TLS.
func TestTLSMutual(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds CA")
	backends := startBackends(t, 1)
	path, xdsAddr, adminAddr := policyFile(t)
	server := certstest.WriteFiles(t, t.TempDir(), ca.Issue(t, certstest.Leaf{Serial: 100}), ca)
	writeAtomic(t, path, withXDSBlock(t, policyText(xdsAddr, adminAddr, []member{{backends[0], 1}}), xdsAddr, tlsBlock(server)))
	inst := startInProcess(t, path, xdsAddr, adminAddr)
	defer inst.stop()

	creds := writeClientFiles(t, ca.Issue(t, certstest.Leaf{Serial: 7, Name: "app-1", Client: true}), ca, true)
	cl := newTLSClient(t, xdsAddr, creds)
	if got := callWith(t, &goClient{cl: cl}, "x-session-id", "conversation-1"); got != backends[0].id {
		t.Errorf("served by %q, want %q", got, backends[0].id)
	}
	if n := metric(t, adminAddr, "kvxds_xds_tls_handshake_errors_total"); n != 0 {
		t.Errorf("%g failed handshakes, want none", n)
	}
	if n := metricWhere(t, adminAddr, "kvxds_tls_reloads_total", `result="ok"`); n != 1 {
		t.Errorf("kvxds_tls_reloads_total{result=ok} = %g, want 1", n)
	}
}

// TestTLSRefused: clients that cannot authenticate kvxds, or that kvxds
// cannot authenticate, get no configuration.
func TestTLSRefused(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds CA")
	other := certstest.NewCA(t, "another CA")
	backends := startBackends(t, 1)
	goodServer := ca.Issue(t, certstest.Leaf{Serial: 100})
	expiredServer := ca.Issue(t, certstest.Leaf{Serial: 101,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	client := ca.Issue(t, certstest.Leaf{Serial: 7, Name: "app-1", Client: true})
	tests := []struct {
		name   string
		server certstest.Pair
		// client is the bootstrap's credentials; nil: plaintext.
		client func(t *testing.T) *bootstrap.TLS
	}{
		{"expired server certificate", expiredServer, func(t *testing.T) *bootstrap.TLS {
			return writeClientFiles(t, client, ca, true)
		}},
		{"server certificate of another CA", goodServer, func(t *testing.T) *bootstrap.TLS {
			return writeClientFiles(t, client, other, true)
		}},
		{"client without a certificate", goodServer, func(t *testing.T) *bootstrap.TLS {
			return writeClientFiles(t, client, ca, false)
		}},
		{"client certificate of another CA", goodServer, func(t *testing.T) *bootstrap.TLS {
			return writeClientFiles(t, other.Issue(t, certstest.Leaf{Serial: 8, Client: true}), ca, true)
		}},
		{"plaintext client", goodServer, func(*testing.T) *bootstrap.TLS { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, xdsAddr, adminAddr := policyFile(t)
			files := certstest.WriteFiles(t, t.TempDir(), tt.server, ca)
			writeAtomic(t, path, withXDSBlock(t, policyText(xdsAddr, adminAddr, []member{{backends[0], 1}}), xdsAddr, tlsBlock(files)))
			inst := startInProcess(t, path, xdsAddr, adminAddr)
			defer inst.stop()

			cl := newTLSClient(t, xdsAddr, tt.client(t))
			done := make(chan error, 1)
			go func() {
				_, err := callOnce(cl, "conversation-1", 3*time.Second)
				done <- err
			}()
			eventually(t, "a refused handshake", func() bool {
				return metric(t, adminAddr, "kvxds_xds_tls_handshake_errors_total") >= 1
			})
			if err := <-done; err == nil {
				t.Error("the call succeeded")
			}
			if n := metric(t, adminAddr, "kvxds_xds_streams"); n != 0 {
				t.Errorf("%g xDS streams open, want none", n)
			}
			if n := backends[0].calls.Load(); n != 0 {
				t.Errorf("the backend served %d calls", n)
			}
		})
	}
}

// adsConn is a raw ADS client: one connection to kvxds over TLS that
// records the serial number of every server certificate it is shown.
type adsConn struct {
	cc *grpc.ClientConn

	mu      sync.Mutex
	serials []string
}

func dialADS(t *testing.T, xdsAddr string, ca *certstest.CA, client certstest.Pair) *adsConn {
	t.Helper()
	cert, err := tls.X509KeyPair(client.Cert, client.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	a := &adsConn{}
	cfg := &tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{cert},
		VerifyConnection: func(cs tls.ConnectionState) error {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.serials = append(a.serials, cs.PeerCertificates[0].SerialNumber.String())
			return nil
		},
	}
	a.cc, err = grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cc.Close() })
	return a
}

func (a *adsConn) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.serials)
}

// edsStream is an Envoy's ADS stream subscribed to pool chat's endpoints.
type edsStream struct {
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func openEDS(t *testing.T, cc *grpc.ClientConn) (*edsStream, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	err = stream.Send(&discovery.DiscoveryRequest{
		Node:          &core.Node{Id: "envoy-" + t.Name(), UserAgentName: "envoy"},
		TypeUrl:       resourcev3.EndpointType,
		ResourceNames: []string{"chat"},
	})
	return &edsStream{stream: stream}, err
}

// next receives the next endpoints of chat, ACKs them and returns their
// addresses.
func (e *edsStream) next(t *testing.T) ([]string, error) {
	t.Helper()
	type result struct {
		resp *discovery.DiscoveryResponse
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := e.stream.Recv()
		got <- result{resp, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no EDS response within 20s")
	}
	if r.err != nil {
		return nil, r.err
	}
	var addrs []string
	for _, res := range r.resp.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := res.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		for _, l := range cla.GetEndpoints() {
			for _, ep := range l.GetLbEndpoints() {
				sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
				addrs = append(addrs, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
			}
		}
	}
	slices.Sort(addrs)
	err := e.stream.Send(&discovery.DiscoveryRequest{
		TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"chat"},
		VersionInfo: r.resp.GetVersionInfo(), ResponseNonce: r.resp.GetNonce(),
	})
	return addrs, err
}

// serverSerial is the serial number of the certificate a new TLS
// connection to addr is shown.
func serverSerial(t *testing.T, addr string, ca *certstest.CA, client certstest.Pair) string {
	t.Helper()
	cert, err := tls.X509KeyPair(client.Cert, client.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestTLSRotation rotates kvxds's certificate the way a Kubernetes Secret
// volume does (a "..data" symlink swap) while an ADS stream and a grpc-go
// client are connected: they keep their connection and keep receiving
// updates, and new connections are shown the new certificate.
func TestTLSRotation(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds CA")
	backends := startBackends(t, 2)
	path, xdsAddr, adminAddr := policyFile(t)
	vol := certstest.NewVolume(t.TempDir())
	publish := func(serial int64) certstest.Files {
		p := ca.Issue(t, certstest.Leaf{Serial: serial})
		paths := vol.Write(t, map[string][]byte{"tls.crt": p.Cert, "tls.key": p.Key, "ca.crt": ca.PEM})
		return certstest.Files{Cert: paths["tls.crt"], Key: paths["tls.key"], CA: paths["ca.crt"]}
	}
	files := publish(100)
	policyWith := func(members []member) string {
		return withXDSBlock(t, policyText(xdsAddr, adminAddr, members), xdsAddr, tlsBlock(files))
	}
	writeAtomic(t, path, policyWith([]member{{backends[0], 1}}))
	inst := startInProcess(t, path, xdsAddr, adminAddr)
	defer inst.stop()

	client := ca.Issue(t, certstest.Leaf{Serial: 7, Name: "envoy-1", Client: true})
	ads := dialADS(t, xdsAddr, ca, client)
	eds, err := openEDS(t, ads.cc)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := eds.next(t); err != nil || len(got) != 1 || got[0] != backends[0].addr {
		t.Fatalf("first endpoints %v, %v; want [%s]", got, err, backends[0].addr)
	}
	creds := writeClientFiles(t, ca.Issue(t, certstest.Leaf{Serial: 8, Name: "app-1", Client: true}), ca, true)
	before := newTLSClient(t, xdsAddr, creds)
	if got := callWith(t, &goClient{cl: before}, "x-session-id", "conversation-1"); got != backends[0].id {
		t.Fatalf("served by %q, want %q", got, backends[0].id)
	}

	publish(200)
	eventually(t, "new connections shown the new certificate", func() bool {
		return serverSerial(t, xdsAddr, ca, client) == "200"
	})

	// The open stream, on its connection of the old certificate, receives
	// the next change.
	writeAtomic(t, path, policyWith([]member{{backends[0], 1}, {backends[1], 1}}))
	want := []string{backends[0].addr, backends[1].addr}
	slices.Sort(want)
	got, err := eds.next(t)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("endpoints after the rotation %v, %v; want %v", got, err, want)
	}
	if s := ads.seen(); !slices.Equal(s, []string{"100"}) {
		t.Errorf("the ADS connection was shown certificates %v; want only the first, 100 (one connection, never redialled)", s)
	}
	eventually(t, "the client connected before the rotation to route to the new replica", func() bool {
		for i := range 50 {
			if id, err := callOnce(before, fmt.Sprintf("conversation-%d", i), 5*time.Second); err == nil && id == backends[1].id {
				return true
			}
		}
		return false
	})
	after := newTLSClient(t, xdsAddr, creds)
	if _, err := callOnce(after, "conversation-1", 10*time.Second); err != nil {
		t.Errorf("client started after the rotation: %v", err)
	}
	if n := metricWhere(t, adminAddr, "kvxds_tls_reloads_total", `result="ok"`); n < 2 {
		t.Errorf("kvxds_tls_reloads_total{result=ok} = %g, want at least 2", n)
	}

	// A broken rotation (a key that is not the certificate's) keeps the
	// last good certificate.
	bad := ca.Issue(t, certstest.Leaf{Serial: 300})
	vol.Write(t, map[string][]byte{"tls.crt": bad.Cert, "tls.key": client.Key, "ca.crt": ca.PEM})
	eventually(t, "the broken files counted", func() bool {
		return metricWhere(t, adminAddr, "kvxds_tls_reloads_total", `result="error"`) >= 1
	})
	if s := serverSerial(t, xdsAddr, ca, client); s != "200" {
		t.Errorf("after a broken rotation new connections are shown %s, want the last good 200", s)
	}
}

// TestXDSStreamCap: the stream beyond max_streams_per_address from one
// address is refused and counted; ending a stream makes room again.
func TestXDSStreamCap(t *testing.T) {
	backends := startBackends(t, 1)
	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, withXDSBlock(t, policyText(xdsAddr, adminAddr, []member{{backends[0], 1}}), xdsAddr, "  max_streams_per_address = 2\n"))
	inst := startInProcess(t, path, xdsAddr, adminAddr)
	defer inst.stop()

	var conns []*grpc.ClientConn
	for range 3 {
		cc, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	var open []*edsStream
	for i, cc := range conns[:2] {
		s, err := openEDS(t, cc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.next(t); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		open = append(open, s)
	}
	s, err := openEDS(t, conns[2])
	// Send reports io.EOF when the server has already ended the stream;
	// its status comes with the next receive.
	if err == nil || errors.Is(err, io.EOF) {
		_, err = s.next(t)
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := metricWhere(t, adminAddr, "kvxds_xds_streams_rejected_total", `reason="per_address_limit"`); n != 1 {
		t.Errorf("kvxds_xds_streams_rejected_total{reason=per_address_limit} = %g, want 1", n)
	}

	open[0].stream.CloseSend()
	conns[0].Close()
	eventually(t, "a stream to end and make room", func() bool {
		s, err := openEDS(t, conns[2])
		if err != nil {
			return false
		}
		_, err = s.next(t)
		return err == nil
	})
}

// TestAdminToken: an admin server bound beyond what the policy's token and
// TLS protect answers probes to anyone and everything else only with the
// token, over TLS; `kvxds status` reaches it with --token-file and
// --tls-ca.
func TestAdminToken(t *testing.T) {
	ca := certstest.NewCA(t, "admin CA")
	dir := t.TempDir()
	files := certstest.WriteFiles(t, dir, ca.Issue(t, certstest.Leaf{Serial: 50}), ca)
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	backends := startBackends(t, 1)
	xdsAddr, adminAddr := freeAddr(t), freeAddr(t)
	path := filepath.Join(dir, "policy.hcl")
	text := policyText(xdsAddr, adminAddr, []member{{backends[0], 1}})
	text = strings.Replace(text, fmt.Sprintf("admin { address = %q }\n", adminAddr), fmt.Sprintf(`admin {
  address    = %q
  token_file = "token"
  tls {
    cert_file = "cert.pem"
    key_file  = "key.pem"
  }
}
`, adminAddr), 1)
	writeAtomic(t, path, text)
	c, err := controller.New(controller.Options{
		PolicyFile: path,
		Logger:     hclog.New(&hclog.LoggerOptions{Name: "kvxds", Level: hclog.Warn, Output: testWriter{t}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	get := func(path, token string) int {
		req, err := http.NewRequest(http.MethodGet, "https://"+adminAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	eventually(t, "kvxds ready over https", func() bool { return get("/readyz", "") == http.StatusOK })
	tests := []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "wrong", http.StatusUnauthorized},
		{"/metrics", "s3cret", http.StatusOK},
		{"/api/v1/status", "", http.StatusUnauthorized},
		{"/api/v1/status", "s3cret", http.StatusOK},
		{"/debug/fleet", "", http.StatusUnauthorized},
		{"/debug/fleet", "s3cret", http.StatusOK},
	}
	for _, tt := range tests {
		if got := get(tt.path, tt.token); got != tt.want {
			t.Errorf("GET %s with token %q: %d, want %d", tt.path, tt.token, got, tt.want)
		}
	}
	if resp, err := http.Get("http://" + adminAddr + "/metrics"); err == nil {
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served /metrics")
		}
		resp.Body.Close()
	}

	for _, tc := range []struct {
		name string
		args []string
		env  string
		ok   bool
	}{
		{"token file", []string{"--token-file", filepath.Join(dir, "token")}, "", true},
		{"token in the environment", nil, "KVXDS_ADMIN_TOKEN=s3cret", true},
		{"no token", nil, "", false},
	} {
		t.Run("kvxds status/"+tc.name, func(t *testing.T) {
			cmd := exec.Command(kvxdsBinary, append([]string{"status", "--json", "--admin", adminAddr, "--tls-ca", files.CA}, tc.args...)...)
			cmd.Env = append(slices.DeleteFunc(os.Environ(), func(s string) bool { return strings.HasPrefix(s, "KVXDS_ADMIN_TOKEN=") }), tc.env)
			out, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok {
				t.Fatalf("kvxds status: %v, want success %v:\n%s", err, tc.ok, out)
			}
			if tc.ok && !strings.Contains(string(out), `"pools"`) {
				t.Errorf("kvxds status printed no status:\n%s", out)
			}
			if !tc.ok && !strings.Contains(string(out), "401") {
				t.Errorf("kvxds status does not say 401:\n%s", out)
			}
		})
	}
}

// freezer is a TCP proxy that can go silent without closing anything, as
// a data plane on a host that vanished does.
type freezer struct {
	addr   string
	frozen chan struct{}
	once   sync.Once
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{addr: lis.Addr().String(), frozen: make(chan struct{})}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			select {
			case <-f.frozen:
				return // silent: nothing forwarded, nothing closed
			default:
			}
			if n > 0 {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return f
}

func (f *freezer) freeze() { f.once.Do(func() { close(f.frozen) }) }

// TestXDSKeepaliveDropsDeadPeers: a data plane that goes silent (its host
// gone) is pinged, dropped after keepalive_timeout, and its stream no
// longer counts against its address's cap.
func TestXDSKeepaliveDropsDeadPeers(t *testing.T) {
	backends := startBackends(t, 1)
	path, xdsAddr, adminAddr := policyFile(t)
	writeAtomic(t, path, withXDSBlock(t, policyText(xdsAddr, adminAddr, []member{{backends[0], 1}}), xdsAddr,
		"  max_streams_per_address = 1\n  keepalive_time = \"1s\"\n  keepalive_timeout = \"1s\"\n"))
	inst := startInProcess(t, path, xdsAddr, adminAddr)
	defer inst.stop()

	proxy := newFreezer(t, xdsAddr)
	cc, err := grpc.NewClient(proxy.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s, err := openEDS(t, cc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.next(t); err != nil {
		t.Fatal(err)
	}
	if n := metric(t, adminAddr, "kvxds_xds_streams"); n != 1 {
		t.Fatalf("%g streams open, want 1", n)
	}
	start := time.Now()
	proxy.freeze()
	eventually(t, "the silent data plane dropped", func() bool { return metric(t, adminAddr, "kvxds_xds_streams") == 0 })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("dropped after %s, want about keepalive_time + keepalive_timeout (2s)", d.Round(100*time.Millisecond))
	}

	direct, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	s, err = openEDS(t, direct)
	if err == nil {
		_, err = s.next(t)
	}
	if err != nil {
		t.Errorf("a new stream from the same address: %v", err)
	}
}
