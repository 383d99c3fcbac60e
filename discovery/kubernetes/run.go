package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kvxds/kvxds/discovery"
)

// downFor is how long the source waits, once it has reported targets, for
// a lost watch to come back before it reports an error. The API server
// ends every watch after a few minutes and the informer opens the next at
// once: that is no failure. An API server that stays away longer is.
const downFor = 5 * time.Second

// watchSettle is how long a watch must stay open before a failing source
// trusts it again. A watch that resumes across an API server restart is
// often opened only to be ended at once (410 Gone: its resource version is
// older than the new server's cache), and the informer relists after a
// backoff of up to 30s; without this, the source would report targets,
// then the error again.
const watchSettle = time.Second

// errNoWatch stands for a watch that ended and could not be reopened
// before any request failed (the informer is still backing off).
var errNoWatch = errors.New("no watch open on endpointslices")

// Run watches the Service's EndpointSlices until ctx is done. It sends the
// targets once the informer has listed them and holds a watch, then on
// every change that changes them (resyncs and updates that change no
// target send nothing).
//
// It sends an error, once per failure, when it cannot tell: as soon as a
// list or watch fails before the first targets are known (API server
// unreachable, access denied), and when no watch has been open for
// downFor after that. While failing it keeps its cache and the
// informer keeps retrying with backoff; once a watch has been open for a
// second it sends the targets, changed or not, so the receiver knows they
// are current again.
func (s *Source) Run(ctx context.Context, up chan<- discovery.Update) {
	ctx, cancel := context.WithCancel(ctx)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	h := newHealth(time.Now, poke)
	factory := informers.NewSharedInformerFactoryWithOptions(trackedClient{s.client, h}, 0,
		informers.WithNamespace(s.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s.selector }),
		informers.WithTransform(stripManagedFields))
	esi := factory.Discovery().V1().EndpointSlices()
	informer, lister := esi.Informer(), esi.Lister().EndpointSlices(s.cfg.Namespace)
	// The informer's goroutines may outlive Run (see below): they log only
	// while it runs.
	var logMu sync.Mutex
	running := true
	defer func() {
		logMu.Lock()
		running = false
		logMu.Unlock()
		cancel()
		// Shutdown waits for the informer's goroutines, and client-go's
		// watch-list retry sleeps out its backoff (up to 30s) without
		// looking at ctx: wait in the background, so that Run returns as
		// soon as ctx is done.
		go factory.Shutdown()
	}()

	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(_, _ any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	if err == nil {
		// health records every failure; this handler only keeps client-go
		// from logging each one through klog as well.
		err = informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			logMu.Lock()
			defer logMu.Unlock()
			if running {
				s.log.Debug("listing or watching endpointslices failed; retrying", "error", err)
			}
		})
	}
	if err != nil {
		select {
		case up <- discovery.Update{Err: fmt.Errorf("kubernetes %s: setting up the informer: %w", s.cfg.name(), err)}:
		case <-ctx.Done():
		}
		<-ctx.Done()
		return
	}
	factory.Start(ctx.Done())

	synced := informer.HasSyncedChecker().Done()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	var sent *discovery.Update // the last update sent; nil before the first
	known := false             // targets have been sent at least once
	for {
		failing := sent != nil && sent.Err != nil
		u, wait := s.next(h, synced == nil, known, failing, lister)
		if u != nil && isNews(sent, *u) {
			if u.Err != nil {
				s.log.Debug("cannot tell the targets", "error", u.Err)
			} else {
				s.log.Debug("targets", "count", len(u.Targets))
			}
			select {
			case up <- *u:
			case <-ctx.Done():
				return
			}
			sent, known = u, known || u.Err == nil
		}
		var due <-chan time.Time
		if wait > 0 {
			retry.Reset(wait)
			due = retry.C
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-synced:
			synced = nil // closed: never select it again
		case <-due:
		}
	}
}

// next is what the source can say now: its targets, an error, or nothing
// yet, in which case wait (if positive) is when to look again. failing
// means the last update sent was an error.
func (s *Source) next(h *health, synced, known, failing bool, lister discoverylisters.EndpointSliceNamespaceLister) (*discovery.Update, time.Duration) {
	live, open, err, down := h.status()
	switch {
	case live && !synced:
		return nil, 0 // the informer is still listing
	case live && failing && open < watchSettle:
		return nil, watchSettle - open
	case live:
		list, lerr := lister.List(labels.Everything())
		if lerr != nil { // only for a bad selector, and there is none
			return &discovery.Update{Err: fmt.Errorf("kubernetes %s: reading the cache: %w", s.cfg.name(), lerr)}, 0
		}
		return &discovery.Update{Targets: targets(list, s.cfg)}, 0
	case !known && err != nil:
		return &discovery.Update{Err: fmt.Errorf("kubernetes %s: %w", s.cfg.name(), err)}, 0
	case !known:
		return nil, 0
	case down >= downFor:
		return &discovery.Update{Err: fmt.Errorf("kubernetes %s: no watch for %s: %w", s.cfg.name(), down.Round(time.Second), cmp.Or(err, errNoWatch))}, 0
	}
	return nil, downFor - down
}

// stripManagedFields drops what the cache need not keep: server-side
// apply's field ownership is often larger than the endpoints themselves.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// isNews reports whether u tells the receiver something the last update
// sent did not: other targets, targets after an error, or an error after
// targets. An error while already failing is not news: the informer
// retries with backoff, and each retry would otherwise send one.
func isNews(sent *discovery.Update, u discovery.Update) bool {
	switch {
	case sent == nil:
		return true
	case u.Err != nil:
		return sent.Err == nil
	case sent.Err != nil:
		return true
	}
	return !slices.Equal(sent.Targets, u.Targets)
}
