package controller

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvxds/kvxds/certs/certstest"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/policy"
)

func TestRequireToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := newTokenFile(path, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	h := requireToken(tok, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok"))
	}))
	tests := []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "Bearer s3cret", http.StatusOK},
		{"/metrics", "bearer s3cret", http.StatusOK},
		{"/metrics", "Bearer  s3cret ", http.StatusOK},
		{"/metrics", "Bearer s3cre", http.StatusUnauthorized},
		{"/metrics", "Bearer s3cret2", http.StatusUnauthorized},
		{"/metrics", "Basic s3cret", http.StatusUnauthorized},
		{"/metrics", "Bearer", http.StatusUnauthorized},
		{"/api/v1/status", "", http.StatusUnauthorized},
		{"/debug/fleet", "", http.StatusUnauthorized},
		{"/ha/decisions", "", http.StatusUnauthorized},
		{"/", "", http.StatusUnauthorized},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/healthz/../metrics", "", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(http.MethodGet, tt.path, nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("GET %s with %q: %d, want %d", tt.path, tt.auth, rec.Code, tt.want)
		}
		if rec.Code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("GET %s: 401 without WWW-Authenticate", tt.path)
		}
	}
}

// TestTokenRotation checks that a new token takes effect and that an
// emptied or removed file keeps the last good one.
func TestTokenRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(s string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		// Distinct modification times, whatever the file system's
		// resolution.
		if err := os.Chtimes(path+".tmp", mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour)
	write("first", base)
	tok, err := newTokenFile(path, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		content string // "-" removes the file
		want    string
	}{
		{"second\n", "second"},
		{"  \n", "second"},
		{"-", "second"},
		{"third", "third"},
	}
	for i, s := range steps {
		if s.content == "-" {
			os.Remove(path)
		} else {
			write(s.content, base.Add(time.Duration(i+1)*time.Second))
		}
		if got := string(tok.current()); got != s.want {
			t.Errorf("step %d (%q): token %q, want %q", i, s.content, got, s.want)
		}
	}
	if _, err := newTokenFile(filepath.Join(t.TempDir(), "none"), hclog.NewNullLogger()); err == nil {
		t.Error("newTokenFile of a missing file succeeded")
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := newTokenFile(empty, hclog.NewNullLogger()); err == nil {
		t.Error("newTokenFile of an empty file succeeded")
	}
}

func TestStreamLimiter(t *testing.T) {
	l := newStreamLimiter(2)
	steps := []struct {
		op   string // acquire, release or max=N
		addr string
		ok   bool
	}{
		{"acquire", "10.0.0.1", true},
		{"acquire", "10.0.0.1", true},
		{"acquire", "10.0.0.1", false},
		{"acquire", "10.0.0.2", true},
		{"release", "10.0.0.1", true},
		{"acquire", "10.0.0.1", true},
		{"max=1", "", true},
		{"acquire", "10.0.0.2", false}, // a lower cap refuses new streams, never cuts
		{"release", "10.0.0.2", true},
		{"acquire", "10.0.0.2", true},
		{"max=0", "", true},
		{"acquire", "10.0.0.1", true},
		{"acquire", "10.0.0.1", true},
	}
	for i, s := range steps {
		switch s.op {
		case "acquire":
			if got := l.acquire(s.addr); got != s.ok {
				t.Errorf("step %d: acquire(%s) = %v, want %v", i, s.addr, got, s.ok)
			}
		case "release":
			l.release(s.addr)
		case "max=1":
			l.setMax(1)
		case "max=0":
			l.setMax(0)
		}
	}
	if got := l.open["10.0.0.1"]; got != 4 {
		t.Errorf("open streams of 10.0.0.1: %d, want 4", got)
	}
	if got := testutil.ToFloat64(l.rejected.WithLabelValues(rejectPerAddress)); got != 0 {
		t.Errorf("acquire alone counted %g rejections", got)
	}
}

func TestNewSecurity(t *testing.T) {
	ca := certstest.NewCA(t, "kvxds CA")
	dir := t.TempDir()
	files := certstest.WriteFiles(t, dir, ca.Issue(t, certstest.Leaf{}), ca)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := &policy.TLS{CertFile: files.Cert, KeyFile: files.Key, ClientCAFile: files.CA}
	broken := &policy.TLS{CertFile: files.Cert, KeyFile: files.Cert}
	tests := []struct {
		name  string
		xds   *policy.TLS
		admin policy.AdminServer
		want  string // error substring; "" for success
	}{
		{"plaintext", nil, policy.AdminServer{}, ""},
		{"both servers over TLS, with a token", good, policy.AdminServer{TLS: good, TokenFile: token}, ""},
		{"broken xds certificate", broken, policy.AdminServer{}, "xds tls"},
		{"broken admin certificate", good, policy.AdminServer{TLS: broken}, "admin tls"},
		{"missing token file", nil, policy.AdminServer{TokenFile: filepath.Join(dir, "none")}, "admin token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &policy.Policy{XDS: policy.DefaultXDSServer(), Admin: tt.admin}
			p.XDS.TLS = tt.xds
			reg := prometheus.NewRegistry()
			s, err := newSecurity(p, reg, hclog.NewNullLogger())
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("newSecurity = %v, want an error containing %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (s.xdsCerts != nil) != (tt.xds != nil) || (s.adminCerts != nil) != (tt.admin.TLS != nil) || (s.token != nil) != (tt.admin.TokenFile != "") {
				t.Errorf("security %+v for %+v", s, tt)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			servers := 0
			for _, mf := range mfs {
				if mf.GetName() == "kvxds_tls_certificate_expiry_timestamp_seconds" {
					servers = len(mf.GetMetric())
				}
			}
			if want := boolInt(tt.xds != nil) + boolInt(tt.admin.TLS != nil); servers != want {
				t.Errorf("certificate expiry of %d servers, want %d", servers, want)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFollowSendsToken: a follower presents this instance's admin token
// to the instance it follows.
func TestFollowSendsToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := newTokenFile(path, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
	}))
	defer srv.Close()
	f := &ha.Follower{URL: srv.URL}
	(&security{token: tok}).follow(f)
	if f.Client == nil {
		t.Fatal("the follower has no client")
	}
	resp, err := f.Client.Get(srv.URL + ha.DecisionsPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := <-got; h != "Bearer s3cret" {
		t.Errorf("Authorization %q, want the token", h)
	}
}
