package server

import (
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/kvxds/kvxds/xds/bootstrap"
	"github.com/kvxds/kvxds/xds/translate"
)

// Classify tells which kind of client a node is: Envoy, grpc-js or
// another proxyless gRPC client.
//
// In order: the node metadata field "kvxds.client" ("envoy", "grpc" or
// "grpc-js") wins, except that a node that says "grpc" and whose
// user_agent_name starts with "gRPC Node" (grpc-js sends "gRPC Node Pure
// JS") is grpc-js; otherwise a user_agent_name starting with "grpc"
// (grpc-go sends "gRPC Go", grpc-java "gRPC Java", C-core languages "gRPC
// C-core ...") is a gRPC client; everything else, including Envoy's
// "envoy" and clients that send nothing, is treated as Envoy.
func Classify(n *core.Node) translate.Kind {
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

// nodeKindHash keys the snapshot cache by client kind, so one snapshot
// serves every node of a kind whatever its id.
type nodeKindHash struct{}

func (nodeKindHash) ID(n *core.Node) string { return Classify(n).String() }
