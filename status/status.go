// Package status is the read model of what one kvxds instance knows: its
// pools and replicas as the reconcile step joined them (with each
// replica's latest engine signals and what kvxds decided from them), and
// the data planes connected to its xDS server. GET /api/v1/status serves
// it as JSON, `kvxds status` prints it, and the status page (package
// status/page) shows it; the words and figures the two write are this
// package's (Format).
//
// The types are plain data with stable snake_case JSON names. A value
// kvxds does not know (no metrics for the pool, a signal the engine does
// not export, a rate without two samples yet) is omitted, never 0.
package status

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/kvxds/kvxds/fleet"
)

// Path is where the admin server serves the status.
const Path = "/api/v1/status"

// Status is the body of GET /api/v1/status, for example (abridged):
//
//	{
//	  "time": "2025-07-01T12:00:00Z",
//	  "instance": {"id": "kvxds-0", "version": "v0.4.0", "policy": "/etc/kvxds/policy.hcl"},
//	  "ha": {"mode": "standalone", "leading": true, "leader": "kvxds-0", "term": 0, "reachable": true},
//	  "hotspot_rule": {"balance_above": 2, "hit_rate_at_least": 0.5, "busiest_queue_at_least": 2},
//	  "pools": [{
//	    "name": "chat", "balancer": "hash", "algorithm": "maglev", "engine": "vllm",
//	    "replicas": [{
//	      "id": "10.0.0.7:8000", "address": "10.0.0.7:8000", "source": "kubernetes",
//	      "health": "saturated", "reason": "queue depth 9 ≥ 8", "since": "2025-07-01T11:59:40Z",
//	      "static_weight": 1, "multiplier": 2, "weight": 2, "table_share": 0.126,
//	      "queue_depth": 9, "queue_depth_1m": 6.5, "running": 12, "kv_occupancy": 0.61,
//	      "hit_rate_1m": 0.83, "hit_rate_total": 0.8, "ttft_p50_seconds": 0.07, "ttft_p95_seconds": 0.41,
//	      "preemption_rate": 0, "signals_found": ["queue_depth", "running", "kv_occupancy", …],
//	      "last_scrape": {"time": "2025-07-01T11:59:59Z", "ok": true}
//	    }],
//	    "balance": 1.4, "busiest_queue_1m": 6.5, "mean_queue_1m": 4.6,
//	    "signals": [{"signal": "kv_occupancy", "metrics": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
//	      "use": "weights and escape hatch", "found": 4, "missing": 0}, …], "pages_read": 4,
//	    "hit_rate_1m": 0.86, "escapes_1h": 3, "weight_moves_1h": 11, "hotspot": false,
//	    "recent_decisions": [{"time": "2025-07-01T11:59:40Z", "replica": "10.0.0.7:8000", "kind": "escape",
//	      "from_multiplier": 2, "to_multiplier": 2, "reason": "queue depth 9 ≥ 8"}],
//	    "moved": {"last": {"time": "2025-07-01T11:59:40Z", "cause": "health", "replicas": 1, "shares": [
//	      {"table": "chat", "clients": ["envoy"], "own": 0.126, "collateral": 0.003},
//	      {"table": "chat", "clients": ["grpc", "grpc-js"], "own": 0.127, "collateral": 0}]},
//	      "pushes_1h": 4, "total_1h": [{"table": "chat", "clients": ["envoy"], "own": 0.19, "collateral": 0.006,
//	      "by_cause": {"health": 0.129, "weight": 0.067}}, …]}
//	  }],
//	  "served": {"envoy": {"cds": "…", "eds": "…", "lds": "…", "rds": "…"}, "grpc": {…}, "grpc-js": {…}},
//	  "data_planes": [{
//	    "node_id": "envoy-1", "kind": "envoy", "address": "10.0.3.4:51234", "streams": 1,
//	    "connected": "2025-07-01T10:00:00Z", "acked": {"cds": "…", "eds": "…", "lds": "…", "rds": "…"},
//	    "last_nack": {"type": "cds", "version": "…", "message": "…", "time": "…"}
//	  }]
//	}
//
// With ?trend=1 each scraped replica also carries its last 15 minutes in
// 15-second steps: "trend_15m": {"step_seconds": 15, "points": [{"time":
// "…", "queue_depth": 6, "hit_rate": 0.83, "ttft_p95_seconds": 0.4}, …]}.
//
// Rates and percentiles ("_1m") cover the last minute of scrapes;
// counters that go down (an engine restart) are rebased, not counted as
// negative. A follower instance (see HA) serves its leader's decisions
// but scrapes nothing itself: its replicas carry health and weights, and
// no signals.
type Status struct {
	Time     time.Time `json:"time"`
	Instance Instance  `json:"instance"`
	HA       HA        `json:"ha"`
	// HotspotRule is when a pool is flagged a hotspot.
	HotspotRule HotspotRule `json:"hotspot_rule"`
	Pools       []Pool      `json:"pools"`
	// Served are the per-type versions served to each kind of client
	// (envoy, grpc, grpc-js), by short type (cds, eds, lds, rds), to
	// compare with what each data plane acknowledged.
	Served     map[string]map[string]string `json:"served,omitempty"`
	DataPlanes []DataPlane                  `json:"data_planes"`
}

