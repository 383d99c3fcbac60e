package policy

import (
	"fmt"
	"net/url"
	"time"

	"github.com/hashicorp/hcl/v2"

	hakube "github.com/kvxds/kvxds/ha/kubernetes"
)

// HA is the ha block: how several kvxds instances serve the same
// decisions. Exactly one of Kubernetes and Follow is set.
type HA struct {
	// Kubernetes elects one leader among the instances with a Lease; the
	// leader scrapes and decides, and publishes its decisions for the
	// others through the API server.
	Kubernetes *hakube.Config
	// Follow is the admin URL of the instance whose decisions this one
	// serves (as in "http://10.0.0.5:19000"); this one does not scrape.
	Follow string
}

type haSpec struct {
	DefRange   hcl.Range          `hcl:",def_range"`
	Follow     *hcl.Attribute     `hcl:"follow,optional"`
	Kubernetes []haKubernetesSpec `hcl:"kubernetes,block"`
}

func (s haSpec) defRange() hcl.Range { return s.DefRange }

type haKubernetesSpec struct {
	DefRange      hcl.Range      `hcl:",def_range"`
	Namespace     *hcl.Attribute `hcl:"namespace,optional"`
	Lease         *hcl.Attribute `hcl:"lease,optional"`
	Kubeconfig    *hcl.Attribute `hcl:"kubeconfig,optional"`
	LeaseDuration *hcl.Attribute `hcl:"lease_duration,optional"`
	RenewDeadline *hcl.Attribute `hcl:"renew_deadline,optional"`
	RetryPeriod   *hcl.Attribute `hcl:"retry_period,optional"`
}

func (s haKubernetesSpec) defRange() hcl.Range { return s.DefRange }

// ha decodes the ha blocks of a file (at most one).
func (d *decoder) ha(specs []haSpec) *HA {
	if len(specs) == 0 {
		return nil
	}
	// Only the first block is decoded.
	atMostOne(d, specs, "an", "ha", "", keepOne)
	spec := &specs[0]
	h := &HA{}
	atMostOne(d, spec.Kubernetes, "a", "kubernetes", "", keepOne)
	if len(spec.Kubernetes) > 0 {
		h.Kubernetes = d.haKubernetes(&spec.Kubernetes[0])
	}
	if a := spec.Follow; a != nil {
		if v, ok := d.str(a.Name, a.Expr); ok {
			if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
				d.errorf(a.Expr.Range(), "Invalid follow URL", `follow must be the admin address of the instance to follow, as in "http://10.0.0.5:19000", not %q.`, v)
			} else {
				h.Follow = u.Scheme + "://" + u.Host
			}
		}
		if len(spec.Kubernetes) > 0 {
			d.errorf(a.Expr.Range(), "Two ways to agree", "An ha block either elects a leader (kubernetes) or follows one instance (follow), not both; remove one.")
		}
	}
	if spec.Follow == nil && len(spec.Kubernetes) == 0 {
		d.errorf(spec.DefRange, "Empty ha block", `Say how instances agree: a kubernetes { namespace = "kvxds" lease = "kvxds" } block to elect a leader, or follow = "http://10.0.0.5:19000" to serve another instance's decisions.`)
	}
	return h
}

func (d *decoder) haKubernetes(spec *haKubernetesSpec) *hakube.Config {
	k := &hakube.Config{LeaseDuration: hakube.DefaultLeaseDuration, RenewDeadline: hakube.DefaultRenewDeadline, RetryPeriod: hakube.DefaultRetryPeriod}
	name := func(a *hcl.Attribute, what, example string, maxLen int, dots bool) string {
		if !d.required(a, spec.DefRange, "kubernetes", what, example) {
			return ""
		}
		v, ok := d.str(a.Name, a.Expr)
		if !ok {
			return ""
		}
		if !isDNSName(v, maxLen, dots) {
			d.errorf(a.Expr.Range(), "Invalid name", "%s %q is not a Kubernetes object name: use at most %d lower-case letters, digits and '-', starting and ending with a letter or digit.", what, v, maxLen)
			return ""
		}
		return v
	}
	k.Namespace = name(spec.Namespace, "namespace", `namespace = "kvxds"`, 63, false)
	// The ConfigMap name adds hakube.DecisionsSuffix to the lease's.
	k.Lease = name(spec.Lease, "lease", `lease = "kvxds"`, 253-len(hakube.DecisionsSuffix), true)
	if a := spec.Kubeconfig; a != nil {
		k.Kubeconfig, _ = d.str(a.Name, a.Expr)
	}
	durs := []struct {
		a   *hcl.Attribute
		dst *time.Duration
	}{{spec.LeaseDuration, &k.LeaseDuration}, {spec.RenewDeadline, &k.RenewDeadline}, {spec.RetryPeriod, &k.RetryPeriod}}
	bad := false
	for _, x := range durs {
		if x.a == nil {
			continue
		}
		dur, ok := d.durationOr(x.a, *x.dst, "")
		switch {
		case !ok:
			bad = true
		case dur <= 0:
			d.errorf(x.a.Expr.Range(), "Invalid duration", "%s must be positive.", x.a.Name)
			bad = true
		default:
			*x.dst = dur
		}
	}
	if !bad {
		switch {
		case k.LeaseDuration <= k.RenewDeadline:
			d.errorf(spec.DefRange, "Invalid lease timings", "lease_duration %s must be longer than renew_deadline %s: a leader must give up before others may take over.", k.LeaseDuration, k.RenewDeadline)
		case float64(k.RenewDeadline) <= hakube.JitterFactor*float64(k.RetryPeriod):
			d.errorf(spec.DefRange, "Invalid lease timings", "renew_deadline %s must be longer than %g × retry_period %s, so that a leader can retry its renewal.", k.RenewDeadline, hakube.JitterFactor, k.RetryPeriod)
		}
	}
	return k
}

// isDNSName reports whether s is a lower-case RFC 1123 name of at most
// maxLen characters: a label, or with dots a subdomain.
func isDNSName(s string, maxLen int, dots bool) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i, c := range s {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if (i == 0 || i == len(s)-1) && !alnum {
			return false
		}
		if !alnum && c != '-' && !(dots && c == '.') {
			return false
		}
	}
	return true
}

// String describes the ha block for logs.
func (h *HA) String() string {
	switch {
	case h == nil:
		return "none"
	case h.Kubernetes != nil:
		return fmt.Sprintf("kubernetes lease %s/%s", h.Kubernetes.Namespace, h.Kubernetes.Lease)
	default:
		return "follow " + h.Follow
	}
}
