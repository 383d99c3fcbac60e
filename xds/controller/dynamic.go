package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/weights"
	"github.com/kvxds/kvxds/xds/fleet"
)

// scrapeJitter spreads each pool's scrapes over this fraction of its
// interval.
const scrapeJitter = 0.5

// dynamicMetrics are kvxds's own metrics about metric-driven routing.
type dynamicMetrics struct {
	reg       prometheus.Registerer
	weight    *prometheus.GaugeVec
	saturated *prometheus.GaugeVec
	fallback  *prometheus.GaugeVec
}

func newDynamicMetrics(reg prometheus.Registerer) *dynamicMetrics {
	m := &dynamicMetrics{
		reg: reg,
		weight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_replica_weight_multiplier",
			Help: "Metric-driven weight multiplier of each replica.",
		}, []string{"pool", "replica"}),
		saturated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_replica_saturated",
			Help: "1 while a replica is out of the hash table for saturation.",
		}, []string{"pool", "replica"}),
		fallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_pool_affinity_fallback",
			Help: "1 while too many replicas of a pool are saturated to take any out (pure affinity).",
		}, []string{"pool"}),
	}
	reg.MustRegister(m.weight, m.saturated, m.fallback)
	return m
}

// forget drops a pool's series once it is no longer scraped.
func (m *dynamicMetrics) forget(pool string) {
	l := prometheus.Labels{"pool": pool}
	m.weight.DeletePartialMatch(l)
	m.saturated.DeletePartialMatch(l)
	m.fallback.DeletePartialMatch(l)
}

// poolDynamics scrapes one pool's replicas and keeps their decisions.
type poolDynamics struct {
	pool   string
	spec   poolSpec
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	targets   []weights.Target
	ids       []string
	decisions map[string]weights.Decision
}

// poolSpec is what a pool's dynamics depend on; a change restarts them.
type poolSpec struct {
	Metrics policy.Metrics
	Escape  policy.Escape
	Weights policy.Weights
}

func specOf(p policy.Pool) (poolSpec, bool) {
	if p.Metrics == nil {
		return poolSpec{}, false
	}
	return poolSpec{Metrics: *p.Metrics, Escape: p.Escape, Weights: p.Weights}, true
}

// configOf maps a pool's policy to Step's configuration.
func configOf(s poolSpec) weights.Config {
	return weights.Config{
		MinWeight:            s.Weights.Min,
		MaxWeight:            s.Weights.Max,
		Levels:               s.Weights.Levels,
		Smoothing:            s.Weights.Smoothing,
		Hysteresis:           s.Weights.Hysteresis,
		MinChangeInterval:    s.Weights.MinInterval,
		MaxQueueDepth:        s.Escape.MaxQueueDepth,
		MaxKVOccupancy:       s.Escape.MaxKVOccupancy,
		MaxPreemptionRate:    s.Escape.MaxPreemptionRate,
		ResumeQueueDepth:     s.Escape.ResumeQueueDepth,
		ResumeKVOccupancy:    s.Escape.ResumeKVOccupancy,
		Hold:                 s.Escape.Hold,
		MaxSaturatedFraction: s.Escape.MaxSaturatedFraction,
		StaleAfter:           s.Metrics.StaleAfter,
	}
}

// profileOf returns the engine profile a pool's metrics block names.
func profileOf(m policy.Metrics) *weights.Profile {
	if p, ok := weights.BuiltinProfile(m.Engine); ok {
		return p
	}
	p := &weights.Profile{Name: m.Engine}
	slots := map[string]*[]weights.Series{
		"queue_depth":     &p.QueueDepth,
		"running":         &p.Running,
		"kv_occupancy":    &p.KVOccupancy,
		"preemptions":     &p.Preemptions,
		"prefix_queries":  &p.PrefixQueries,
		"prefix_hits":     &p.PrefixHits,
		"prefix_hit_rate": &p.PrefixHitRate,
		"ttft":            &p.TTFT,
	}
	for name, src := range m.Signals {
		if slot, ok := slots[name]; ok {
			*slot = []weights.Series{{Name: src.Metric, Labels: src.Labels, Scale: src.Scale}}
		}
	}
	return p
}

// jitterSeed differs between kvxds instances, so that several instances
// do not scrape a replica at the same instant.
func jitterSeed() uint64 {
	h := fnv.New64a()
	host, _ := os.Hostname()
	fmt.Fprintf(h, "%s/%d", host, os.Getpid())
	return h.Sum64()
}

