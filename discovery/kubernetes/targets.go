package kubernetes

import (
	"cmp"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kvxds/kvxds/discovery"
	"github.com/kvxds/kvxds/fleet"
)

// targets maps the EndpointSlices of one service to its targets, sorted by
// address. It is pure, so the mapping is tested without an API server.
//
// Slices are read IPv4 first, then by name, so the outcome never depends
// on the informer's order. An address is reported once, from the first
// slice that has it (slices overlap while the EndpointSlice controller
// moves endpoints between them). A dual-stack pod is listed in an IPv4 and
// an IPv6 slice: it is one replica, so it is reported once, by its IPv4
// address, rather than twice with one identity on the hash ring.
func targets(in []*discoveryv1.EndpointSlice, cfg Config) []fleet.Endpoint {
	ordered := slices.Clone(in)
	slices.SortFunc(ordered, func(a, b *discoveryv1.EndpointSlice) int {
		return cmp.Or(cmp.Compare(familyOrder(a.AddressType), familyOrder(b.AddressType)), cmp.Compare(a.Name, b.Name))
	})
	out := []fleet.Endpoint{}
	seenAddr := map[string]bool{}
	seenPod := map[string]bool{}
	for _, s := range ordered {
		if s == nil || familyOrder(s.AddressType) > 1 {
			continue // FQDN slices (deprecated) name no address to connect to
		}
		port, ok := matchPort(s.Ports, cfg.Port)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			health, ok := state(ep.Conditions)
			if !ok || len(ep.Addresses) == 0 {
				continue
			}
			// The API holds an endpoint's addresses fungible and lets
			// consumers use the first only.
			addr := ep.Addresses[0]
			pod := podKey(ep)
			if seenAddr[addr] || (pod != "" && seenPod[pod]) {
				continue
			}
			seenAddr[addr] = true
			if pod != "" {
				seenPod[pod] = true
			}
			t := fleet.Endpoint{Host: addr, Port: port, Health: health}
			if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
				t.HashKey = ep.TargetRef.Name
			}
			if ep.Zone != nil {
				t.Locality.Zone = *ep.Zone
			}
			if cfg.NodeLocality && ep.NodeName != nil {
				t.Locality.SubZone = *ep.NodeName
			}
			out = append(out, t)
		}
	}
	discovery.SortTargets(out)
	return out
}

// familyOrder puts IPv4 slices first and marks anything but IPv4 and IPv6
// with 2.
func familyOrder(t discoveryv1.AddressType) int {
	switch t {
	case discoveryv1.AddressTypeIPv4:
		return 0
	case discoveryv1.AddressTypeIPv6:
		return 1
	}
	return 2
}

// matchPort finds the TCP port named (or numbered) want among a slice's
// ports. A nil port number means "all ports" in the API, which gives no
// number to connect to, so it never matches.
func matchPort(ports []discoveryv1.EndpointPort, want string) (uint32, bool) {
	n, numeric := portNumber(want)
	for _, p := range ports {
		if p.Port == nil || *p.Port <= 0 || (p.Protocol != nil && *p.Protocol != "TCP") {
			continue
		}
		if numeric && int(*p.Port) == n || !numeric && deref(p.Name) == want {
			return uint32(*p.Port), true
		}
	}
	return 0, false
}

// portNumber parses a Config.Port that is a number. Port names are
// IANA service names, which must hold a letter, so a number is never one.
func portNumber(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// state maps an endpoint's conditions to whether it is reported and, if
// so, its health. Nil conditions take the API's defaults: ready unknown
// counts as ready, serving unknown defers to ready, terminating unknown is
// false. Ready and serving both mean the endpoint takes traffic;
// terminating means it is going away, so a terminating endpoint still
// serving drains (takes no new sessions, finishes its own), even if a
// Service with publishNotReadyAddresses keeps it ready.
func state(c discoveryv1.EndpointConditions) (health fleet.Health, ok bool) {
	ready := c.Ready == nil || *c.Ready
	serving := ready
	if c.Serving != nil {
		serving = *c.Serving
	}
	terminating := c.Terminating != nil && *c.Terminating
	switch {
	case terminating && (serving || ready):
		return fleet.Draining, true
	case ready:
		return fleet.Healthy, true
	}
	return fleet.Healthy, false
}

// podKey identifies the pod behind an endpoint across slices: its UID,
// which the EndpointSlice controller always sets. Without one (a
// hand-written slice) it is "": a name alone could be an old and a new pod
// of a StatefulSet, both of which must be reported.
func podKey(ep discoveryv1.Endpoint) string {
	if r := ep.TargetRef; r != nil && r.Kind == "Pod" {
		return string(r.UID)
	}
	return ""
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
