// Package adsload measures how fast an xDS server pushes an update to many
// Envoy-like ADS streams, and compares kvxds with a bare go-control-plane
// server serving the same resources.
//
// A Load opens N ADS streams, one node id each (user_agent_name "envoy"),
// state of the world or incremental (delta). Every stream subscribes to
// all clusters (wildcard CDS), then to the ClusterLoadAssignments of the
// EDS clusters it got, as Envoy does, acknowledges every response (or
// rejects every EDS response, when told to), and records the monotonic
// receive time of every version. Events then measure one change: the time
// from the change to the first stream receiving it (detection), from the
// first stream to the median, the 99th percentile and the last stream
// (fan-out), and the streams that never received the final version
// (missed updates).
//
// RefServer is the reference: go-control-plane's snapshot cache and server
// with one snapshot for every node (a constant node hash), one EDS Cluster
// and one ClusterLoadAssignment whose weights it bumps on request.
//
// Bench runs both servers as separate processes (kvxds as its real binary)
// at several stream counts and prints a Markdown table; cmd/kvxds-adsload
// is its command.
//
// Soak runs kvxds for a long time under many streams while its inputs
// keep changing: one engine's queue goes up and down every second (so
// kvxds halves and restores its weight multiplier) and the policy file is
// rewritten every 30 s. It samples kvxds's memory and goroutines, rebuilds
// from the streams' receipts every version kvxds served (a version string
// that recurs is a new version each time), and reports the streams that
// missed one, the push latency of each kind of change over time, and how
// the streams that reject every EDS response were served and logged.
package adsload
