package controller

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/kvxds/kvxds/certs"
	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/policy"
)

// security is how the xDS and admin servers protect themselves: TLS
// certificates that follow their files, the admin token, and the cap on
// streams per address. It is set up from the initial policy; the files
// are reloaded when they change, the stream cap on every policy reload,
// and the rest takes effect on restart.
type security struct {
	xdsCerts, adminCerts *certs.Reloader
	token                *tokenFile
	limiter              *streamLimiter
	handshakes           *countingCreds // nil without xds TLS
}

// newSecurity loads the files the policy names; it fails if they do not
// make a usable certificate or token, as a server must not start without
// the protection it was told to have.
func newSecurity(p *policy.Policy, reg prometheus.Registerer, log hclog.Logger) (*security, error) {
	s := &security{limiter: newStreamLimiter(p.XDS.MaxStreamsPerAddress)}
	if err := reg.Register(s.limiter.rejected); err != nil {
		return nil, fmt.Errorf("registering stream metrics: %w", err)
	}
	var err error
	if t := p.XDS.TLS; t != nil {
		s.xdsCerts, err = certs.New(certs.Options{
			CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile,
			Name: "xds", Logger: log.Named("tls"), Registerer: reg,
		})
		if err != nil {
			return nil, fmt.Errorf("xds tls: %w", err)
		}
		s.handshakes = newCountingCreds(credentials.NewTLS(s.xdsCerts.ServerConfig("h2")), log.Named("xds"))
		if err := reg.Register(s.handshakes.failures); err != nil {
			return nil, fmt.Errorf("registering handshake metrics: %w", err)
		}
	}
	if t := p.Admin.TLS; t != nil {
		s.adminCerts, err = certs.New(certs.Options{
			CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCAFile,
			Name: "admin", Logger: log.Named("tls"), Registerer: reg,
		})
		if err != nil {
			return nil, fmt.Errorf("admin tls: %w", err)
		}
	}
	if f := p.Admin.TokenFile; f != "" {
		if s.token, err = newTokenFile(f, log.Named("admin")); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// grpcOptions are the xDS server's credentials, keepalive and stream cap.
func (s *security) grpcOptions(x policy.XDSServer) []grpc.ServerOption {
	// A policy not made by policy.Parse may leave them zero, which gRPC
	// reads as its own defaults (pings every 2 hours, client pings at
	// most every 5 minutes): too slow to find dead data planes, too
	// strict for clients.
	ka := policy.Keepalive{
		Time:            cmp.Or(x.Keepalive.Time, policy.DefaultKeepaliveTime),
		Timeout:         cmp.Or(x.Keepalive.Timeout, policy.DefaultKeepaliveTimeout),
		MinPingInterval: cmp.Or(x.Keepalive.MinPingInterval, policy.DefaultKeepaliveMinPingInterval),
	}
	opts := []grpc.ServerOption{
		// Data planes keep their ADS stream for days: probe dead peers,
		// and let clients ping as often as the policy allows.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: ka.Time, Timeout: ka.Timeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: ka.MinPingInterval, PermitWithoutStream: true}),
		grpc.ChainStreamInterceptor(s.limiter.intercept),
	}
	if s.handshakes != nil {
		opts = append(opts, grpc.Creds(s.handshakes))
	}
	return opts
}

// adminListener wraps the admin listener in TLS if the policy asks.
func (s *security) adminListener(lis net.Listener) net.Listener {
	if s.adminCerts == nil {
		return lis
	}
	return tls.NewListener(lis, s.adminCerts.ServerConfig("http/1.1"))
}

// adminHandler requires the token, if any, on h.
func (s *security) adminHandler(h http.Handler) http.Handler {
	if s.token == nil {
		return h
	}
	return requireToken(s.token, h)
}

// follow lets a follower present this instance's admin token to the
// instance it follows.
func (s *security) follow(peers ha.Peers) {
	f, ok := peers.(*ha.Follower)
	if !ok || s.token == nil {
		return
	}
	base := http.DefaultTransport
	if f.Client != nil && f.Client.Transport != nil {
		base = f.Client.Transport
	}
	f.Client = &http.Client{Transport: bearerTransport{tok: s.token, base: base}}
}

// peerClient is the client that reaches the other instances' admin
// servers, presenting this instance's admin token: the follower's own
// when it follows a named instance.
func (s *security) peerClient(peers ha.Peers) *http.Client {
	if f, ok := peers.(*ha.Follower); ok && f.Client != nil {
		return f.Client
	}
	if s.token == nil {
		return &http.Client{}
	}
	return &http.Client{Transport: bearerTransport{tok: s.token, base: http.DefaultTransport}}
}

// reloaders are the certificate reloaders to run.
func (s *security) reloaders() []*certs.Reloader {
	var out []*certs.Reloader
	for _, r := range []*certs.Reloader{s.xdsCerts, s.adminCerts} {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// run watches the certificate files in wg until ctx is done; errc
// receives a watch that cannot start.
func (s *security) run(ctx context.Context, wg *sync.WaitGroup, errc chan<- error) {
	for _, r := range []*certs.Reloader{s.xdsCerts, s.adminCerts} {
		if r == nil {
			continue
		}
		wg.Go(func() {
			if err := r.Run(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("tls certificate watcher: %w", err)
			}
		})
	}
}

// warnUnprotected logs an admin server that anyone who reaches its
// address may read.
func (s *security) warnUnprotected(log hclog.Logger, admin net.Addr) {
	if s.token == nil && !loopbackOnly(admin) {
		log.Warn("the admin server listens beyond loopback without a token_file: anyone who reaches it can read the fleet, the connected data planes and the decisions; set admin { token_file = ... }", "admin", admin.String())
	}
}

// applyPolicy takes the settings that can change while serving (the
// stream cap) and warns about those that take effect on restart.
func (s *security) applyPolicy(log hclog.Logger, p, initial *policy.Policy) {
	s.limiter.setMax(p.XDS.MaxStreamsPerAddress)
	if p == initial {
		return
	}
	if !reflect.DeepEqual(p.XDS.TLS, initial.XDS.TLS) || p.XDS.Keepalive != initial.XDS.Keepalive {
		log.Warn("xds tls and keepalive changes take effect on restart; the certificate, key and CA files themselves are reloaded whenever they change",
			"xds", p.XDS.String(), "in force", initial.XDS.String())
	}
	if !reflect.DeepEqual(p.Admin, initial.Admin) {
		log.Warn("admin tls and token_file changes take effect on restart; the files themselves are reloaded whenever they change")
	}
}
