package reconcile

import (
	"fmt"
	"net"
	"strconv"

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
		spec, err := scrapeSettings(pp)
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[pp.Name] = err
			continue
		}
		spec.Targets = scrapeTargets(*pp.Metrics, replicas[pp.Name], domains[pp.Name])
		out[pp.Name] = spec
	}
	return out, bad
}

// scrapeSettings maps a pool's metrics, escape and weights blocks to the
// scraper's settings.
func scrapeSettings(pp policy.Pool) (weights.PoolScrape, error) {
	m := *pp.Metrics
	profile, err := weights.ProfileFor(m.Engine, m.Signals)
	if err != nil {
		return weights.PoolScrape{}, fmt.Errorf("pool %q: %w", pp.Name, err)
	}
	return weights.PoolScrape{
		Config:  weights.Config{Weighting: pp.Weights, Escape: pp.Escape, StaleAfter: m.StaleAfter},
		Profile: profile,
		Scrape:  m.Scrape,
	}, nil
}

// scrapeTargets are the metric pages of a pool's replicas: each on its
// serving address, or on the metrics block's port, with its weight domain
// (by identity; absent: the pool's).
func scrapeTargets(m policy.Metrics, eps []fleet.Endpoint, domains map[string]string) []weights.Target {
	out := make([]weights.Target, 0, len(eps))
	for _, e := range eps {
		port := e.Port
		if m.Port != 0 {
			port = m.Port
		}
		out = append(out, weights.Target{
			ID:     e.Identity(),
			URL:    m.Scheme + "://" + net.JoinHostPort(e.Host, strconv.FormatUint(uint64(port), 10)) + m.Path,
			Domain: domains[e.Identity()],
		})
	}
	return out
}
