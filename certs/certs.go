// Package certs serves a TLS server certificate, and the CA that client
// certificates must chain to, from files that are rotated on disk
// (cert-manager, SPIFFE helpers, Kubernetes Secret volumes).
//
// A Reloader reads the files once when created, then again whenever they
// change: it watches their directories (so that it sees files replaced by
// an atomic rename and a Kubernetes volume's "..data" symlink being
// swapped), and polls in case an event is lost. Every TLS handshake takes
// the material current at that moment through tls.Config's
// GetConfigForClient, so new connections use a new certificate at once
// while established connections, and the streams on them, are untouched.
//
// It fails static: new files that do not make a usable certificate (a key
// that does not match, a half-written file, a CA file without
// certificates) are logged and counted, and the last good material keeps
// serving until the files are fixed.
package certs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvxds/kvxds/filewatch"
)

// DefaultPollInterval is Options.PollInterval when it is not set.
const DefaultPollInterval = 10 * time.Second

// Options configure a Reloader.
type Options struct {
	// CertFile and KeyFile are the server's certificate chain and private
	// key, PEM-encoded. Both are required.
	CertFile, KeyFile string
	// ClientCAFile, if set, holds the PEM certificates that client
	// certificates must chain to; clients must then present one
	// (tls.RequireAndVerifyClientCert). Unset, clients are not asked for
	// a certificate.
	ClientCAFile string
	// Name tells the server in logs and in the metrics' "server" label
	// (as "xds" or "admin").
	Name   string
	Logger hclog.Logger
	// Registerer, if not nil, registers kvxds_tls_reloads_total and
	// kvxds_tls_certificate_expiry_timestamp_seconds for this server.
	Registerer prometheus.Registerer
	// Debounce is how long the files must stay quiet after a change
	// before they are read, so that a cert and key written one after the
	// other load once. Defaults to filewatch.DefaultDebounce.
	Debounce time.Duration
	// PollInterval is how often the files are read regardless of events.
	// Defaults to DefaultPollInterval.
	PollInterval time.Duration
}

// Reloader holds the current TLS material of one server.
type Reloader struct {
	opts    Options
	log     hclog.Logger
	current atomic.Pointer[material]

	mu   sync.Mutex // serialises Reload
	last [sha256.Size]byte

	reloads *prometheus.CounterVec
	expiry  prometheus.Gauge
}

// material is one good set of files, parsed.
type material struct {
	cert     tls.Certificate
	leaf     *x509.Certificate
	clientCA *x509.CertPool // nil: no client certificates asked for
}

// New reads the files and returns a Reloader serving them. It fails if the
// files do not make a usable certificate: a server must not start without
// one.
func New(opts Options) (*Reloader, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("certs: a certificate file and a key file are required")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	labels := prometheus.Labels{"server": opts.Name}
	r := &Reloader{
		opts: opts,
		log:  opts.Logger,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "kvxds_tls_reloads_total",
			Help:        "Loads of a server's TLS certificate files, by result: ok, or error (the last good certificate kept serving).",
			ConstLabels: labels,
		}, []string{"result"}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "kvxds_tls_certificate_expiry_timestamp_seconds",
			Help:        "When the certificate a server presents expires (Unix time).",
			ConstLabels: labels,
		}),
	}
	sum, m, err := r.read()
	if err != nil {
		return nil, err
	}
	r.store(sum, m)
	r.reloads.WithLabelValues("ok").Inc()
	r.reloads.WithLabelValues("error")
	if reg := opts.Registerer; reg != nil {
		if err := reg.Register(r.reloads); err != nil {
			return nil, fmt.Errorf("certs: registering metrics: %w", err)
		}
		if err := reg.Register(r.expiry); err != nil {
			reg.Unregister(r.reloads)
			return nil, fmt.Errorf("certs: registering metrics: %w", err)
		}
	}
	r.warnValidity(m.leaf)
	return r, nil
}

// Leaf returns the certificate being served.
func (r *Reloader) Leaf() *x509.Certificate { return r.current.Load().leaf }

// ServerConfig returns a server configuration that takes the current
// certificate (and client CA) at each handshake and offers nextProtos in
// ALPN (gRPC needs "h2").
func (r *Reloader) ServerConfig(nextProtos ...string) *tls.Config {
	protos := slices.Clone(nextProtos)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current.Load()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   protos,
				Certificates: []tls.Certificate{m.cert},
			}
			if m.clientCA != nil {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = m.clientCA
			}
			return c, nil
		},
	}
}

