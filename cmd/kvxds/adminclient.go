package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// adminTokenEnv holds the admin token when --token-file is not given.
const adminTokenEnv = "KVXDS_ADMIN_TOKEN"

// adminAccess is how a command reaches a kvxds admin server that the
// policy protects (admin { token_file, tls }).
type adminAccess struct {
	tokenFile                 string
	caFile, certFile, keyFile string
}

// client returns an HTTP client that presents the admin token (from
// tokenFile, else $KVXDS_ADMIN_TOKEN) and trusts caFile; certFile and
// keyFile are a client certificate for an admin server with a
// client_ca_file.
func (a adminAccess) client(timeout time.Duration) (*http.Client, error) {
	token := os.Getenv(adminTokenEnv)
	if a.tokenFile != "" {
		data, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
		if token = strings.TrimSpace(string(data)); token == "" {
			return nil, fmt.Errorf("admin token: %s is empty", a.tokenFile)
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if a.caFile != "" || a.certFile != "" || a.keyFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if a.caFile != "" {
			pem, err := os.ReadFile(a.caFile)
			if err != nil {
				return nil, fmt.Errorf("admin CA: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("admin CA: %s holds no PEM certificate", a.caFile)
			}
		}
		if (a.certFile == "") != (a.keyFile == "") {
			return nil, errors.New("give both --tls-cert and --tls-key, or neither")
		}
		if a.certFile != "" {
			cert, err := tls.LoadX509KeyPair(a.certFile, a.keyFile)
			if err != nil {
				return nil, fmt.Errorf("admin client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		transport.TLSClientConfig = cfg
	}
	var rt http.RoundTripper = transport
	if token != "" {
		rt = tokenTransport{token: token, base: transport}
	}
	return &http.Client{Timeout: timeout, Transport: rt}, nil
}

// scheme is the URL scheme for an admin address without one: https when
// a CA or client certificate is given.
func (a adminAccess) scheme() string {
	if a.caFile != "" || a.certFile != "" {
		return "https://"
	}
	return "http://"
}

// tokenTransport adds the admin bearer token to every request.
type tokenTransport struct {
	token string
	base  http.RoundTripper
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(r)
}
