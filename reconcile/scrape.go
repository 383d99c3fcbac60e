package reconcile

import (
	"fmt"

	"github.com/kvxds/kvxds/fleet"
	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/weights"
)

// ScrapeSpecs returns how each pool of p with a metrics block is scraped:
// its settings from the policy, its targets the replicas of the pool in m
// (their metric pages, by identity). A pool whose settings do not make a
// profile is left out, with the reason.
func ScrapeSpecs(p *policy.Policy, m fleet.Model) (map[string]weights.PoolScrape, map[string]error) {
	replicas := map[string][]fleet.Endpoint{}
	domains := map[string]map[string]string{}
	for _, fp := range m.Fleet().Pools {
		replicas[fp.Name] = fp.Endpoints
		domains[fp.Name] = m.Plan(fp.Name).Domains
	}
	out := map[string]weights.PoolScrape{}
	var bad map[string]error
	for _, pp := range p.Pools {
		if pp.Metrics == nil {
			continue
		}
		spec, err := pp.Metrics.PoolScrape(pp.Weights, pp.Escape)
		if err != nil {
			err = fmt.Errorf("pool %q: %w", pp.Name, err)
			if bad == nil {
				bad = map[string]error{}
			}
			bad[pp.Name] = err
			continue
		}
		spec.Targets = scrapeTargets(pp.Metrics, replicas[pp.Name], domains[pp.Name])
		out[pp.Name] = spec
	}
	return out, bad
}

// scrapeTargets are the metric pages of a pool's replicas (see
// weights.Metrics.URL), with their weight domains (by identity; absent:
// the pool's).
func scrapeTargets(m *weights.Metrics, eps []fleet.Endpoint, domains map[string]string) []weights.Target {
	out := make([]weights.Target, 0, len(eps))
	for _, e := range eps {
		out = append(out, weights.Target{
			ID:     e.Identity(),
			URL:    m.URL(e.Host, e.Port),
			Domain: domains[e.Identity()],
		})
	}
	return out
}
