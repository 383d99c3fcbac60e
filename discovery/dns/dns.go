// Package dns is a discovery source that finds a pool's replicas in DNS:
// A or AAAA records of a name (with a fixed port), or SRV records (each
// target's port and weight), from the system resolver or a given one
// (Consul's DNS interface on port 8600 is the common case).
//
// It fails static for a bounded time: a lookup that fails (timeout,
// SERVFAIL, NXDOMAIN) or finds nothing keeps the last good answer for
// Config.KeepFor, and only then empties the pool, so a resolver hiccup
// never moves sessions.
package dns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	mdns "github.com/miekg/dns"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
)

// Record types a source looks up.
const (
	SRV  = "SRV"
	A    = "A"
	AAAA = "AAAA"
)

// Config is one dns block of a policy.
type Config struct {
	Name string
	Type string // SRV, A or AAAA
	// Port is the replicas' port for A and AAAA; for SRV it overrides the
	// records' ports when set.
	Port uint32
	// Resolver is an IP host:port; empty means the system's
	// (resolv.conf).
	Resolver string
	// Refresh is the time between lookups; a longer TTL in the answer
	// stretches it (the TTL is its lower bound).
	Refresh time.Duration
	// KeepFor is how long the last good answer outlives failed or empty
	// lookups; zero means DefaultKeepFor(Refresh).
	KeepFor time.Duration
	// Timeout bounds one lookup; zero means the smaller of 2s and Refresh.
	Timeout time.Duration
}

// Defaults and limits of Config (a policy's dns block): the record type
// defaults to SRV.
const (
	DefaultRefresh = 10 * time.Second
	MinRefresh     = time.Second
)

// DefaultKeepFor is ten refresh intervals, and at least a minute.
func DefaultKeepFor(refresh time.Duration) time.Duration {
	return max(10*refresh, time.Minute)
}

// MaxWeight bounds SRV weights, as the policy bounds static weights.
const MaxWeight = fleet.MaxEndpointWeight

// Source looks a name up periodically.
type Source struct {
	cfg      Config
	log      hclog.Logger
	client   *mdns.Client
	servers  []string
	now      func() time.Time
	lastGood time.Time
	hasGood  bool
}

// New checks cfg and prepares the resolver.
func New(cfg Config, logger hclog.Logger) (*Source, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	cfg.Type = strings.ToUpper(cmp.Or(cfg.Type, SRV))
	switch cfg.Type {
	case SRV:
	case A, AAAA:
		if cfg.Port == 0 {
			return nil, fmt.Errorf("dns %s %s: a port is required", cfg.Type, cfg.Name)
		}
	default:
		return nil, fmt.Errorf("dns %s: unknown record type %q", cfg.Name, cfg.Type)
	}
	if cfg.Refresh <= 0 {
		return nil, fmt.Errorf("dns %s: refresh must be positive", cfg.Name)
	}
	cfg.KeepFor = cmp.Or(cfg.KeepFor, DefaultKeepFor(cfg.Refresh))
	cfg.Timeout = cmp.Or(cfg.Timeout, min(2*time.Second, cfg.Refresh))
	s := &Source{cfg: cfg, log: logger, client: &mdns.Client{Timeout: cfg.Timeout}, now: time.Now}
	if cfg.Resolver != "" {
		s.servers = []string{cfg.Resolver}
	} else {
		cc, err := mdns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("dns %s: reading the system resolver: %w", cfg.Name, err)
		}
		for _, srv := range cc.Servers {
			s.servers = append(s.servers, net.JoinHostPort(srv, cc.Port))
		}
	}
	return s, nil
}