// Instance is the kvxds process answering.
type Instance struct {
	ID      string `json:"id"`
	Version string `json:"version,omitempty"`
	// Policy is the policy file in force.
	Policy string `json:"policy,omitempty"`
}

// HA is how this instance takes part in high availability.
type HA struct {
	Mode    string `json:"mode"` // "standalone", or how the peers agree
	Leading bool   `json:"leading"`
	Leader  string `json:"leader,omitempty"`
	Term    int64  `json:"term"`
	// DecisionsTime is when the decisions served were published.
	DecisionsTime time.Time `json:"decisions_time,omitzero"`
	Reachable     bool      `json:"reachable"`
	Error         string    `json:"error,omitempty"`
	// LoadReporters is how many other instances report their Envoys'
	// requests in flight to this one, which adds them to its own.
	LoadReporters int `json:"load_reporters,omitempty"`
	// LoadReportsTo is the admin address this instance reports its own
	// to, LoadReportError why the last report failed.
	LoadReportsTo   string `json:"load_reports_to,omitempty"`
	LoadReportError string `json:"load_report_error,omitempty"`
}

// HotspotRule flags a pool whose load concentrates on a few replicas
// while affinity is paying off: Balance above BalanceAbove, the pool's
// hit rate at least HitRateAtLeast, and the busiest replica's mean queue
// at least BusiestQueueAtLeast requests (a queue of one or two on an
// idle fleet is noise, not a hotspot).
type HotspotRule struct {
	BalanceAbove        float64 `json:"balance_above"`
	HitRateAtLeast      float64 `json:"hit_rate_at_least"`
	BusiestQueueAtLeast float64 `json:"busiest_queue_at_least"`
}

// DefaultHotspotRule is kvxds's rule. Plain affinity under one hot
// tenant leaves the busiest replica near 2.7× the mean queue, the escape
// hatch brings it near 1.2×: 2× is well between. A hit rate of one half
// is where affinity is clearly working (round robin rarely reaches it).
var DefaultHotspotRule = HotspotRule{BalanceAbove: 2, HitRateAtLeast: 0.5, BusiestQueueAtLeast: 2}

// Hotspot applies the rule to a pool's figures (nil: unknown, no hotspot).
func (r HotspotRule) Hotspot(balance, hitRate, busiestQueue *float64) bool {
	return balance != nil && hitRate != nil && busiestQueue != nil &&
		*balance > r.BalanceAbove && *hitRate >= r.HitRateAtLeast && *busiestQueue >= r.BusiestQueueAtLeast
}

