package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	nacks        *prometheus.CounterVec
	pushes       *prometheus.CounterVec
	streams      prometheus.Gauge
	dropped      *prometheus.CounterVec
	updateErrors prometheus.Counter
	pools        prometheus.Gauge
	endpoints    prometheus.Gauge
	noHash       *prometheus.GaugeVec
}

// newMetrics registers the server's metrics with reg; nil registers
// nothing.
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		nacks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_xds_nacks_total",
			Help: "xDS responses rejected by clients, by client kind and resource type.",
		}, []string{"clients", "type"}),
		pushes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_xds_versions_total",
			Help: "New resource versions made available, by client kind and resource type.",
		}, []string{"clients", "type"}),
		streams: f.NewGauge(prometheus.GaugeOpts{
			Name: "kvxds_xds_streams",
			Help: "Open xDS streams.",
		}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "kvxds_xds_streams_dropped_total",
			Help: "xDS client connections dropped by kvxds, by reason (slow_reader: a response stayed unsent past the send timeout).",
		}, []string{"reason"}),
		updateErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "kvxds_xds_update_errors_total",
			Help: "Fleet updates rejected before being pushed; the last good snapshot kept serving.",
		}),
		pools: f.NewGauge(prometheus.GaugeOpts{
			Name: "kvxds_fleet_pools",
			Help: "Pools in the snapshot being served.",
		}),
		endpoints: f.NewGauge(prometheus.GaugeOpts{
			Name: "kvxds_fleet_endpoints",
			Help: "Endpoints in the snapshot being served.",
		}),
		noHash: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvxds_xds_streams_without_hash",
			Help: "Open xDS streams of clients whose version is known to crash on a ring hash, served round robin or least request instead (no session affinity), by client version.",
		}, []string{"client"}),
	}
}
