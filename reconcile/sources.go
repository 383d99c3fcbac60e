package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/discovery/dns"
	"github.com/kvxds/kvxds/discovery/kubernetes"
	"github.com/kvxds/kvxds/policy"
)

// SourceSpecs returns the discovery sources of every pool of p. Each
// source's ID carries its settings, so a changed block restarts its
// source and an unchanged one keeps running (and its targets) across
// policy reloads. A source that cannot be built is replaced by one that
// reports why, so the pool keeps its other sources' replicas.
func SourceSpecs(p *policy.Policy, logger hclog.Logger) []discovery.Spec {
	var out []discovery.Spec
	for _, pool := range p.Pools {
		log := logger.With("pool", pool.Name)
		if ts := discovery.Static(pool.Static); len(ts) > 0 {
			out = append(out, discovery.Spec{Pool: pool.Name, ID: "static " + digest(fmt.Sprint(ts)), Source: ts})
		}
		for _, cfg := range pool.DNS {
			var src discovery.Source
			s, err := dns.New(cfg, log.Named("dns"))
			if err != nil {
				src = failed{err}
			} else {
				src = s
			}
			out = append(out, discovery.Spec{Pool: pool.Name, ID: cfg.ID(), Source: src})
		}
		for _, b := range pool.Kubernetes {
			id := "kubernetes " + b.Namespace + "/" + b.Service + " " + b.Port + " " + b.Kubeconfig + " " + strconv.FormatBool(b.NodeLocality)
			out = append(out, discovery.Spec{Pool: pool.Name, ID: id, Source: kubernetesSource(b, log.Named("kubernetes"))})
		}
	}
	return out
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// failed is a source that could not be built: it says why, once.
type failed struct{ err error }

func (f failed) Run(ctx context.Context, up chan<- discovery.Update) {
	select {
	case up <- discovery.Update{Err: f.err}:
	case <-ctx.Done():
	}
	<-ctx.Done()
}

func kubernetesSource(cfg kubernetes.Config, log hclog.Logger) discovery.Source {
	s, err := kubernetes.New(cfg, log)
	if err != nil {
		return failed{err}
	}
	return s
}