// Pool is one pool and its replicas, in identity order.
type Pool struct {
	Name      string `json:"name"`
	Balancer  string `json:"balancer"`            // hash, round_robin, least_request
	Algorithm string `json:"algorithm,omitempty"` // maglev or ring_hash, for hash pools
	// BalanceOn is "prompt_bytes" where the pool's Envoys pick its
	// replicas from its slot table, bounded on prompt bytes in flight
	// (balance_on); empty for Envoy's own bound on requests.
	BalanceOn string `json:"balance_on,omitempty"`
	// Engine is the metrics block's engine; empty without metrics.
	Engine   string    `json:"engine,omitempty"`
	Replicas []Replica `json:"replicas"`
	// Balance is the busiest replica's mean queue depth over the last
	// minute divided by the pool's mean: 1 is even, 2 means the busiest
	// queues twice the average. It is omitted, and BalanceNote says why,
	// while the busiest replica queues fewer than BalanceMinQueue
	// requests on average (one request more or less would swing the
	// ratio: an idle pool with queues of 0 and 1 reads 4), and without
	// queue signals.
	Balance     *float64 `json:"balance,omitempty"`
	BalanceNote string   `json:"balance_note,omitempty"`
	// BusiestQueue1m and MeanQueue1m are the replicas' largest and mean
	// queue depth over the last minute, which Balance divides.
	BusiestQueue1m *float64 `json:"busiest_queue_1m,omitempty"`
	MeanQueue1m    *float64 `json:"mean_queue_1m,omitempty"`
	// Signals are, for a pool this instance scrapes, the signals its
	// engine profile reads, each with the metric names it looks for and
	// on how many replicas' latest pages it was found or missing.
	// PagesRead counts the replicas whose page was read with the profile.
	Signals   []SignalCoverage `json:"signals,omitempty"`
	PagesRead int              `json:"pages_read,omitempty"`
	// HitRate1m is the pool's prefix-cache hit rate over the last
	// minute: the replicas' hits over their lookups, summed (so busy
	// replicas weigh more).
	HitRate1m *float64 `json:"hit_rate_1m,omitempty"`
	// Escapes1h counts replicas taken out of the hash table for
	// saturation in the last hour; WeightMoves1h counts weight changes.
	// Both count only what this instance decided while leading.
	Escapes1h     int `json:"escapes_1h"`
	WeightMoves1h int `json:"weight_moves_1h"`
	// Fallback is set while too many replicas are saturated to take any
	// out (pure affinity).
	Fallback bool `json:"fallback,omitempty"`
	Hotspot  bool `json:"hotspot"`
	// RecentDecisions are the latest changes this instance decided for
	// the pool's replicas while leading (at most 32, within the last
	// hour), newest first.
	RecentDecisions []Decision `json:"recent_decisions,omitempty"`
	// Moved is what this instance's pushes cost the pool's sessions;
	// absent for a pool that does not hash or before its tables changed.
	Moved *Moved `json:"moved,omitempty"`
	// HotKeys is the pool's hot-key table and what this instance saw of
	// its requests; absent for a pool without hot keys on.
	HotKeys *HotKeys `json:"hot_keys,omitempty"`
	// Adapters is where the pool's LoRA adapters are placed and what
	// this instance saw of their demand (pools placing adapters only).
	Adapters *Adapters `json:"adapters,omitempty"`
	// Prefill is, for the decode pool of prefill/decode disaggregation,
	// its prefill pool, the table Envoy names prefill replicas from, and
	// where the logged requests went.
	Prefill *Prefill `json:"prefill,omitempty"`
}

// Prefill is a decode pool's prefill side as served, and the requests the
// Envoys connected to this instance logged for it since it started.
type Prefill struct {
	// Pool is the prefill pool; Header the header naming a request's
	// prefill replica; MinBodyBytes the body below which the decode
	// replica prefills.
	Pool         string `json:"pool"`
	Header       string `json:"header"`
	MinBodyBytes int    `json:"min_body_bytes,omitempty"`
	// Hosts are the table's prefill replicas with their slots, highest
	// first; none while no prefill replica serves (every request then
	// prefills on its decode replica).
	Hosts []PrefillHost `json:"hosts"`
	// Slots is the table's size.
	Slots int `json:"slots"`
	// Requests counts the logged requests, Remote those that named a
	// prefill replica, Unknown those naming one that is not in the table
	// or sent to a decode replica not in the pool (a stale table, or a
	// change in flight).
	Requests uint64 `json:"requests"`
	Remote   uint64 `json:"remote"`
	Unknown  uint64 `json:"unknown"`
	// Keyed counts the remote requests that carried a prefill key, Away
	// those named another replica than their key's slot's, by reason
	// (AwaySpread, AwayFollow, AwayBound): what affinity gave up for
	// balance.
	Keyed uint64            `json:"keyed"`
	Away  map[string]uint64 `json:"away,omitempty"`
	// Pairs are the logged requests by decode replica and the prefill
	// replica named for them.
	Pairs []PrefillPair `json:"pairs"`
}

