package policy

import (
	"strconv"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	dk "github.com/kvxds/kvxds/discovery/kubernetes"
)

// kubernetesSpec is a kubernetes block: replicas from the EndpointSlices
// of a Service, decoded into kubernetes.Config of discovery.
type kubernetesSpec struct {
	DefRange     hcl.Range      `hcl:",def_range"`
	Namespace    *hcl.Attribute `hcl:"namespace,optional"`
	Service      *hcl.Attribute `hcl:"service,optional"`
	Port         *hcl.Attribute `hcl:"port,optional"`
	Kubeconfig   *hcl.Attribute `hcl:"kubeconfig,optional"`
	NodeLocality *hcl.Attribute `hcl:"node_locality,optional"`
}

func (d *decoder) kubernetes(spec *kubernetesSpec) dk.Config {
	var s dk.Config
	str := func(a *hcl.Attribute) string {
		if a == nil {
			return ""
		}
		v, _ := d.str(a.Name, a.Expr)
		return v
	}
	if d.required(spec.Namespace, spec.DefRange, "kubernetes", "namespace", `namespace = "llm"`) {
		s.Namespace = str(spec.Namespace)
	}
	if d.required(spec.Service, spec.DefRange, "kubernetes", "service", `service = "vllm"`) {
		s.Service = str(spec.Service)
	}
	if d.required(spec.Port, spec.DefRange, "kubernetes", "port", `port = "http" (the EndpointSlice port's name) or port = 8000`) {
		a := spec.Port
		v, diags := a.Expr.Value(nil)
		switch {
		case diags.HasErrors():
			d.add(diags)
		case v.Type() == cty.Number:
			if n, ok := d.uintIn(a.Name, a.Expr, 1, 65535, "Invalid port"); ok {
				s.Port = strconv.FormatUint(n, 10)
			}
		default:
			if p := str(a); p == "" {
				d.errorf(a.Expr.Range(), "Invalid port", `The port name is empty; use the EndpointSlice port's name, as in "http", or its number.`)
			} else {
				s.Port = p
			}
		}
	}
	s.Kubeconfig = str(spec.Kubeconfig)
	if a := spec.NodeLocality; a != nil {
		if v, ok := d.value(a.Name, a.Expr, cty.Bool, "true or false"); ok {
			s.NodeLocality = v.True()
		}
	}
	return s
}
