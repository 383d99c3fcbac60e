package policy

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestServerSettings(t *testing.T) {
	const pool = `pool "chat" {
  port = 10000
  hash {
    key { header = "x-session-id" }
  }
}
`
	// The documented defaults, spelled out rather than built from the
	// constants, so that a changed constant fails here.
	defaults := XDSServer{
		MaxStreamsPerAddress: 1000,
		Keepalive:            Keepalive{Time: 30 * time.Second, Timeout: 10 * time.Second, MinPingInterval: 5 * time.Second},
	}
	tests := []struct {
		name      string
		filename  string
		src       string
		wantXDS   XDSServer
		wantAdmin AdminServer
	}{
		{"defaults", "policy.hcl", pool, defaults, AdminServer{}},
		{"address only", "policy.hcl", `xds { address = "127.0.0.1:1" }` + "\n" + pool, defaults, AdminServer{}},
		{"unlimited streams", "policy.hcl", "xds { max_streams_per_address = 0 }\n" + pool,
			XDSServer{Keepalive: defaults.Keepalive}, AdminServer{}},
		{"paths relative to the policy file", "/etc/kvxds/policy.hcl", `
xds {
  tls {
    cert_file      = "tls/tls.crt"
    key_file       = "./tls/../tls/tls.key"
    client_ca_file = "/run/ca/ca.crt"
  }
}
admin {
  token_file = "../token"
  tls {
    cert_file = "admin.crt"
    key_file  = "admin.key"
  }
}
` + pool,
			XDSServer{
				TLS:                  &TLS{CertFile: "/etc/kvxds/tls/tls.crt", KeyFile: "/etc/kvxds/tls/tls.key", ClientCAFile: "/run/ca/ca.crt"},
				MaxStreamsPerAddress: 1000,
				Keepalive:            defaults.Keepalive,
			},
			AdminServer{
				TLS:       &TLS{CertFile: "/etc/kvxds/admin.crt", KeyFile: "/etc/kvxds/admin.key"},
				TokenFile: "/etc/token",
			}},
		{"relative policy file name", "conf/policy.hcl", `xds {
  tls {
    cert_file = "a.crt"
    key_file  = "a.key"
  }
}
` + pool,
			XDSServer{
				TLS:                  &TLS{CertFile: filepath.Join("conf", "a.crt"), KeyFile: filepath.Join("conf", "a.key")},
				MaxStreamsPerAddress: 1000,
				Keepalive:            defaults.Keepalive,
			}, AdminServer{}},
		{"keepalive", "policy.hcl", `xds {
  keepalive_time              = "1m"
  keepalive_timeout           = "1s"
  keepalive_min_ping_interval = ""
}
` + pool,
			XDSServer{MaxStreamsPerAddress: 1000, Keepalive: Keepalive{Time: time.Minute, Timeout: time.Second, MinPingInterval: 5 * time.Second}},
			AdminServer{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, diags := Parse([]byte(tt.src), tt.filename)
			if len(diags) > 0 {
				t.Fatalf("unexpected diagnostics:\n%s", Format(diags))
			}
			if !reflect.DeepEqual(p.XDS, tt.wantXDS) {
				t.Errorf("XDS = %+v (TLS %+v)\nwant %+v (TLS %+v)", p.XDS, p.XDS.TLS, tt.wantXDS, tt.wantXDS.TLS)
			}
			if !reflect.DeepEqual(p.Admin, tt.wantAdmin) {
				t.Errorf("Admin = %+v (TLS %+v)\nwant %+v (TLS %+v)", p.Admin, p.Admin.TLS, tt.wantAdmin, tt.wantAdmin.TLS)
			}
		})
	}
}

func TestDefaultXDSServerConstants(t *testing.T) {
	want := XDSServer{
		MaxStreamsPerAddress: DefaultMaxStreamsPerAddress,
		Keepalive:            Keepalive{Time: DefaultKeepaliveTime, Timeout: DefaultKeepaliveTimeout, MinPingInterval: DefaultKeepaliveMinPingInterval},
	}
	if got := DefaultXDSServer(); got != want {
		t.Errorf("DefaultXDSServer() = %+v, want %+v", got, want)
	}
}