// PrefillHost is one replica of a prefill table.
type PrefillHost struct {
	Address string `json:"address"`
	Slots   int    `json:"slots"`
}

// PrefillPair counts the logged requests a decode replica received naming
// one prefill replica.
type PrefillPair struct {
	Decode   string `json:"decode"`
	Prefill  string `json:"prefill"`
	Requests uint64 `json:"requests"`
}

// HotKeys is a pool's hot-key table as served, and the requests the
// Envoys connected to this instance logged for it (a sample of the
// fleet's when there are several instances), since the instance started.
type HotKeys struct {
	// Keys are the table's entries, highest share first.
	Keys []HotKey `json:"keys"`
	// Requests counts the logged requests with a key; Away those of
	// them sent to another replica than their key's first (the one the
	// key alone hashes to with every replica in the table), by reason
	// (AwaySpread, AwayEscape, AwayFollow, AwayBound).
	Requests uint64            `json:"requests"`
	Away     map[string]uint64 `json:"away"`
	// Tracked is the number of key values the pool's sketch tracks.
	Tracked int `json:"tracked"`
}

// Adapters is a pool's LoRA adapter placement as served, and the requests
// the Envoys connected to this instance logged for it since it started.
type Adapters struct {
	// Header is the request header that names an adapter.
	Header string `json:"header"`
	// Adapters are the placed adapters, highest share first.
	Adapters []Adapter `json:"adapters"`
	// Requests counts the pool's logged requests, AdapterRequests those
	// naming an adapter that is not a base model; Rejected those whose
	// body's adapter field named none, by the Lua filter's reason.
	Requests        uint64            `json:"requests"`
	AdapterRequests uint64            `json:"adapter_requests"`
	Rejected        map[string]uint64 `json:"rejected"`
	// Moves counts the adapters whose members changed at a push, by
	// cause (MoveDemand, MoveMembership, MoveCapacity).
	Moves map[string]uint64 `json:"moves"`
	// Tracked is the number of adapters the pool's sketch tracks.
	Tracked int `json:"tracked"`
	// EnginesReporting is the number of replicas whose engine reports
	// its adapters (this instance's scrapes: 0 on a follower); Overfull
	// names those reporting more adapters in flight than their max_lora.
	EnginesReporting int      `json:"engines_reporting"`
	Overfull         []string `json:"overfull,omitempty"`
	// SlotsFull names the replicas on which the Envoys that log their
	// load to this instance have requests in flight for at least as
	// many adapters as the replica has slots (where a pool's pick
	// filters observe load): a request naming another adapter waits
	// there, and the filters send it elsewhere while they can.
	SlotsFull []string `json:"slots_full,omitempty"`
	// GRPCJS says how grpc-js clients, which get no adapter clusters,
	// route adapter requests (AdaptersGRPCJS).
	GRPCJS string `json:"grpc_js"`
}

// AdaptersGRPCJS is Adapters.GRPCJS: grpc-js cannot hold two ring hash
// clusters over shared endpoints, so its adapter routes go to the pool's.
const AdaptersGRPCJS = "grpc-js hashes adapter requests over the whole pool (no adapter clusters)"

// Adapter is one placed adapter.
type Adapter struct {
	Name string `json:"name"`
	// Replicas is the healthy replicas it was decided to take; Share its
	// share of the pool's requests then.
	Replicas int     `json:"replicas"`
	Share    float64 `json:"share"`
	// Members are its replicas, with their health.
	Members []AdapterMember `json:"members"`
	// InFlight is the number of replicas whose engine reports it in
	// flight (its spread; 0 on a follower, which does not scrape).
	InFlight int `json:"in_flight"`
	// OverCapacity is set when it is in the tail: no slot of its own was
	// left, so it is on its first-ranked replica, in the slots kept there
	// for the tail.
	OverCapacity bool `json:"over_capacity,omitempty"`
	// Stage is fleet.StageAdding or fleet.StageLeaving while its cluster
	// is served without its route, "" once routed.
	Stage string `json:"stage,omitempty"`
}

