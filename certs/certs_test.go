package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/certs/certstest"
)

const waitFor = 5 * time.Second

// server is a TLS echo server on loopback whose configuration comes from
// a Reloader.
type server struct {
	addr string
}

func serve(t *testing.T, r *Reloader) server {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig("h2"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return server{addr: lis.Addr().String()}
}

// dial connects with roots and an optional client certificate, completes
// the handshake and one echo round trip (which is where a TLS 1.3 client
// learns that the server refused its certificate), and returns the
// connection.
func (s server) dial(t *testing.T, roots *x509.CertPool, client *tls.Certificate) (*tls.Conn, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	d := &net.Dialer{Timeout: waitFor}
	c, err := tls.DialWithDialer(d, "tcp", s.addr, cfg)
	if err != nil {
		return nil, err
	}
	if err := echo(c); err != nil {
		c.Close()
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func echo(c *tls.Conn) error {
	c.SetDeadline(time.Now().Add(waitFor))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return errors.New("echo mismatch")
	}
	return nil
}

func serial(c *tls.Conn) int64 {
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func pool(ca *certstest.CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func keyPair(t *testing.T, p certstest.Pair) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestClientCertificates(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds test CA")
	other := certstest.NewCA(t, "other CA")
	files := certstest.WriteFiles(t, t.TempDir(), ca.Issue(t, certstest.Leaf{}), ca)
	good := keyPair(t, ca.Issue(t, certstest.Leaf{Serial: 10, Name: "envoy-1", Client: true}))
	foreign := keyPair(t, other.Issue(t, certstest.Leaf{Serial: 11, Name: "envoy-1", Client: true}))
	expired := keyPair(t, ca.Issue(t, certstest.Leaf{Serial: 12, Name: "envoy-1", Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}))

	tests := []struct {
		name     string
		clientCA bool
		client   *tls.Certificate
		ok       bool
	}{
		{"no client CA, no client certificate", false, nil, true},
		{"no client CA, a client certificate", false, good, true},
		{"client CA, no client certificate", true, nil, false},
		{"client CA, certificate of the CA", true, good, true},
		{"client CA, certificate of another CA", true, foreign, false},
		{"client CA, expired certificate", true, expired, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{CertFile: files.Cert, KeyFile: files.Key, Name: "test"}
			if tt.clientCA {
				opts.ClientCAFile = files.CA
			}
			r, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = serve(t, r).dial(t, pool(ca), tt.client)
			if (err == nil) != tt.ok {
				t.Errorf("dial: %v, want success %v", err, tt.ok)
			}
		})
	}
}

// TestRotation rotates the files in each way agents do and checks that new
// connections see the new certificate while an established one keeps
// working, through the watch alone (the poll is too slow to help).
func TestRotation(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds test CA")
	tests := []struct {
		name string
		// setup writes the first pair and returns the files and a
		// function that writes the second.
		setup func(t *testing.T, first certstest.Pair) (certstest.Files, func(certstest.Pair))
	}{
		{"atomic rename", func(t *testing.T, first certstest.Pair) (certstest.Files, func(certstest.Pair)) {
			dir := t.TempDir()
			f := certstest.WriteFiles(t, dir, first, ca)
			return f, func(p certstest.Pair) { certstest.WriteFiles(t, dir, p, ca) }
		}},
		{"in place", func(t *testing.T, first certstest.Pair) (certstest.Files, func(certstest.Pair)) {
			dir := t.TempDir()
			f := certstest.WriteFiles(t, dir, first, ca)
			return f, func(p certstest.Pair) {
				if err := os.WriteFile(f.Key, p.Key, 0o600); err != nil {
					t.Error(err)
				}
				if err := os.WriteFile(f.Cert, p.Cert, 0o600); err != nil {
					t.Error(err)
				}
			}
		}},
		{"Kubernetes volume", func(t *testing.T, first certstest.Pair) (certstest.Files, func(certstest.Pair)) {
			v := certstest.NewVolume(t.TempDir())
			write := func(p certstest.Pair) map[string]string {
				return v.Write(t, map[string][]byte{"tls.crt": p.Cert, "tls.key": p.Key, "ca.crt": ca.PEM})
			}
			paths := write(first)
			return certstest.Files{Cert: paths["tls.crt"], Key: paths["tls.key"], CA: paths["ca.crt"]},
				func(p certstest.Pair) { write(p) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, rotate := tt.setup(t, ca.Issue(t, certstest.Leaf{Serial: 100}))
			reg := prometheus.NewRegistry()
			r, err := New(Options{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.CA,
				Name: "xds", Registerer: reg, PollInterval: time.Hour, Debounce: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			})
			srv := serve(t, r)
			client := keyPair(t, ca.Issue(t, certstest.Leaf{Serial: 7, Client: true}))
			old, err := srv.dial(t, pool(ca), client)
			if err != nil {
				t.Fatal(err)
			}
			if got := serial(old); got != 100 {
				t.Fatalf("serial %d, want 100", got)
			}

			rotate(ca.Issue(t, certstest.Leaf{Serial: 200}))
			eventually(t, "the new certificate", func() bool { return r.Leaf().SerialNumber.Int64() == 200 })
			c, err := srv.dial(t, pool(ca), client)
			if err != nil {
				t.Fatal(err)
			}
			if got := serial(c); got != 200 {
				t.Errorf("new connection: serial %d, want 200", got)
			}
			if err := echo(old); err != nil {
				t.Errorf("connection made before the rotation: %v", err)
			}
			if got := testutil.ToFloat64(r.reloads.WithLabelValues("ok")); got < 2 {
				t.Errorf("kvxds_tls_reloads_total{result=ok} = %g, want at least 2", got)
			}
			if got, want := testutil.ToFloat64(r.expiry), float64(r.Leaf().NotAfter.Unix()); got != want {
				t.Errorf("expiry gauge %g, want %g", got, want)
			}
		})
	}
}

// TestFailStatic checks that files that do not make a certificate never
// replace the last good one, and that fixing them is picked up.
func TestFailStatic(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds test CA")
	other := ca.Issue(t, certstest.Leaf{Serial: 300})
	tests := []struct {
		name    string
		corrupt func(t *testing.T, f certstest.Files)
		want    string
	}{
		{"key of another certificate", func(t *testing.T, f certstest.Files) {
			certstest.WriteAtomic(t, f.Key, other.Key)
		}, "private key does not match public key"},
		{"half-written certificate", func(t *testing.T, f certstest.Files) {
			data, _ := os.ReadFile(f.Cert)
			certstest.WriteAtomic(t, f.Cert, data[:len(data)/2])
		}, "failed to find any PEM data"},
		{"certificate removed", func(t *testing.T, f certstest.Files) {
			os.Remove(f.Cert)
		}, "no such file"},
		{"CA without certificates", func(t *testing.T, f certstest.Files) {
			certstest.WriteAtomic(t, f.CA, []byte("\n"))
		}, "holds no PEM certificate"},
		{"CA with garbage", func(t *testing.T, f certstest.Files) {
			certstest.WriteAtomic(t, f.CA, append(ca.PEM, "garbage"...))
		}, "not PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			good := ca.Issue(t, certstest.Leaf{Serial: 100})
			files := certstest.WriteFiles(t, dir, good, ca)
			r, err := New(Options{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.CA, Name: "xds"})
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, r)
			client := keyPair(t, ca.Issue(t, certstest.Leaf{Serial: 7, Client: true}))

			tt.corrupt(t, files)
			err = r.Reload()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Reload = %v, want an error containing %q", err, tt.want)
			}
			if got := testutil.ToFloat64(r.reloads.WithLabelValues("error")); got != 1 {
				t.Errorf("errors counted: %g, want 1", got)
			}
			// The same broken content is not counted twice.
			r.Reload()
			if got := testutil.ToFloat64(r.reloads.WithLabelValues("error")); got != 1 {
				t.Errorf("errors counted after a second look: %g, want 1", got)
			}
			c, err := srv.dial(t, pool(ca), client)
			if err != nil {
				t.Fatalf("dial with the last good certificate: %v", err)
			}
			if got := serial(c); got != 100 {
				t.Errorf("serial %d, want the last good 100", got)
			}

			certstest.WriteFiles(t, dir, ca.Issue(t, certstest.Leaf{Serial: 400}), ca)
			if err := r.Reload(); err != nil {
				t.Fatalf("Reload of fixed files: %v", err)
			}
			if c, err = srv.dial(t, pool(ca), client); err != nil {
				t.Fatal(err)
			}
			if got := serial(c); got != 400 {
				t.Errorf("serial %d, want 400 once fixed", got)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds test CA")
	dir := t.TempDir()
	files := certstest.WriteFiles(t, dir, ca.Issue(t, certstest.Leaf{}), ca)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no files", Options{}, "required"},
		{"no key", Options{CertFile: files.Cert}, "required"},
		{"missing certificate", Options{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: files.Key}, "nope.pem"},
		{"key for certificate", Options{CertFile: files.Key, KeyFile: files.Key}, files.Key},
		{"missing CA", Options{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: filepath.Join(dir, "ca-nope.pem")}, "ca-nope.pem"},
		{"key as CA", Options{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.Key}, "holds no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestExpiredServed checks that an expired certificate is still loaded
// (nothing better is at hand) and that clients refuse it.
func TestExpiredServed(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds test CA")
	files := certstest.WriteFiles(t, t.TempDir(), ca.Issue(t, certstest.Leaf{
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}), nil)
	r, err := New(Options{CertFile: files.Cert, KeyFile: files.Key, Name: "xds"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = serve(t, r).dial(t, pool(ca), nil)
	var invalid x509.CertificateInvalidError
	if !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Errorf("dial = %v, want an expired certificate error", err)
	}
}
