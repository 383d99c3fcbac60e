package translate

import (
	"fmt"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kvxds/kvxds/fleet"
)

// httpConnectionManager is the HCM shared by both kinds: routes over
// ADS and the router filter.
//
// request_timeout (whole downstream request) and max_stream_duration are
// left unset, i.e. disabled: long prompts and long streamed generations
// are legitimate, and the route timeout is the one knob for them.
// stream_idle_timeout keeps Envoy's default (5m) until the route is
// chosen; the route's idle_timeout overrides it when the pool sets one.
//
// For Envoy, a hash pool with body keys or hot keys gets the Lua filter
// that sets their headers first (see bodyKeyFilter), and a pool with hot
// keys the access log that reports its keys to kvxds (hotKeyAccessLog).
func httpConnectionManager(p *fleet.Pool, kind Kind) (*hcmv3.HttpConnectionManager, error) {
	rc := &routerv3.Router{}
	if ObservesLoad(p, kind) {
		al, err := loadAccessLog(p)
		if err != nil {
			return nil, fmt.Errorf("load log: %w", err)
		}
		rc.UpstreamLog = []*accesslogv3.AccessLog{al}
		rc.UpstreamLogOptions = &routerv3.Router_UpstreamAccessLogOptions{FlushUpstreamLogOnUpstreamStream: true}
	}
	router, err := typed(rc)
	if err != nil {
		return nil, err
	}
	var filters []*hcmv3.HttpFilter
	if luaFilter(p, kind) {
		f, err := bodyKeyFilter(p)
		if err != nil {
			return nil, fmt.Errorf("body keys: %w", err)
		}
		filters = append(filters, f)
	}
	if Picks(p, kind) {
		f, err := pickFilter(p)
		if err != nil {
			return nil, fmt.Errorf("pick: %w", err)
		}
		filters = append(filters, f)
	}
	if prefills(p, kind) {
		fs, err := prefillFilters(p)
		if err != nil {
			return nil, fmt.Errorf("prefill: %w", err)
		}
		filters = append(filters, fs...)
	}
	filters = append(filters, &hcmv3.HttpFilter{
		Name:       wellknown.Router,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
	})
	var logs []*accesslogv3.AccessLog
	if kind == Envoy && p.Balancer == fleet.ConsistentHash && (p.Hash.Hot != nil || p.LoRA != nil) || prefills(p, kind) {
		al, err := hotKeyAccessLog(p)
		if err != nil {
			return nil, fmt.Errorf("hot keys: %w", err)
		}
		logs = append(logs, al)
	}
	return &hcmv3.HttpConnectionManager{
		AccessLog:  logs,
		StatPrefix: p.Name,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: p.Name,
		}},
		HttpFilters: filters,
	}, nil
}

func buildListener(p *fleet.Pool, kind Kind) (*listenerv3.Listener, error) {
	hcm, err := httpConnectionManager(p, kind)
	if err != nil {
		return nil, err
	}
	cfg, err := typed(hcm)
	if err != nil {
		return nil, err
	}
	var l *listenerv3.Listener
	switch kind {
	case Envoy:
		l = &listenerv3.Listener{
			Name: p.Name,
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Protocol:      corev3.SocketAddress_TCP,
				Address:       p.ListenAddress,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p.Port},
			}}},
			FilterChains: []*listenerv3.FilterChain{{
				Filters: []*listenerv3.Filter{{
					Name:       wellknown.HTTPConnectionManager,
					ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg},
				}},
			}},
		}
		var limit uint32
		if luaFilter(p, kind) {
			limit = bodyBufferLimit(p)
		}
		if prefills(p, kind) && prefillBodyKeys(p) {
			limit = max(limit, uint32(max(prefillBodyLimit(p), envoyDefaultBufferLimit)))
		}
		if limit > 0 {
			l.PerConnectionBufferLimitBytes = wrapperspb.UInt32(limit)
		}
	case GRPC, GRPCJS, GRPCNoHash:
		// A client-side API listener: no address, named after the
		// target the client dials (xds:///P).
		l = &listenerv3.Listener{
			Name:        p.Name,
			ApiListener: &listenerv3.ApiListener{ApiListener: cfg},
		}
	default:
		return nil, fmt.Errorf("unknown kind %v", kind)
	}
	if err := l.ValidateAll(); err != nil {
		return nil, err
	}
	return l, nil
}