// AdapterMember is one member replica of a placed adapter.
type AdapterMember struct {
	Identity string `json:"identity"`
	Health   string `json:"health"`
}

// Causes of an adapter placement move.
const (
	MoveDemand     = "demand"     // its replicas were decided anew, or it was placed or removed
	MoveMembership = "membership" // a replica joined, left or changed health
	MoveCapacity   = "capacity"   // slots, or a busier adapter, took its place
)

// MoveCauses are the causes, in the order they are shown.
var MoveCauses = []string{MoveDemand, MoveMembership, MoveCapacity}

// Reasons a request went to another replica than its key's first.
const (
	AwaySpread = "spread"   // its key is hot, spread on purpose
	AwayEscape = "escape"   // its first replica is out of the table
	AwayFollow = "followed" // a filter sent it where its key's last request went
	AwayBound  = "bound"    // otherwise: Envoy's bounded load, or a table not yet applied
)

// AwayReasons are the reasons, in the order they are shown.
var AwayReasons = []string{AwaySpread, AwayEscape, AwayFollow, AwayBound}

// HotKey is one entry of a pool's hot-key table. Its value is never shown
// as sent: a body key's value is a hash already, a header key's is shown
// as the first 8 hex digits of its hash.
type HotKey struct {
	Key     int     `json:"key"` // index in the pool's key chain
	KeyName string  `json:"key_name,omitempty"`
	Value   string  `json:"value"`
	Share   float64 `json:"share"`
	Spread  int     `json:"spread"`
	// Why the key is in the table: HotShare, HotReplica or HotDeclared.
	Why string `json:"why,omitempty"`
}

// Why a key is in a pool's hot-key table.
const (
	HotShare    = "share"    // its share of the requests alone
	HotReplica  = "replica"  // the keys that hash to its replica carry too much
	HotDeclared = "declared" // the policy declares it
)

// Moved is what the pushes that changed a pool's hash tables cost: the
// share of each table's hash space, so of its sessions, that changed
// replica, computed exactly from the tables every client kind builds
// before and after (Envoy's Maglev or ring, gRPC's rings).
type Moved struct {
	// Last is the latest push that changed the pool.
	Last *MovedPush `json:"last,omitempty"`
	// Pushes1h counts the pushes that changed the pool in the last hour;
	// Total1h sums their shares per table and client kind.
	Pushes1h int          `json:"pushes_1h"`
	Total1h  []MovedShare `json:"total_1h,omitempty"`
}

// Causes of a MovedPush.
const (
	CauseMembership = "membership" // replicas joined or left
	CauseHealth     = "health"     // the escape hatch, or discovery's draining, degraded, unhealthy
	CauseWeight     = "weight"     // weights moved
	CausePolicy     = "policy"     // the pool's hash settings or groups
	CauseMixed      = "mixed"      // more than one of these in one push
)

// MovedPush is what one push cost a pool.
type MovedPush struct {
	Time time.Time `json:"time"`
	// Cause is what changed in the pool (CauseMembership, ...).
	Cause string `json:"cause"`
	// Replicas counts the replicas that joined, left, or changed health
	// or weight.
	Replicas int          `json:"replicas"`
	Shares   []MovedShare `json:"shares"`
}

// MovedShare is the share of one table's hash space that changed
// replica, for the client kinds that build it alike: Own to or from a
// replica that changed, Collateral between replicas that did not.
type MovedShare struct {
	// Table is the table's cluster: the pool's own, or a tenant group's.
	Table string `json:"table"`
	// Clients are the kinds of client (envoy, grpc, grpc-js) whose
	// tables moved exactly this much.
	Clients    []string `json:"clients"`
	Own        float64  `json:"own"`
	Collateral float64  `json:"collateral"`
	// ByCause splits a total by the cause of each push (Total1h only).
	ByCause map[string]float64 `json:"by_cause,omitempty"`
}

// Share is the whole share moved, own and collateral.
func (m MovedShare) Share() float64 { return m.Own + m.Collateral }

// BalanceMinQueue is the busiest replica's mean queue depth below which a
// pool's balance is not computed: too little load to compare.
const BalanceMinQueue = 2

