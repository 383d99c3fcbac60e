package bootstrap

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// TLS is how a data plane reaches kvxds over TLS (the policy's xds tls
// block). The files are read by the data plane, which watches them for
// rotation: Envoy reloads file-based certificates when they change, gRPC
// clients every few minutes.
type TLS struct {
	// CAFile holds the PEM certificates of the CA that signed kvxds's
	// certificate. Required.
	CAFile string
	// CertFile and KeyFile are the data plane's own certificate and key,
	// for kvxds's client_ca_file (mutual TLS); both or neither.
	CertFile, KeyFile string
	// ServerName is the name kvxds's certificate holds, sent as SNI.
	// Envoy checks it against the certificate's subject alternative
	// names; unset, it checks the xds addresses' hosts. gRPC clients
	// always check the host of the address they dial, so for them
	// ServerName must be unset or that host.
	ServerName string
}

// TransportSocketName is the name of Envoy's TLS transport socket.
const TransportSocketName = "envoy.transport_sockets.tls"

func (t *TLS) check() error {
	switch {
	case t.CAFile == "":
		return errors.New("tls: a CA file is required to verify kvxds's certificate")
	case (t.CertFile == "") != (t.KeyFile == ""):
		return errors.New("tls: give both a client certificate and its key, or neither")
	}
	return nil
}

// envoyTransportSocket is the ADS cluster's TLS: kvxds's certificate
// verified against the CA and the expected names, the client certificate
// if any, and ALPN h2 (gRPC).
func (t *TLS) envoyTransportSocket(hosts []string) (*core.TransportSocket, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	names := hosts
	if t.ServerName != "" {
		names = []string{t.ServerName}
	}
	var sans []*tlsv3.SubjectAltNameMatcher
	var seen []string
	for _, name := range names {
		if slices.Contains(seen, name) {
			continue
		}
		seen = append(seen, name)
		typ := tlsv3.SubjectAltNameMatcher_DNS
		if _, err := netip.ParseAddr(name); err == nil {
			typ = tlsv3.SubjectAltNameMatcher_IP_ADDRESS
		}
		sans = append(sans, &tlsv3.SubjectAltNameMatcher{
			SanType: typ,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: name}},
		})
	}
	ctx := &tlsv3.UpstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols: []string{"h2"},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{
				ValidationContext: &tlsv3.CertificateValidationContext{
					TrustedCa:                 fileSource(t.CAFile),
					MatchTypedSubjectAltNames: sans,
				},
			},
		},
		Sni: sni(t.ServerName, seen),
	}
	if t.CertFile != "" {
		ctx.CommonTlsContext.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: fileSource(t.CertFile),
			PrivateKey:       fileSource(t.KeyFile),
		}}
	}
	if err := ctx.ValidateAll(); err != nil {
		return nil, fmt.Errorf("invalid upstream TLS context: %w", err)
	}
	cfg, err := anypb.New(ctx)
	if err != nil {
		return nil, err
	}
	return &core.TransportSocket{
		Name:       TransportSocketName,
		ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: cfg},
	}, nil
}

// sni is the server name to send: the one given, else the one host name
// every address shares (an IP address is never sent as SNI).
func sni(serverName string, hosts []string) string {
	if serverName != "" {
		return serverName
	}
	if len(hosts) != 1 {
		return ""
	}
	if _, err := netip.ParseAddr(hosts[0]); err == nil {
		return ""
	}
	return hosts[0]
}

func fileSource(name string) *core.DataSource {
	return &core.DataSource{Specifier: &core.DataSource_Filename{Filename: name}}
}

// GRPCTLSConfig is the config of gRPC's "tls" channel credentials (gRFC
// A65), which read the files through gRPC's file_watcher certificate
// provider.
type GRPCTLSConfig struct {
	CACertificateFile string `json:"ca_certificate_file"`
	CertificateFile   string `json:"certificate_file,omitempty"`
	PrivateKeyFile    string `json:"private_key_file,omitempty"`
}

// grpcChannelCreds are the credentials gRPC clients reach addr with.
func (t *TLS) grpcChannelCreds(host string) (GRPCChannelCred, error) {
	if err := t.check(); err != nil {
		return GRPCChannelCred{}, err
	}
	if t.ServerName != "" && t.ServerName != host {
		return GRPCChannelCred{}, fmt.Errorf("tls: gRPC clients verify kvxds's certificate against the host they dial (%s), not a server name (%s): give an address whose host the certificate holds, and no server name", host, t.ServerName)
	}
	return GRPCChannelCred{Type: "tls", Config: &GRPCTLSConfig{
		CACertificateFile: t.CAFile,
		CertificateFile:   t.CertFile,
		PrivateKeyFile:    t.KeyFile,
	}}, nil
}
