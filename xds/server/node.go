package server

import (
	"fmt"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/kvxds/kvxds/xds/bootstrap"
	"github.com/kvxds/kvxds/xds/translate"
)

// Classify tells which kind of client a node is: Envoy, grpc-js or
// another proxyless gRPC client, and a gRPC client whose version is known
// to crash on a ring hash (CannotHash) is translate.GRPCNoHash.
//
// In order: the node metadata field "kvxds.client" ("envoy", "grpc" or
// "grpc-js") wins, except that a node that says "grpc" and whose
// user_agent_name starts with "gRPC Node" (grpc-js sends "gRPC Node Pure
// JS") is grpc-js; otherwise a user_agent_name starting with "grpc"
// (grpc-go sends "gRPC Go", grpc-java "gRPC Java", C-core languages "gRPC
// C-core ...") is a gRPC client; everything else, including Envoy's
// "envoy" and clients that send nothing, is treated as Envoy.
func Classify(n *core.Node) translate.Kind {
	k := clientKind(n)
	if k == translate.GRPC {
		if _, bad := CannotHash(n); bad {
			return translate.GRPCNoHash
		}
	}
	return k
}

// clientKind is Classify before the check of known crashes.
func clientKind(n *core.Node) translate.Kind {
	ua := strings.ToLower(n.GetUserAgentName())
	grpc := translate.GRPC
	if strings.HasPrefix(ua, "grpc node") {
		grpc = translate.GRPCJS
	}
	if v, ok := n.GetMetadata().GetFields()[bootstrap.ClientKindKey]; ok {
		switch strings.ToLower(v.GetStringValue()) {
		case "grpc":
			return grpc
		case "grpc-js":
			return translate.GRPCJS
		case "envoy":
			return translate.Envoy
		}
	}
	if strings.HasPrefix(ua, "grpc") {
		return grpc
	}
	return translate.Envoy
}

// HashCrash is a gRPC client version known to crash on a ring-hash
// cluster.
type HashCrash struct {
	// Client names the versions, Fixed the first release without the
	// crash, Issue the upstream report.
	Client, Fixed, Issue string
	// match reports whether a node's user agent is one of them.
	match func(name, version string) bool
}

// Message is what kvxds says about a node of this version.
func (c HashCrash) Message() string {
	return fmt.Sprintf("%s cannot hash; upgrade to %s or later", c.Client, c.Fixed)
}

// hashCrashes are the client versions that crash on a ring hash. kvxds
// serves them clusters without one (translate.GRPCNoHash): they keep
// routing and lose affinity.
var hashCrashes = []HashCrash{{
	// https://github.com/grpc/grpc/issues/31766: the ring hash picker
	// segfaults on the first pick after the cluster is accepted (Debian
	// 12's python3-grpcio and libgrpc++ 1.51.1). C-core 29.0.0 is gRPC
	// 1.51.x; the fix was backported to 1.51 after 1.51.1. Wrapped
	// languages append their own version ("C-core 29.0.0 Python
	// 1.51.1"); C++ sends none, and is taken to be affected.
	Client: "C-core 1.51", Fixed: "1.52", Issue: "grpc/grpc#31766",
	match: func(name, version string) bool {
		f := strings.Fields(version)
		if !strings.HasPrefix(name, "gRPC C-core") || len(f) < 2 || f[0] != "C-core" || f[1] != "29.0.0" {
			return false
		}
		if len(f) < 4 {
			return true
		}
		return f[3] == "1.51.0" || f[3] == "1.51.1"
	},
}}

// CannotHash returns the known crash of a node's client version, if any.
func CannotHash(n *core.Node) (HashCrash, bool) {
	name := n.GetUserAgentName()
	version := n.GetUserAgentVersion()
	for _, c := range hashCrashes {
		if c.match(name, version) {
			return c, true
		}
	}
	return HashCrash{}, false
}

// nodeKindHash keys the snapshot cache by client kind, so one snapshot
// serves every node of a kind whatever its id.
type nodeKindHash struct{}

func (nodeKindHash) ID(n *core.Node) string { return Classify(n).String() }