// SignalCoverage is one signal an engine profile reads, and how many of
// the pool's replicas' latest pages carried it. A hit-rate signal whose
// other source was found (the lookup and hit counters, or the engine's
// own rate) counts as neither found nor missing.
type SignalCoverage struct {
	Signal string `json:"signal"`
	// Metrics are the names the profile looks for, the first present
	// winning.
	Metrics []string `json:"metrics"`
	// Use is what kvxds does with it: "weights and escape hatch",
	// "escape hatch", or "status" (shown only).
	Use     string `json:"use"`
	Found   int    `json:"found"`
	Missing int    `json:"missing"`
}

// Kinds of Decision.
const (
	Escape     = "escape" // out of the hash table for saturation
	Return     = "return" // back in after saturation
	WeightMove = "weight" // weight multiplier moved
)

// Decision is one change kvxds decided for a replica.
type Decision struct {
	Time    time.Time `json:"time"`
	Replica string    `json:"replica"`
	Kind    string    `json:"kind"` // escape, return, weight
	// FromMultiplier and ToMultiplier are the replica's weight
	// multiplier before and after.
	FromMultiplier uint32 `json:"from_multiplier,omitempty"`
	ToMultiplier   uint32 `json:"to_multiplier,omitempty"`
	// Reason is what the decision followed: the threshold crossed, the
	// calm run, the free capacity.
	Reason string `json:"reason,omitempty"`
}

// Health is a replica's health as the status names it: the health
// pushed to the data plane (fleet.Health) with a draining replica told
// apart by why it drains, and a healthy one by whether its metrics are
// fresh. ReplicaHealth derives it.
type Health string

// Health values of a Replica, each with the fleet health it is pushed as.
const (
	Serving   Health = "serving"   // healthy: in the hash table
	Stale     Health = "stale"     // healthy, metrics too old: the neutral weight
	Draining  Health = "draining"  // draining, going away: discovery says so
	Saturated Health = "saturated" // draining until it recovers: the escape hatch
	Degraded  Health = "degraded"  // degraded: used only when too few are healthy
	Unhealthy Health = "unhealthy" // unhealthy: no traffic
)

// ReplicaHealth is the health of a replica whose fleet health is pushed,
// given whether the verdict on its metrics is saturated (the escape hatch,
// which drains it) and whether they are stale. Saturation wins over what
// discovery says, which wins over stale metrics.
func ReplicaHealth(pushed fleet.Health, saturated, stale bool) Health {
	switch {
	case saturated:
		return Saturated
	case pushed == fleet.Draining:
		return Draining
	case pushed == fleet.Degraded:
		return Degraded
	case pushed == fleet.Unhealthy:
		return Unhealthy
	case stale:
		return Stale
	}
	return Serving
}

// Replica is one replica of a pool.
type Replica struct {
	// ID is the replica's identity on the hash ring (its hash key).
	ID       string    `json:"id"`
	Address  string    `json:"address"`
	Locality *Locality `json:"locality,omitempty"`
	// Source is the discovery source that found it: static, dns or
	// kubernetes.
	Source string `json:"source,omitempty"`
	Health Health `json:"health"`
	// Reason says why a replica is not plainly serving.
	Reason string `json:"reason,omitempty"`
	// Since is when the replica entered its current health (as seen by
	// this instance).
	Since time.Time `json:"since,omitzero"`
	// StaticWeight is the weight discovery or the policy gives;
	// Multiplier the metric-driven factor (absent without metrics);
	// Weight the endpoint weight served.
	StaticWeight uint32 `json:"static_weight"`
	Multiplier   uint32 `json:"multiplier,omitempty"`
	Weight       uint32 `json:"weight"`
	// TableShare is the fraction of proxyless gRPC clients' hash ring
	// the replica owns (0 while out of it), for hash pools: of the ring
	// it serves in, an exclusive tenant group's for its members. Envoy's
	// Maglev table gives shares within a fraction of a percent of the
	// weight's.
	TableShare *float64 `json:"table_share,omitempty"`
	// Latest engine signals.
	QueueDepth  *float64 `json:"queue_depth,omitempty"`
	Running     *float64 `json:"running,omitempty"`
	KVOccupancy *float64 `json:"kv_occupancy,omitempty"`
	// Over the last minute.
	QueueDepth1m   *float64 `json:"queue_depth_1m,omitempty"` // mean of the scrapes
	HitRate1m      *float64 `json:"hit_rate_1m,omitempty"`
	TTFTP50        *float64 `json:"ttft_p50_seconds,omitempty"`
	TTFTP95        *float64 `json:"ttft_p95_seconds,omitempty"`
	PreemptionRate *float64 `json:"preemption_rate,omitempty"` // per second
	// HitRateTotal is the engine's hit rate since it started.
	HitRateTotal *float64 `json:"hit_rate_total,omitempty"`
	// SignalsFound and SignalsMissing are the signals of the pool's
	// profile its latest page read carried and lacked (see
	// SignalCoverage); both absent before a page was read.
	SignalsFound   []string `json:"signals_found,omitempty"`
	SignalsMissing []string `json:"signals_missing,omitempty"`
	LastScrape     *Scrape  `json:"last_scrape,omitempty"`
	// Trend is the last 15 minutes of the replica's queue, hit rate and
	// TTFT in 15-second steps. The JSON carries it only when asked for
	// (GET /api/v1/status?trend=1): at 1,000 replicas it would triple
	// the body.
	Trend *Trend `json:"trend_15m,omitempty"`
}

