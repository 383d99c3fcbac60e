package kubernetes

import (
	"context"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
)

// health tracks whether the informer has a live watch. client-go's
// reflector retries lists and watches on its own, but tells no one when a
// watch is open again, and keeps quiet while it retries a refused
// connection; the source needs both to know whether its cache is current.
// The informer's client is wrapped (trackedClient) to feed it.
type health struct {
	wake func()
	now  func() time.Time

	mu sync.Mutex
	// live counts the watches open now (one, but for a moment on reconnect).
	live int
	// up is when live last went from 0 to 1.
	up time.Time
	// err is the last list or watch failure since a watch was last open.
	err error
	// down is when the last watch ended (or tracking began).
	down time.Time
}

func newHealth(now func() time.Time, wake func()) *health {
	return &health{wake: wake, now: now, down: now()}
}

// status is a snapshot: whether a watch is open and for how long, or else
// the last failure and how long no watch has been open.
func (h *health) status() (live bool, open time.Duration, err error, down time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live > 0 {
		return true, h.now().Sub(h.up), nil, 0
	}
	return false, 0, h.err, h.now().Sub(h.down)
}

func (h *health) opened() {
	h.mu.Lock()
	if h.live == 0 {
		h.up = h.now()
	}
	h.live++
	h.err = nil
	h.mu.Unlock()
	h.wake()
}

func (h *health) closed() {
	h.mu.Lock()
	h.live--
	if h.live == 0 {
		h.down = h.now()
	}
	h.mu.Unlock()
	h.wake()
}

func (h *health) failed(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
	h.wake()
}

// trackedClient is a clientset whose EndpointSlice lists and watches report
// to a health; everything else is the wrapped clientset's.
type trackedClient struct {
	kubernetes.Interface
	h *health
}

func (c trackedClient) DiscoveryV1() discoveryv1client.DiscoveryV1Interface {
	return trackedDiscovery{c.Interface.DiscoveryV1(), c.h}
}

type trackedDiscovery struct {
	discoveryv1client.DiscoveryV1Interface
	h *health
}

func (d trackedDiscovery) EndpointSlices(namespace string) discoveryv1client.EndpointSliceInterface {
	return trackedSlices{d.DiscoveryV1Interface.EndpointSlices(namespace), d.h}
}

type trackedSlices struct {
	discoveryv1client.EndpointSliceInterface
	h *health
}

func (s trackedSlices) List(ctx context.Context, opts metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
	l, err := s.EndpointSliceInterface.List(ctx, opts)
	if err != nil && ctx.Err() == nil {
		s.h.failed(err)
	}
	return l, err
}

func (s trackedSlices) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := s.EndpointSliceInterface.Watch(ctx, opts)
	if err != nil {
		if ctx.Err() == nil {
			s.h.failed(err)
		}
		return nil, err
	}
	s.h.opened()
	return &trackedWatch{Interface: w, h: s.h}, nil
}

// trackedWatch reports its end. The reflector stops every watch it is done
// with, whether the server ended it or the connection broke, so Stop is
// where a watch ends.
type trackedWatch struct {
	watch.Interface
	h    *health
	once sync.Once
}

func (w *trackedWatch) Stop() {
	w.Interface.Stop()
	w.once.Do(w.h.closed)
}
