package policy

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
)

// XDSServer is how the xDS server treats its clients, beyond its address
// (Policy.XDSAddress).
type XDSServer struct {
	// TLS, if set, serves xDS over TLS (mutual TLS with a client CA); nil
	// serves plaintext.
	TLS *TLS
	// MaxStreamsPerAddress caps the concurrent xDS streams from one
	// source IP address; a stream beyond it is refused (RESOURCE_EXHAUSTED).
	// Zero means no cap.
	MaxStreamsPerAddress int
	// Keepalive is how dead clients are found and how often clients may
	// ping.
	Keepalive Keepalive
}

// Keepalive is the xDS server's HTTP/2 keepalive.
type Keepalive struct {
	// Time is how long a connection may be silent before kvxds pings it,
	// and Timeout how long it then waits for the answer before closing
	// the connection.
	Time, Timeout time.Duration
	// MinPingInterval is the shortest interval between a client's pings
	// that kvxds tolerates; a client pinging more often is disconnected.
	MinPingInterval time.Duration
}

// AdminServer is how the admin server is protected, beyond its address
// (Policy.AdminAddress).
type AdminServer struct {
	// TLS, if set, serves the admin endpoints over HTTPS.
	TLS *TLS
	// TokenFile, if set, holds the bearer token every request but
	// /healthz and /readyz must carry (Authorization: Bearer ...). It is
	// read again when it changes. Relative to the policy file.
	TokenFile string
}

// Defaults of the xds block. Keepalive settings are at least
// MinKeepaliveInterval: gRPC raises shorter ones to it.
const (
	DefaultMaxStreamsPerAddress     = 1000
	MaxStreamsPerAddressLimit       = 1000000
	DefaultKeepaliveTime            = 30 * time.Second
	DefaultKeepaliveTimeout         = 10 * time.Second
	DefaultKeepaliveMinPingInterval = 5 * time.Second
	MinKeepaliveInterval            = time.Second
)

// DefaultXDSServer returns the xds block's settings when it sets nothing
// but its address.
func DefaultXDSServer() XDSServer {
	return XDSServer{
		MaxStreamsPerAddress: DefaultMaxStreamsPerAddress,
		Keepalive: Keepalive{
			Time:            DefaultKeepaliveTime,
			Timeout:         DefaultKeepaliveTimeout,
			MinPingInterval: DefaultKeepaliveMinPingInterval,
		},
	}
}

// xdsExtraSpec is what an xds block holds beyond its address (decoded
// from serverSpec.Rest). Address is listed only so that a misspelt
// attribute is matched against it in suggestions; it was decoded already.
type xdsExtraSpec struct {
	Address                  *hcl.Attribute `hcl:"address,optional"`
	MaxStreamsPerAddress     *hcl.Attribute `hcl:"max_streams_per_address,optional"`
	KeepaliveTime            *hcl.Attribute `hcl:"keepalive_time,optional"`
	KeepaliveTimeout         *hcl.Attribute `hcl:"keepalive_timeout,optional"`
	KeepaliveMinPingInterval *hcl.Attribute `hcl:"keepalive_min_ping_interval,optional"`
	TLS                      []tlsSpec      `hcl:"tls,block"`
}

// adminExtraSpec is what an admin block holds beyond its address.
type adminExtraSpec struct {
	Address   *hcl.Attribute `hcl:"address,optional"`
	TokenFile *hcl.Attribute `hcl:"token_file,optional"`
	TLS       []tlsSpec      `hcl:"tls,block"`
}

// xdsServer decodes the rest of the xds blocks; the first one counts, the
// others are checked for their own problems (server reports them as
// duplicates).
func (d *decoder) xdsServer(specs []serverSpec) XDSServer {
	out := DefaultXDSServer()
	for i := range specs {
		x := d.xdsExtra(&specs[i])
		if i == 0 {
			out = x
		}
	}
	return out
}

func (d *decoder) xdsExtra(blk *serverSpec) XDSServer {
	x := DefaultXDSServer()
	if blk.Rest == nil {
		return x
	}
	var spec xdsExtraSpec
	d.add(gohcl.DecodeBody(blk.Rest, nil, &spec))
	x.TLS = d.tls("xds", spec.TLS)
	if a := spec.MaxStreamsPerAddress; a != nil {
		if n, ok := d.uintIn(a.Name, a.Expr, 0, MaxStreamsPerAddressLimit, "Invalid stream cap"); ok {
			x.MaxStreamsPerAddress = int(n)
		}
	}
	for _, k := range []struct {
		a   *hcl.Attribute
		dst *time.Duration
	}{
		{spec.KeepaliveTime, &x.Keepalive.Time},
		{spec.KeepaliveTimeout, &x.Keepalive.Timeout},
		{spec.KeepaliveMinPingInterval, &x.Keepalive.MinPingInterval},
	} {
		if k.a == nil {
			continue
		}
		dur, ok := d.durationOr(k.a, *k.dst, "")
		if ok && dur < MinKeepaliveInterval {
			d.errorf(k.a.Expr.Range(), "Invalid keepalive", "%s %s is too short; use at least %s, gRPC's own minimum.", k.a.Name, dur, MinKeepaliveInterval)
			continue
		}
		*k.dst = dur
	}
	return x
}

