// Package dnstest is an authoritative DNS server on loopback for tests:
// it serves the records a test sets (with the A records of SRV targets in
// the additional section, as Consul does), or a failure.
package dnstest

import (
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Modes a server can fail in.
const (
	Answer   = ""         // serve the records
	NXDomain = "nxdomain" // the name does not exist
	ServFail = "servfail" // the server failed
	Timeout  = "timeout"  // never answer
)

// Server is a DNS server on 127.0.0.1 (UDP).
type Server struct {
	// Addr is host:port, a resolver address.
	Addr string

	mu   sync.Mutex
	zone map[string][]dns.RR // by FQDN and type
	mode string
}

// Start starts a server that answers nothing until Set; it stops when the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: pc.LocalAddr().String(), zone: map[string][]dns.RR{}}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(s.serve)}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return s
}

func key(name string, qtype uint16) string { return dns.Fqdn(name) + "/" + dns.TypeToString[qtype] }

// Set replaces the records (zone-file lines, as in
// "vllm.test. 30 IN A 10.0.0.1") and the mode.
func (s *Server) Set(t testing.TB, mode string, records ...string) {
	t.Helper()
	zone := map[string][]dns.RR{}
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			t.Fatalf("record %q: %v", r, err)
		}
		k := key(rr.Header().Name, rr.Header().Rrtype)
		zone[k] = append(zone[k], rr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode, s.zone = mode, zone
}

func (s *Server) serve(w dns.ResponseWriter, q *dns.Msg) {
	s.mu.Lock()
	mode := s.mode
	answer := slices.Clone(s.zone[key(q.Question[0].Name, q.Question[0].Qtype)])
	var extra []dns.RR
	for _, rr := range answer {
		if srv, ok := rr.(*dns.SRV); ok {
			extra = append(extra, s.zone[key(srv.Target, dns.TypeA)]...)
		}
	}
	s.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	switch mode {
	case Timeout:
		return
	case NXDomain:
		m.Rcode = dns.RcodeNameError
	case ServFail:
		m.Rcode = dns.RcodeServerFailure
	default:
		m.Answer, m.Extra = answer, extra
	}
	w.WriteMsg(m)
}
