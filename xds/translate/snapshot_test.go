package translate

import (
	"bytes"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
)

// What the cache sends for an endpoint assignment is byte for byte its
// deterministic encoding, and the cache still finds it by name.
func TestPreEncodedAssignments(t *testing.T) {
	for name, f := range allFixtures(t) {
		for _, kind := range Kinds {
			r := mustTranslate(t, f, kind)
			s := mustSnapshot(t, r)
			held := s.GetResources(resource.EndpointType)
			if len(held) != len(r.Endpoints) {
				t.Fatalf("%s/%v: %d assignments held, want %d", name, kind, len(held), len(r.Endpoints))
			}
			for _, cla := range r.Endpoints {
				h, ok := held[cla.GetClusterName()]
				if !ok {
					t.Fatalf("%s/%v: %s not held under its name", name, kind, cla.GetClusterName())
				}
				want, err := marshalOpts.Marshal(cla)
				if err != nil {
					t.Fatal(err)
				}
				got, err := cache.MarshalResource(h)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s/%v: %s is sent as %d bytes that differ from its encoding (%d bytes)", name, kind, cla.GetClusterName(), len(got), len(want))
				}
				// Decoding what is sent gives the assignment back.
				var back endpointv3.ClusterLoadAssignment
				if err := proto.Unmarshal(got, &back); err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(&back, cla) {
					t.Errorf("%s/%v: %s decodes to a different assignment", name, kind, cla.GetClusterName())
				}
			}
		}
	}
}

// BenchmarkResponseEncoding is the cache's work per stream and response
// for one 100-endpoint assignment: encoding the decoded message, against
// copying the pre-encoded one.
func BenchmarkResponseEncoding(b *testing.B) {
	r := mustTranslate(b, genFleet(1, 100), Envoy)
	s := mustSnapshot(b, r)
	for _, bc := range []struct {
		name string
		m    proto.Message
	}{
		{"decoded", r.Endpoints[0]},
		{"pre-encoded", s.GetResources(resource.EndpointType)[r.Endpoints[0].GetClusterName()]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cache.MarshalResource(bc.m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
