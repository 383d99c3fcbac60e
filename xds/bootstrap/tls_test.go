package bootstrap

import (
	"encoding/json"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

var mutualTLS = &TLS{CAFile: "/etc/kvxds/ca.crt", CertFile: "/etc/envoy/tls.crt", KeyFile: "/etc/envoy/tls.key"}

func TestEnvoyTLSGolden(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     Options
		wantSNI  string
		wantSANs []string
		client   bool
	}{
		{"envoy-tls.yaml", Options{NodeID: "envoy-1", XDSAddress: "127.0.0.1:18000", TLS: mutualTLS},
			"", []string{"127.0.0.1"}, true},
		{"envoy-tls-dns.yaml", Options{NodeID: "edge", XDSAddress: "kvxds.infra.svc:18000", Delta: true,
			TLS: &TLS{CAFile: "/etc/kvxds/ca.crt"}},
			"kvxds.infra.svc", []string{"kvxds.infra.svc"}, false},
		{"envoy-tls-ha.yaml", Options{NodeID: "envoy-1", XDSAddresses: []string{"10.0.0.5:18000", "10.0.0.6:18000"},
			TLS: &TLS{CAFile: "ca.crt", CertFile: "tls.crt", KeyFile: "tls.key", ServerName: "kvxds.example.com"}},
			"kvxds.example.com", []string{"kvxds.example.com"}, true},
		{"envoy-tls-ha-hosts.yaml", Options{NodeID: "envoy-1", XDSAddresses: []string{"10.0.0.5:18000", "10.0.0.6:18000", "10.0.0.5:18001"},
			TLS: &TLS{CAFile: "ca.crt"}},
			"", []string{"10.0.0.5", "10.0.0.6"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnvoyYAML(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, got)

			// What Envoy reads back: a valid bootstrap whose ADS cluster
			// speaks TLS as asked.
			js, err := yaml.YAMLToJSON(got)
			if err != nil {
				t.Fatal(err)
			}
			var b bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(js, &b); err != nil {
				t.Fatal(err)
			}
			if err := b.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			ts := b.GetStaticResources().GetClusters()[0].GetTransportSocket()
			if ts.GetName() != TransportSocketName {
				t.Fatalf("transport socket %q", ts.GetName())
			}
			var ctx tlsv3.UpstreamTlsContext
			if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
				t.Fatal(err)
			}
			if err := ctx.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			common := ctx.GetCommonTlsContext()
			if alpn := common.GetAlpnProtocols(); len(alpn) != 1 || alpn[0] != "h2" {
				t.Errorf("ALPN %v, want [h2]", alpn)
			}
			if ctx.GetSni() != tc.wantSNI {
				t.Errorf("SNI %q, want %q", ctx.GetSni(), tc.wantSNI)
			}
			vc := common.GetValidationContext()
			if vc.GetTrustedCa().GetFilename() != tc.opts.TLS.CAFile {
				t.Errorf("trusted CA %v, want %s", vc.GetTrustedCa(), tc.opts.TLS.CAFile)
			}
			var sans []string
			for _, m := range vc.GetMatchTypedSubjectAltNames() {
				sans = append(sans, m.GetMatcher().GetExact())
			}
			if strings.Join(sans, ",") != strings.Join(tc.wantSANs, ",") {
				t.Errorf("SAN matchers %v, want %v", sans, tc.wantSANs)
			}
			certs := common.GetTlsCertificates()
			if tc.client != (len(certs) == 1) {
				t.Fatalf("client certificates %v, want one: %v", certs, tc.client)
			}
			if tc.client && (certs[0].GetCertificateChain().GetFilename() != tc.opts.TLS.CertFile || certs[0].GetPrivateKey().GetFilename() != tc.opts.TLS.KeyFile) {
				t.Errorf("client certificate %v", certs[0])
			}
		})
	}
}

func TestGRPCTLSGolden(t *testing.T) {
	got, err := GRPCJSON(Options{NodeID: "client-1", XDSAddresses: []string{"127.0.0.1:18000", "127.0.0.1:18001"}, TLS: mutualTLS})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "grpc-tls.json", append(got, '\n'))
	var b struct {
		XDSServers []struct {
			ChannelCreds []struct {
				Type   string            `json:"type"`
				Config map[string]string `json:"config"`
			} `json:"channel_creds"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal(got, &b); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ca_certificate_file": "/etc/kvxds/ca.crt",
		"certificate_file":    "/etc/envoy/tls.crt",
		"private_key_file":    "/etc/envoy/tls.key",
	}
	for _, s := range b.XDSServers {
		cc := s.ChannelCreds
		if len(cc) != 1 || cc[0].Type != "tls" || len(cc[0].Config) != len(want) {
			t.Fatalf("channel_creds %+v", cc)
		}
		for k, v := range want {
			if cc[0].Config[k] != v {
				t.Errorf("%s = %q, want %q", k, cc[0].Config[k], v)
			}
		}
	}

	// Server authentication only: no client files.
	got, err = GRPCJSON(Options{NodeID: "client-1", XDSAddress: "kvxds.infra.svc:18000", TLS: &TLS{CAFile: "ca.crt", ServerName: "kvxds.infra.svc"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got), `"certificate_file"`) || !strings.Contains(string(got), `"ca_certificate_file": "ca.crt"`) {
		t.Errorf("server-only TLS bootstrap:\n%s", got)
	}
}

func TestTLSErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  *TLS
		grpc bool
		want string
	}{
		{"no CA", &TLS{CertFile: "c", KeyFile: "k"}, false, "CA file is required"},
		{"no CA, gRPC", &TLS{}, true, "CA file is required"},
		{"certificate without key", &TLS{CAFile: "ca", CertFile: "c"}, false, "both"},
		{"key without certificate", &TLS{CAFile: "ca", KeyFile: "k"}, true, "both"},
		{"server name for gRPC", &TLS{CAFile: "ca", ServerName: "kvxds.example.com"}, true, "host they dial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{NodeID: "n", XDSAddress: "127.0.0.1:18000", TLS: tc.tls}
			var err error
			if tc.grpc {
				_, err = GRPCJSON(o)
			} else {
				_, err = EnvoyYAML(o)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
