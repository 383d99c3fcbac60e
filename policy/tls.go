package policy

import (
	"path/filepath"

	"github.com/hashicorp/hcl/v2"
)

// TLS is a tls block of the xds or admin server: the server's certificate
// and, optionally, the CA its clients' certificates must chain to. The
// files are read when the server starts and again whenever they change
// on disk; paths are relative to the policy file's directory.
type TLS struct {
	// CertFile is the server's PEM certificate chain, KeyFile its PEM
	// private key.
	CertFile, KeyFile string
	// ClientCAFile, if set, holds the PEM CA certificates that client
	// certificates must chain to: clients must then present a valid
	// certificate (mutual TLS). Empty, clients are not asked for one.
	ClientCAFile string
}

type tlsSpec struct {
	DefRange     hcl.Range      `hcl:",def_range"`
	CertFile     *hcl.Attribute `hcl:"cert_file,optional"`
	KeyFile      *hcl.Attribute `hcl:"key_file,optional"`
	ClientCAFile *hcl.Attribute `hcl:"client_ca_file,optional"`
}

func (s tlsSpec) defRange() hcl.Range { return s.DefRange }

// tls decodes the tls blocks of the xds or admin block named typ (at most
// one); nil without one.
func (d *decoder) tls(typ string, specs []tlsSpec) *TLS {
	if len(specs) == 0 {
		return nil
	}
	// A duplicate is still checked so that its own problems show too,
	// after the duplicate error at the same place.
	atMostOne(d, specs, "a", "tls", "The "+typ+" block", keepOne)
	for i := range specs[1:] {
		d.tlsBlock(&specs[i+1])
	}
	return d.tlsBlock(&specs[0])
}

func (d *decoder) tlsBlock(spec *tlsSpec) *TLS {
	t := &TLS{}
	if d.required(spec.CertFile, spec.DefRange, "tls", "cert_file", `cert_file = "tls/tls.crt"`) {
		t.CertFile = d.path(spec.CertFile)
	}
	if d.required(spec.KeyFile, spec.DefRange, "tls", "key_file", `key_file = "tls/tls.key"`) {
		t.KeyFile = d.path(spec.KeyFile)
	}
	if a := spec.ClientCAFile; a != nil {
		t.ClientCAFile = d.path(a)
	}
	return t
}

// path decodes a file name, relative to the policy file's directory unless
// absolute.
func (d *decoder) path(a *hcl.Attribute) string {
	s, ok := d.str(a.Name, a.Expr)
	if !ok {
		return ""
	}
	if s == "" {
		d.errorf(a.Expr.Range(), "Empty file name", "%s is empty; write the file's path, absolute or relative to the policy file.", a.Name)
		return ""
	}
	if filepath.IsAbs(s) {
		return filepath.Clean(s)
	}
	return filepath.Join(d.dir, s)
}
