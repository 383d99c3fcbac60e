package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvxds/kvxds/certs/certstest"
	"github.com/kvxds/kvxds/status"
)

// TestStatusProtectedAdmin runs kvxds status against an admin server that
// requires a token over TLS, optionally with a client certificate.
func TestStatusProtectedAdmin(t *testing.T) {
	body, err := os.ReadFile(statusPage)
	if err != nil {
		t.Fatal(err)
	}
	ca := certstest.NewCA(t, "admin CA")
	dir := t.TempDir()
	files := certstest.WriteFiles(t, dir, ca.Issue(t, certstest.Leaf{}), ca)
	clientFiles := certstest.WriteFiles(t, t.TempDir(), ca.Issue(t, certstest.Leaf{Serial: 9, Client: true}), nil)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongToken := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrongToken, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}

	serve := func(t *testing.T, mutual bool) string {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			if r.URL.Path != status.Path {
				http.NotFound(w, r)
				return
			}
			w.Write(body)
		}))
		cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		if err != nil {
			t.Fatal(err)
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		if mutual {
			srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
			srv.TLS.ClientCAs = x509.NewCertPool()
			srv.TLS.ClientCAs.AddCert(ca.Cert)
		}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "https://")
	}

	tests := []struct {
		name      string
		mutual    bool
		args      []string
		env       string
		code      int
		stderrHas string
	}{
		{"token file and CA", false, []string{"--token-file", tokenFile, "--tls-ca", files.CA}, "", 0, ""},
		{"token from the environment", false, []string{"--tls-ca", files.CA}, "s3cret", 0, ""},
		{"token file wins over the environment", false, []string{"--token-file", tokenFile, "--tls-ca", files.CA}, "nope", 0, ""},
		{"explicit https", false, []string{"--token-file", tokenFile, "--tls-ca", files.CA, "--admin", "https://ADDR"}, "", 0, ""},
		{"no token", false, []string{"--tls-ca", files.CA}, "", 1, "401 Unauthorized"},
		{"wrong token", false, []string{"--token-file", wrongToken, "--tls-ca", files.CA}, "", 1, "401 Unauthorized"},
		{"no CA", false, []string{"--token-file", tokenFile, "--admin", "https://ADDR"}, "", 1, "certificate"},
		{"client certificate", true, []string{"--token-file", tokenFile, "--tls-ca", files.CA, "--tls-cert", clientFiles.Cert, "--tls-key", clientFiles.Key}, "", 0, ""},
		{"missing client certificate", true, []string{"--token-file", tokenFile, "--tls-ca", files.CA}, "", 1, "certificate"},
		{"certificate without key", true, []string{"--tls-ca", files.CA, "--tls-cert", clientFiles.Cert}, "", 2, "--tls-key"},
		{"missing token file", false, []string{"--token-file", filepath.Join(dir, "nope"), "--tls-ca", files.CA}, "", 2, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serve(t, tt.mutual)
			t.Setenv(adminTokenEnv, tt.env)
			args := []string{"status", "--json"}
			hasAdmin := false
			for _, a := range tt.args {
				if strings.Contains(a, "ADDR") {
					hasAdmin = true
				}
				args = append(args, strings.ReplaceAll(a, "ADDR", addr))
			}
			if !hasAdmin {
				args = append(args, "--admin", addr)
			}
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.stderrHas) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tt.stderrHas)
			}
			if tt.code == 0 && !bytes.Equal(stdout.Bytes(), body) {
				t.Errorf("stdout is not the status page")
			}
		})
	}
}

func TestBootstrapTLSFlags(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		code      int
		stdoutHas []string
		stderrHas string
	}{
		{"envoy mutual TLS", []string{"--tls-ca", "/ca.crt", "--tls-cert", "/tls.crt", "--tls-key", "/tls.key", "--tls-server-name", "kvxds.example.com"}, 0,
			[]string{"envoy.transport_sockets.tls", "filename: /ca.crt", "filename: /tls.crt", "filename: /tls.key", "sni: kvxds.example.com", "- h2"}, ""},
		{"gRPC TLS", []string{"--grpc", "--tls-ca", "/ca.crt", "--tls-cert", "/tls.crt", "--tls-key", "/tls.key"}, 0,
			[]string{`"type": "tls"`, `"ca_certificate_file": "/ca.crt"`, `"certificate_file": "/tls.crt"`, `"private_key_file": "/tls.key"`}, ""},
		{"certificate without CA", []string{"--tls-cert", "/tls.crt", "--tls-key", "/tls.key"}, 2, nil, "need --tls-ca"},
		{"certificate without key", []string{"--tls-ca", "/ca.crt", "--tls-cert", "/tls.crt"}, 2, nil, "both"},
		{"server name for gRPC", []string{"--grpc", "--tls-ca", "/ca.crt", "--tls-server-name", "kvxds.example.com"}, 2, nil, "host they dial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"bootstrap", "--node", "n1", "--xds", "127.0.0.1:18000"}, tt.args...)
			if code := run(args, &stdout, &stderr); code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			for _, want := range tt.stdoutHas {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout does not contain %q:\n%s", want, stdout.String())
				}
			}
			if !strings.Contains(stderr.String(), tt.stderrHas) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tt.stderrHas)
			}
		})
	}
}
