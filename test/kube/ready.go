package kube

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"time"
)

// readyTimeout bounds a server's start; kube-apiserver is ready in about
// two seconds, more on a loaded machine.
const readyTimeout = time.Minute

// waitHealthy polls url until it answers 200, the process exits, or
// readyTimeout passes. caPEM and token are for the API server's TLS and
// authentication (etcd's health endpoint needs neither).
func waitHealthy(p *process, url string, caPEM []byte, token string) error {
	tr := &http.Transport{}
	if caPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	var last string
	for {
		if err := p.exited(); err != nil {
			return err
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %s; last output:\n%s", p.name, readyTimeout, last, tail(p.log, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
