package translate

import (
	"bytes"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// YAML renders r as one YAML document with a list per resource type
// (listeners, routes, clusters, endpoints), with proto field names and
// typed configs tagged with their @type, as Envoy's config dump shows
// them. Output is stable for equal resources.
func (r *Resources) YAML() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{")
	for i, part := range []struct {
		name string
		json func() ([]byte, error)
	}{
		{"listeners", func() ([]byte, error) { return jsonList(r.Listeners) }},
		{"routes", func() ([]byte, error) { return jsonList(r.Routes) }},
		{"clusters", func() ([]byte, error) { return jsonList(r.Clusters) }},
		{"endpoints", func() ([]byte, error) { return jsonList(r.Endpoints) }},
	} {
		j, err := part.json()
		if err != nil {
			return nil, fmt.Errorf("translate: rendering %s: %w", part.name, err)
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:", part.name)
		b.Write(j)
	}
	b.WriteString("}")
	return yaml.JSONToYAML(b.Bytes())
}

// jsonList marshals items as a JSON array. protojson's whitespace is
// deliberately unstable; callers normalise it through YAML.
func jsonList[T proto.Message](items []T) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("[")
	for i, m := range items {
		if i > 0 {
			b.WriteString(",")
		}
		j, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
		if err != nil {
			return nil, err
		}
		b.Write(j)
	}
	b.WriteString("]")
	return b.Bytes(), nil
}