// adminServer decodes the rest of the admin blocks, as xdsServer.
func (d *decoder) adminServer(specs []serverSpec) AdminServer {
	var out AdminServer
	for i := range specs {
		a := d.adminExtra(&specs[i])
		if i == 0 {
			out = a
		}
	}
	return out
}

func (d *decoder) adminExtra(blk *serverSpec) AdminServer {
	var a AdminServer
	if blk.Rest == nil {
		return a
	}
	var spec adminExtraSpec
	d.add(gohcl.DecodeBody(blk.Rest, nil, &spec))
	a.TLS = d.tls("admin", spec.TLS)
	if attr := spec.TokenFile; attr != nil {
		a.TokenFile = d.path(attr)
	}
	return a
}

// String describes the xds block's settings beyond the address, for logs.
func (x XDSServer) String() string {
	tls := "plaintext"
	if x.TLS != nil {
		tls = "tls"
		if x.TLS.ClientCAFile != "" {
			tls = "mutual tls"
		}
	}
	return fmt.Sprintf("%s, max %d streams per address, keepalive %s/%s, client pings at least %s apart",
		tls, x.MaxStreamsPerAddress, x.Keepalive.Time, x.Keepalive.Timeout, x.Keepalive.MinPingInterval)
}

// serverSpec is an xds or admin block; the rest of it is decoded by
// xdsServer and adminServer (servers.go).
type serverSpec struct {
	DefRange hcl.Range      `hcl:",def_range"`
	Address  *hcl.Attribute `hcl:"address,optional"`
	Rest     hcl.Body       `hcl:",remain"`
}

func (s serverSpec) defRange() hcl.Range { return s.DefRange }

// server is the xds or the admin server's address as decoded so far.
type server struct {
	addr  *string        // where the address goes in the Policy
	hp    hostPort       // parsed *addr
	block *serverSpec    // the first block, if any
	attr  *hcl.Attribute // the address attribute, if set
	bad   bool           // the address did not decode
}

func mustHostPort(s string) hostPort {
	hp, err := parseHostPort(s, true)
	if err != nil {
		panic(fmt.Sprintf("policy: bad built-in address %q: %v", s, err))
	}
	return hp
}

// server decodes the address of an xds or admin block into srv; a
// duplicate block (after srv.block) is still checked so that its own
// problems show too.
func (d *decoder) server(blk *serverSpec, srv *server) {
	dup := srv.block != nil
	if !dup {
		srv.block = blk
	}
	a := blk.Address
	if a == nil {
		return
	}
	s, ok := d.str(a.Name, a.Expr)
	if !ok {
		srv.bad = srv.bad || !dup
		return
	}
	hp, err := parseHostPort(s, true)
	if err != nil {
		ae := err.(*addrError)
		d.errorf(a.Expr.Range(), ae.summary, "%s", ae.detail)
		srv.bad = srv.bad || !dup
		return
	}
	if !dup {
		*srv.addr, srv.hp, srv.attr = s, hp, a
	}
}

// checkServerClash keeps the xds and admin servers on different sockets.
// An address left unset whose default the other server was given takes
// the other's default instead (the two swap), so that only addresses
// written in the file can clash.
func (d *decoder) checkServerClash(xds, admin *server) {
	if xds.bad || admin.bad || !xds.hp.overlaps(admin.hp) {
		return
	}
	switch {
	case xds.attr == nil:
		*xds.addr, xds.hp = DefaultAdminAddress, mustHostPort(DefaultAdminAddress)
		return
	case admin.attr == nil:
		*admin.addr, admin.hp = DefaultXDSAddress, mustHostPort(DefaultXDSAddress)
		return
	}
	// Point at whichever of the two the user wrote last.
	at := admin.attr
	if xds.attr.Range.Start.Byte > at.Range.Start.Byte {
		at = xds.attr
	}
	if xds.hp == admin.hp {
		d.errorf(at.Expr.Range(), "Address conflict",
			"The xds address %s and the admin address %s are the same; give each server its own port.", *xds.addr, *admin.addr)
		return
	}
	everywhere := *xds.addr
	if !xds.hp.everywhere() {
		everywhere = *admin.addr
	}
	d.errorf(at.Expr.Range(), "Address conflict",
		"The xds address %s and the admin address %s overlap, as %s listens on every interface; give each server its own port.", *xds.addr, *admin.addr, everywhere)
}