// setTargets points the pool's scrapes at the endpoints of fp.
func (d *poolDynamics) setTargets(fp fleet.Pool) {
	m := d.spec.Metrics
	profile := profileOf(m)
	parse := func(body []byte, contentType string) (weights.Signals, error) {
		return weights.ParseSignals(profile, m.Model, body, contentType)
	}
	targets := make([]weights.Target, 0, len(fp.Endpoints))
	ids := make([]string, 0, len(fp.Endpoints))
	for _, e := range fp.Endpoints {
		port := e.Port
		if m.Port != 0 {
			port = m.Port
		}
		targets = append(targets, weights.Target{
			ID:    e.HashKey,
			URL:   m.Scheme + "://" + net.JoinHostPort(e.Host, strconv.FormatUint(uint64(port), 10)) + m.Path,
			Parse: parse,
		})
		ids = append(ids, e.HashKey)
	}
	d.mu.Lock()
	d.targets, d.ids = targets, ids
	d.mu.Unlock()
}

func (d *poolDynamics) currentTargets() []weights.Target {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.targets
}

// Decisions returns the pool's current decisions by replica identity.
func (d *poolDynamics) Decisions() map[string]weights.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.decisions)
}

// run scrapes until ctx ends, folding each cycle into decisions and
// calling changed whenever they differ from the previous cycle's.
func (d *poolDynamics) run(ctx context.Context, log hclog.Logger, m *dynamicMetrics, changed func()) {
	defer close(d.done)
	cfg := configOf(d.spec)
	scraper := weights.NewScraper(weights.ScraperOptions{
		Timeout:    d.spec.Metrics.Timeout,
		Logger:     log,
		Registerer: m.reg,
		Pool:       d.pool,
		JitterSeed: jitterSeed(),
	})
	out := make(chan []weights.Observation, 1)
	go scraper.Run(ctx, d.spec.Metrics.Interval, scrapeJitter, d.currentTargets, out)
	var state weights.State
	fallback := false
	for {
		var obs []weights.Observation
		select {
		case <-ctx.Done():
			return
		case obs = <-out:
		}
		d.mu.Lock()
		ids := d.ids
		d.mu.Unlock()
		next, res := weights.Step(cfg, state, ids, obs, time.Now())
		state = next
		if res.Fallback != fallback {
			fallback = res.Fallback
			if fallback {
				log.Warn("too many replicas saturated to take any out; falling back to pure affinity",
					"saturated", res.Saturated, "replicas", len(ids), "max_saturated_fraction", cfg.MaxSaturatedFraction)
				m.fallback.WithLabelValues(d.pool).Set(1)
			} else {
				log.Info("saturated replicas are few enough again to be taken out", "saturated", res.Saturated)
				m.fallback.WithLabelValues(d.pool).Set(0)
			}
		}
		d.mu.Lock()
		prev := d.decisions
		d.decisions = res.Decisions
		d.mu.Unlock()
		if reflect.DeepEqual(prev, res.Decisions) {
			continue
		}
		for id, dec := range res.Decisions {
			old, had := prev[id]
			m.weight.WithLabelValues(d.pool, id).Set(float64(dec.Weight))
			sat := 0.0
			if dec.Health == weights.Saturated {
				sat = 1
			}
			m.saturated.WithLabelValues(d.pool, id).Set(sat)
			switch {
			case had && old.Health != dec.Health && dec.Health == weights.Saturated:
				log.Info("replica saturated: out of the hash table until it recovers", "replica", id)
			case had && old.Health != dec.Health:
				log.Info("replica recovered: back in the hash table", "replica", id)
			case had && old.Weight != dec.Weight:
				log.Debug("replica weight changed", "replica", id, "from", old.Weight, "to", dec.Weight)
			}
		}
		for id := range prev {
			if _, ok := res.Decisions[id]; !ok {
				m.weight.DeleteLabelValues(d.pool, id)
				m.saturated.DeleteLabelValues(d.pool, id)
			}
		}
		changed()
	}
}

// applyDecisions returns a copy of a normalised fleet with metric-driven
// decisions folded in: the weight multiplies the static weight, and a
// saturated replica is draining, which takes it out of Envoy's and gRPC's
// hash tables for new requests while in-flight ones finish.
func applyDecisions(base fleet.Fleet, decisions map[string]map[string]weights.Decision) fleet.Fleet {
	f := fleet.Fleet{Pools: slices.Clone(base.Pools)}
	for i := range f.Pools {
		dec := decisions[f.Pools[i].Name]
		if dec == nil {
			continue
		}
		f.Pools[i].Endpoints = slices.Clone(f.Pools[i].Endpoints)
		for j := range f.Pools[i].Endpoints {
			e := &f.Pools[i].Endpoints[j]
			d, ok := dec[e.HashKey]
			if !ok {
				continue
			}
			if d.Weight > 0 {
				e.Weight *= d.Weight
			}
			if d.Health == weights.Saturated {
				e.Health = fleet.Draining
			}
		}
	}
	return f
}