// Reload reads the files now. It returns an error, and keeps the current
// material, if they do not make a usable certificate; files whose content
// has not changed since the last read are not parsed again.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum, m, err := r.read()
	if sum == r.last {
		return err
	}
	if err != nil {
		// Count before logging: tests wait on the log line.
		r.reloads.WithLabelValues("error").Inc()
		r.last = sum // log a broken content once
		r.log.Error("TLS certificate files rejected; the last good certificate keeps serving",
			"server", r.opts.Name, "error", err, "serving serial", r.current.Load().leaf.SerialNumber.String())
		return err
	}
	r.store(sum, m)
	r.reloads.WithLabelValues("ok").Inc()
	r.log.Info("TLS certificate loaded", "server", r.opts.Name, "serial", m.leaf.SerialNumber.String(),
		"subject", m.leaf.Subject.String(), "not after", m.leaf.NotAfter.UTC().Format(time.RFC3339), "client ca", m.clientCA != nil)
	r.warnValidity(m.leaf)
	return nil
}

func (r *Reloader) store(sum [sha256.Size]byte, m *material) {
	r.last = sum
	r.current.Store(m)
	r.expiry.Set(float64(m.leaf.NotAfter.Unix()))
}

// warnValidity logs a certificate that clients will refuse: it is served
// all the same, as nothing better is at hand.
func (r *Reloader) warnValidity(leaf *x509.Certificate) {
	now := time.Now()
	switch {
	case now.After(leaf.NotAfter):
		r.log.Warn("TLS certificate has expired; clients will refuse it", "server", r.opts.Name,
			"serial", leaf.SerialNumber.String(), "not after", leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		r.log.Warn("TLS certificate is not valid yet; clients will refuse it", "server", r.opts.Name,
			"serial", leaf.SerialNumber.String(), "not before", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
}

// read reads and parses the files. sum identifies what was read, also
// when it does not parse.
func (r *Reloader) read() (sum [sha256.Size]byte, m *material, err error) {
	h := sha256.New()
	var contents [3][]byte
	var errs []error
	for i, name := range []string{r.opts.CertFile, r.opts.KeyFile, r.opts.ClientCAFile} {
		if name == "" {
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			errs = append(errs, err)
			fmt.Fprintf(h, "%d:error:%v;", i, err)
			continue
		}
		contents[i] = data
		fmt.Fprintf(h, "%d:%d:", i, len(data))
		h.Write(data)
	}
	copy(sum[:], h.Sum(nil))
	if len(errs) > 0 {
		return sum, nil, fmt.Errorf("certs: %w", errors.Join(errs...))
	}
	m, err = parse(contents[0], contents[1], contents[2], r.opts)
	return sum, m, err
}

func parse(certPEM, keyPEM, caPEM []byte, opts Options) (*material, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certs: %s and %s: %w", opts.CertFile, opts.KeyFile, err)
	}
	m := &material{cert: cert, leaf: cert.Leaf}
	if m.leaf == nil {
		if m.leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certs: %s: %w", opts.CertFile, err)
		}
	}
	if opts.ClientCAFile != "" {
		pool := x509.NewCertPool()
		n := 0
		for rest := caPEM; ; {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				if len(bytes.TrimSpace(rest)) > 0 {
					return nil, fmt.Errorf("certs: %s: data after the last certificate is not PEM", opts.ClientCAFile)
				}
				break
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			ca, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certs: %s: %w", opts.ClientCAFile, err)
			}
			pool.AddCert(ca)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("certs: %s holds no PEM certificate", opts.ClientCAFile)
		}
		m.clientCA = pool
	}
	return m, nil
}

// Run watches the files until ctx is done, then returns nil. It returns an
// error only if no directory of the files can be watched. Run must be
// called at most once.
func (r *Reloader) Run(ctx context.Context) error {
	err := filewatch.Run(ctx, filewatch.Options{
		Files:        []string{r.opts.CertFile, r.opts.KeyFile, r.opts.ClientCAFile},
		Debounce:     r.opts.Debounce,
		PollInterval: r.opts.PollInterval,
		Changed:      func() { r.Reload() },
		Log:          r.log.With("server", r.opts.Name),
	})
	if err != nil {
		return fmt.Errorf("certs: %s certificate files: %w", r.opts.Name, err)
	}
	return nil
}