// Run looks the name up now and then every refresh interval (or TTL).
func (s *Source) Run(ctx context.Context, up chan<- discovery.Update) {
	for {
		u, ttl := s.refresh(ctx)
		select {
		case up <- u:
		case <-ctx.Done():
			return
		}
		wait := max(s.cfg.Refresh, ttl)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// refresh does one lookup and decides what to report: the answer; an
// error, while the last good answer may still serve; or, once it has
// outlived KeepFor, no targets.
func (s *Source) refresh(ctx context.Context) (discovery.Update, time.Duration) {
	ts, ttl, err := s.lookup(ctx)
	if err == nil && len(ts) == 0 {
		err = errors.New("no records")
	}
	now := s.now()
	if err == nil {
		s.lastGood, s.hasGood = now, true
		return discovery.Update{Targets: ts}, ttl
	}
	err = fmt.Errorf("dns %s %s: %w", s.cfg.Type, s.cfg.Name, err)
	if s.hasGood && now.Sub(s.lastGood) > s.cfg.KeepFor {
		s.log.Warn("DNS answers failing for too long; emptying the pool", "name", s.cfg.Name, "since", s.lastGood, "error", err)
		return discovery.Update{Targets: []fleet.Endpoint{}}, 0
	}
	return discovery.Update{Err: err}, 0
}

func (s *Source) lookup(ctx context.Context) ([]fleet.Endpoint, time.Duration, error) {
	qtype := map[string]uint16{SRV: mdns.TypeSRV, A: mdns.TypeA, AAAA: mdns.TypeAAAA}[s.cfg.Type]
	resp, err := s.exchange(ctx, s.cfg.Name, qtype)
	if err != nil {
		return nil, 0, err
	}
	minTTL := uint32(0)
	note := func(h *mdns.RR_Header) {
		if minTTL == 0 || h.Ttl < minTTL {
			minTTL = h.Ttl
		}
	}
	var out []fleet.Endpoint
	switch s.cfg.Type {
	case A, AAAA:
		for _, rr := range resp.Answer {
			if ip := addrOf(rr); ip != "" {
				note(rr.Header())
				out = append(out, fleet.Endpoint{Host: ip, Port: s.cfg.Port})
			}
		}
	case SRV:
		// Addresses of SRV targets come in the additional section
		// (Consul sends them); others are looked up.
		extra := map[string][]string{}
		for _, rr := range resp.Extra {
			if ip := addrOf(rr); ip != "" {
				name := strings.ToLower(rr.Header().Name)
				extra[name] = append(extra[name], ip)
			}
		}
		for _, rr := range resp.Answer {
			srv, ok := rr.(*mdns.SRV)
			if !ok {
				continue
			}
			note(&srv.Hdr)
			target := strings.ToLower(srv.Target)
			ips, ok := extra[target]
			if !ok {
				if ips, err = s.addresses(ctx, target); err != nil {
					return nil, 0, fmt.Errorf("resolving SRV target %s: %w", srv.Target, err)
				}
			}
			port := uint32(srv.Port)
			if s.cfg.Port != 0 {
				port = s.cfg.Port
			}
			for _, ip := range ips {
				out = append(out, fleet.Endpoint{Host: ip, Port: port, Weight: uint32(min(max(srv.Weight, 1), MaxWeight))})
			}
		}
	}
	out = dedupe(out)
	return out, time.Duration(minTTL) * time.Second, nil
}

// addresses resolves an SRV target's A and AAAA records.
func (s *Source) addresses(ctx context.Context, name string) ([]string, error) {
	var ips []string
	for _, qt := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		resp, err := s.exchange(ctx, name, qt)
		if err != nil {
			return nil, err
		}
		for _, rr := range resp.Answer {
			if ip := addrOf(rr); ip != "" {
				ips = append(ips, ip)
			}
		}
	}
	if len(ips) == 0 {
		return nil, errors.New("no addresses")
	}
	return ips, nil
}

// exchange asks each resolver in turn, over TCP when UDP is truncated,
// and turns DNS error codes into errors.
func (s *Source) exchange(ctx context.Context, name string, qtype uint16) (*mdns.Msg, error) {
	q := new(mdns.Msg)
	q.SetQuestion(mdns.Fqdn(name), qtype)
	var errs []error
	for _, srv := range s.servers {
		resp, _, err := s.client.ExchangeContext(ctx, q, srv)
		if err == nil && resp.Truncated {
			tcp := &mdns.Client{Net: "tcp", Timeout: s.client.Timeout}
			resp, _, err = tcp.ExchangeContext(ctx, q, srv)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", srv, err))
			continue
		}
		if resp.Rcode != mdns.RcodeSuccess {
			errs = append(errs, fmt.Errorf("%s: %s", srv, mdns.RcodeToString[resp.Rcode]))
			continue
		}
		return resp, nil
	}
	return nil, errors.Join(errs...)
}

func addrOf(rr mdns.RR) string {
	switch r := rr.(type) {
	case *mdns.A:
		return r.A.String()
	case *mdns.AAAA:
		return r.AAAA.String()
	}
	return ""
}

// dedupe drops repeated addresses, keeping the first.
func dedupe(ts []fleet.Endpoint) []fleet.Endpoint {
	seen := map[string]bool{}
	out := ts[:0]
	for _, t := range ts {
		if a := t.Address(); !seen[a] {
			seen[a] = true
			out = append(out, t)
		}
	}
	discovery.SortTargets(out)
	return slices.Clip(out)
}

// ID names a source by its settings, for the discovery manager.
func (c Config) ID() string {
	return "dns " + strings.Join([]string{strings.ToUpper(cmp.Or(c.Type, SRV)), c.Name, strconv.FormatUint(uint64(c.Port), 10), c.Resolver, c.Refresh.String(), c.KeepFor.String()}, " ")
}
