package controller

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// openAdminPaths answer without a token: probes (kubelet, load balancers)
// carry none.
var openAdminPaths = map[string]bool{"/healthz": true, "/readyz": true}

// tokenFile is the admin server's bearer token, read from a file and read
// again when the file changes (a rotated Kubernetes Secret). A file that
// becomes unreadable or empty is logged and the last good token stays in
// force.
type tokenFile struct {
	path string
	log  hclog.Logger

	mu      sync.Mutex
	token   []byte
	modTime time.Time
	size    int64
	badSeen string // last error logged, to log each once
}

// newTokenFile reads path; it fails if the file holds no token.
func newTokenFile(path string, log hclog.Logger) (*tokenFile, error) {
	t := &tokenFile{path: path, log: log}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	tok, err := readToken(path)
	if err != nil {
		return nil, err
	}
	t.token, t.modTime, t.size = tok, fi.ModTime(), fi.Size()
	return t, nil
}

func readToken(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	tok := bytes.TrimSpace(data)
	if len(tok) == 0 {
		return nil, fmt.Errorf("admin token: %s is empty", path)
	}
	return tok, nil
}

// current returns the token in force, reading the file again if its size
// or modification time changed (through symlinks, so a swapped Secret
// volume counts).
func (t *tokenFile) current() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err == nil && fi.ModTime().Equal(t.modTime) && fi.Size() == t.size {
		return t.token
	}
	var tok []byte
	if err == nil {
		tok, err = readToken(t.path)
	}
	if err != nil {
		if msg := err.Error(); msg != t.badSeen {
			t.badSeen = msg
			t.log.Error("admin token file unusable; the last good token stays in force", "error", err)
		}
		return t.token
	}
	t.token, t.modTime, t.size, t.badSeen = tok, fi.ModTime(), fi.Size(), ""
	t.log.Info("admin token reloaded", "file", t.path)
	return t.token
}

// requireToken lets through requests that carry the token as
// "Authorization: Bearer <token>", and probes; it answers 401 otherwise.
func requireToken(tok *tokenFile, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openAdminPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := bearer(r.Header.Get("Authorization"))
		if !ok || subtle.ConstantTimeCompare(got, tok.current()) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvxds"`)
			http.Error(w, "unauthorized: this endpoint needs the admin token (Authorization: Bearer ...)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearer extracts the token of an Authorization header; the scheme is
// case-insensitive (RFC 9110).
func bearer(h string) ([]byte, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, false
	}
	tok = strings.TrimSpace(tok)
	return []byte(tok), tok != ""
}

// bearerTransport adds the admin token to requests to another instance's
// admin server (an ha block's follow): instances that follow one another
// share one token.
type bearerTransport struct {
	tok  *tokenFile
	base http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b.tok.current()))
	return b.base.RoundTrip(r)
}

// loopbackOnly says whether a listener's address only accepts connections
// from this host.
func loopbackOnly(addr net.Addr) bool {
	ap, err := netip.ParseAddrPort(addr.String())
	return err == nil && ap.Addr().IsLoopback()
}
