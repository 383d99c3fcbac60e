package policy

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/kvxds/kvxds/fleet"
)

// meshSpec is a mesh block; eds_cluster_name is required, but checked by
// hand so that the diagnostic names the pool.
type meshSpec struct {
	DefRange       hcl.Range      `hcl:",def_range"`
	EDSClusterName *hcl.Attribute `hcl:"eds_cluster_name,optional"`
	IstioMTLS      *hcl.Attribute `hcl:"istio_mtls,optional"`
}

func (s meshSpec) defRange() hcl.Range { return s.DefRange }

// meshName is a decoded eds_cluster_name, for the checks across pools.
type meshName struct {
	pool string
	rng  hcl.Range
}

// poolMesh decodes the mesh blocks of pool (at most one).
func (d *decoder) poolMesh(spec *poolSpec, pool *Pool) {
	for i := range spec.Mesh {
		if m, ok := d.mesh(&spec.Mesh[i], pool.Name); i == 0 && ok {
			pool.Mesh = m
		}
	}
	atMostOne(d, spec.Mesh, "a", "mesh", fmt.Sprintf("Pool %q", pool.Name), "a pool's endpoints are served under one mesh cluster name.")
}

func (d *decoder) mesh(spec *meshSpec, pool string) (*fleet.Mesh, bool) {
	m := &fleet.Mesh{}
	ok := true
	a := spec.EDSClusterName
	if a == nil {
		d.errorf(spec.DefRange, "Missing eds_cluster_name",
			`The mesh block of pool %q needs eds_cluster_name, the name of the mesh's cluster whose endpoints kvxds serves, as in eds_cluster_name = "outbound|8000||vllm.llm.svc.cluster.local" (Istio).`, pool)
		ok = false
	} else if s, good := d.str(a.Name, a.Expr); !good {
		ok = false
	} else if err := checkEDSClusterName(s); err != nil {
		d.errorf(a.Expr.Range(), "Invalid eds_cluster_name", "%s.", err)
		ok = false
	} else {
		m.ClusterName = s
		if prev, dup := d.meshNames[s]; dup {
			d.errorf(a.Expr.Range(), "Duplicate eds_cluster_name",
				"Pool %q already serves the mesh cluster %q (line %d); each mesh cluster takes its endpoints from one pool.", prev.pool, s, prev.rng.Start.Line)
			ok = false
		} else {
			if d.meshNames == nil {
				d.meshNames = map[string]meshName{}
			}
			d.meshNames[s] = meshName{pool: pool, rng: a.Expr.Range()}
		}
	}
	if a := spec.IstioMTLS; a != nil {
		v, good := d.value(a.Name, a.Expr, cty.Bool, "true or false")
		if good {
			m.IstioMTLS = v.True()
		}
		ok = ok && good
	}
	return m, ok
}

// checkMeshNames keeps mesh cluster names apart from pool names, whose
// assignments kvxds serves under the same namespace of EDS names. It runs
// once every pool is decoded, as a pool may be named after a later block's
// mesh cluster.
func (d *decoder) checkMeshNames() {
	for name, m := range d.meshNames {
		if prev, clash := d.poolNames[name]; clash {
			d.errorf(m.rng, "Mesh cluster name clash",
				"%q is also the name of the pool at line %d, whose own endpoints kvxds serves under that name; name the mesh cluster as the mesh does (Istio: \"outbound|PORT||HOST\").", name, prev.Start.Line)
		}
	}
}

// checkEDSClusterName accepts what Envoy accepts as a cluster name, minus
// what no control plane generates: control characters and invalid UTF-8.
func checkEDSClusterName(s string) error {
	if s == "" {
		return fmt.Errorf(`eds_cluster_name must not be empty; write the mesh's cluster name, as in "outbound|8000||vllm.llm.svc.cluster.local"`)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("eds_cluster_name %q is not valid UTF-8", s)
	}
	for _, c := range s {
		if unicode.IsControl(c) || unicode.IsSpace(c) {
			return fmt.Errorf("eds_cluster_name %q contains %q; cluster names have no spaces or control characters", s, c)
		}
	}
	return nil
}
