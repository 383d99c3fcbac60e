package server

import (
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/kvxds/kvxds/xds/bootstrap"
	"github.com/kvxds/kvxds/xds/translate"
)

// Classify tells whether a node is Envoy or a proxyless gRPC client.
//
// In order: the node metadata field "kvxds.client" ("envoy" or "grpc")
// wins; otherwise a user_agent_name starting with "grpc" (grpc-go sends
// "gRPC Go", grpc-java "gRPC Java", C-core languages "gRPC C-core ...",
// grpc-js "gRPC Node") is a gRPC client; everything else, including Envoy's
// "envoy" and clients that send nothing, is treated as Envoy.
func Classify(n *core.Node) translate.Flavor {
	if v, ok := n.GetMetadata().GetFields()[bootstrap.ClientKindKey]; ok {
		switch strings.ToLower(v.GetStringValue()) {
		case "grpc":
			return translate.GRPC
		case "envoy":
			return translate.Envoy
		}
	}
	if strings.HasPrefix(strings.ToLower(n.GetUserAgentName()), "grpc") {
		return translate.GRPC
	}
	return translate.Envoy
}

func flavorKey(f translate.Flavor) string {
	if f == translate.GRPC {
		return "grpc"
	}
	return "envoy"
}

// nodeKindHash keys the snapshot cache by client kind, so one snapshot
// serves every node of a kind whatever its id.
type nodeKindHash struct{}

func (nodeKindHash) ID(n *core.Node) string { return flavorKey(Classify(n)) }
