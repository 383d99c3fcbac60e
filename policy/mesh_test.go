package policy

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvxds/kvxds/fleet"
)

func TestMeshDecoded(t *testing.T) {
	p, diags := Load(filepath.Join("testdata", "valid", "mesh.hcl"))
	if diags.HasErrors() {
		t.Fatal(Format(diags))
	}
	got := map[string]*fleet.Mesh{}
	for _, pool := range p.Pools {
		got[pool.Name] = pool.Mesh
	}
	want := map[string]*fleet.Mesh{
		"chat":    {ClusterName: "outbound|8000||vllm.llm.svc.cluster.local", IstioMTLS: true},
		"gateway": {ClusterName: "httproute/default/vllm/rule/0"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mesh blocks (-want +got):\n%s", diff)
	}
}