// Trend is a replica's recent past in fixed steps, oldest first. A step
// without good scrapes has no point.
type Trend struct {
	StepSeconds float64      `json:"step_seconds"`
	Points      []TrendPoint `json:"points"`
}

// TrendPoint is one step of a Trend, starting at Time; the last may
// cover less than a step.
type TrendPoint struct {
	Time       time.Time `json:"time"`
	QueueDepth *float64  `json:"queue_depth,omitempty"` // mean of the step's scrapes
	HitRate    *float64  `json:"hit_rate,omitempty"`
	TTFTP95    *float64  `json:"ttft_p95_seconds,omitempty"`
}

// Locality places a replica.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

// Scrape is the outcome of a replica's latest scrape.
type Scrape struct {
	Time  time.Time `json:"time"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// DataPlane is one xDS client connected to this instance: the streams of
// one node id from one address.
type DataPlane struct {
	NodeID  string `json:"node_id"`
	Cluster string `json:"cluster,omitempty"`
	// Kind is the kind of client kvxds serves it as: envoy, grpc,
	// grpc-js, or grpc-nohash (a gRPC client whose version crashes on a
	// ring hash, see NoHash).
	Kind string `json:"kind"`
	// UserAgent is the node's user_agent_name and user_agent_version.
	UserAgent string `json:"user_agent,omitempty"`
	// NoHash says why it is served without a ring hash (no session
	// affinity) and what to upgrade to.
	NoHash  string `json:"no_hash,omitempty"`
	Address string `json:"address,omitempty"`
	Streams int    `json:"streams"`
	Delta   bool   `json:"delta,omitempty"`
	// Connected is when its oldest open stream opened.
	Connected time.Time `json:"connected"`
	// ACKed is the last version the client accepted, by short type.
	ACKed    map[string]string `json:"acked,omitempty"`
	LastNACK *NACK             `json:"last_nack,omitempty"`
}

// NACK is a configuration a client rejected.
type NACK struct {
	Type    string    `json:"type"`
	Version string    `json:"version,omitempty"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

// Number returns a pointer to v, or nil when v is NaN or infinite (an
// unknown value, omitted from the JSON).
func Number(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// Write writes s as indented JSON.
func Write(w io.Writer, s Status) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(s)
}

// Handler serves the status that build returns, as indented JSON,
// with each replica's trend only if the query asks for it (trend=1).
func Handler(build func() Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		st := build()
		if r.URL.Query().Get("trend") != "1" {
			st = WithoutTrends(st)
		}
		Write(w, st)
	})
}

// WithoutTrends returns s without its replicas' trends; s is unchanged.
func WithoutTrends(s Status) Status {
	pools := make([]Pool, len(s.Pools))
	for i, p := range s.Pools {
		reps := make([]Replica, len(p.Replicas))
		for j, rep := range p.Replicas {
			rep.Trend = nil
			reps[j] = rep
		}
		p.Replicas = reps
		pools[i] = p
	}
	s.Pools = pools
	return s
}
