// Package weights turns replica metrics into endpoint weights and health.
//
// Contract: a pure function from (policy, previous state, fresh signals)
// to per-endpoint weight and health, fed into the fleet model so that
// only endpoint assignments (EDS) change. Until metrics are configured,
// every endpoint keeps the static weight its discovery source gives it
// and is healthy.
package weights
