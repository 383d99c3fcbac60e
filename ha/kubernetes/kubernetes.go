// Package kubernetes elects the kvxds instance that decides weights with
// a coordination.k8s.io Lease (client-go's leader election) and publishes
// its decisions in a ConfigMap that every instance watches.
//
// Publishing is fenced: the leader writes only while the Lease names it
// with the term it was elected in, never over a document of a later
// term, and with the ConfigMap's resourceVersion as a precondition. So a
// deposed leader that has not noticed yet cannot overwrite its
// successor's decisions, and instances ignore documents of older terms.
package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	dk "github.com/kvxds/kvxds/discovery/kubernetes"
	"github.com/kvxds/kvxds/ha"
)

// Names in the decisions ConfigMap.
const (
	DataKey          = "decisions.json"
	LeaderAnnotation = "kvxds.io/leader"
	TermAnnotation   = "kvxds.io/term"
	// DecisionsSuffix names the ConfigMap after the Lease.
	DecisionsSuffix = "-decisions"
)

// Defaults of Config (a policy's ha kubernetes block): client-go's usual
// leader election timings. RenewDeadline must exceed JitterFactor times
// RetryPeriod, and LeaseDuration RenewDeadline.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	JitterFactor         = leaderelection.JitterFactor
)

// Config configures the election: a policy's ha kubernetes block, and
// this instance's ID.
type Config struct {
	Namespace string
	// Lease names the coordination.k8s.io Lease; the decisions are
	// published in the ConfigMap Lease + DecisionsSuffix.
	Lease string
	// ID is this instance's identity: the Lease's holder while it leads.
	ID string
	// Kubeconfig is a kubeconfig file's path; empty means in-cluster,
	// then $KUBECONFIG.
	Kubeconfig string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// leader election timings.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Peers is the instances sharing one Lease.
type Peers struct {
	// OnReach, if set, is told every RetryPeriod whether the API server
	// answered (for metrics and readiness).
	OnReach func(ok bool, err error)

	cfg    Config
	client kubernetes.Interface
	log    hclog.Logger

	mu      sync.Mutex
	leading bool
	term    int64
}

// New connects with the API server cfg.Kubeconfig names (in-cluster when
// empty, then $KUBECONFIG).
func New(cfg Config, log hclog.Logger) (*Peers, error) {
	rc, err := dk.RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return NewForConfig(cfg, rc, log)
}

// NewForConfig connects with the API server rc names.
func NewForConfig(cfg Config, rc *rest.Config, log hclog.Logger) (*Peers, error) {
	if cfg.Namespace == "" || cfg.Lease == "" || cfg.ID == "" {
		return nil, errors.New("leader election needs a namespace, a lease name and an instance identity")
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "kvxds"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Peers{cfg: cfg, client: client, log: log}, nil
}

func (p *Peers) configMap() string { return p.cfg.Lease + DecisionsSuffix }

// Describe says how this instance agrees with the others.
func (p *Peers) Describe() string {
	return fmt.Sprintf("kubernetes lease %s/%s", p.cfg.Namespace, p.cfg.Lease)
}

// Run campaigns for the Lease and watches the decisions until ctx ends.
func (p *Peers) Run(ctx context.Context, h ha.Handler) {
	var wg sync.WaitGroup
	wg.Go(func() { p.watch(ctx, h) })
	wg.Go(func() { p.probe(ctx, h) })
	defer wg.Wait()
	for ctx.Err() == nil {
		p.campaign(ctx, h)
		// Leadership lost (or never won before an error): campaign
		// again after a pause, as a standby.
		select {
		case <-ctx.Done():
		case <-time.After(p.cfg.RetryPeriod):
		}
	}
}

// campaign runs one leader election until leadership is lost or ctx ends.
func (p *Peers) campaign(ctx context.Context, h ha.Handler) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: p.cfg.Namespace, Name: p.cfg.Lease},
		Client:     p.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: p.cfg.ID},
	}
	var le *leaderelection.LeaderElector
	var err error
	le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   p.cfg.LeaseDuration,
		RenewDeadline:   p.cfg.RenewDeadline,
		RetryPeriod:     p.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            p.cfg.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				// Read the Lease apart from the lock, which the elector's
				// renewals use concurrently.
				term := int64(0)
				if l, err := p.client.CoordinationV1().Leases(p.cfg.Namespace).Get(ctx, p.cfg.Lease, metav1.GetOptions{}); err == nil && l.Spec.LeaseTransitions != nil {
					term = int64(*l.Spec.LeaseTransitions)
				}
				p.mu.Lock()
				p.leading, p.term = true, term
				p.mu.Unlock()
				p.log.Info("won the lease", "lease", p.cfg.Lease, "term", term)
				h.Leading(true, term)
			},
			OnStoppedLeading: func() {
				p.mu.Lock()
				was, term := p.leading, p.term
				p.leading = false
				p.mu.Unlock()
				if was {
					p.log.Warn("lost the lease", "lease", p.cfg.Lease, "term", term)
					h.Leading(false, term)
				}
			},
			OnNewLeader: func(id string) {
				if id != p.cfg.ID {
					p.log.Info("leader", "id", id)
				}
			},
		},
	})
	if err != nil {
		p.log.Error("leader election not possible", "error", err)
		return
	}
	le.Run(ctx)
}

// Publish writes doc into the decisions ConfigMap, fenced by the Lease.
func (p *Peers) Publish(ctx context.Context, doc ha.Document) error {
	p.mu.Lock()
	leading, term := p.leading, p.term
	p.mu.Unlock()
	if !leading || doc.Term != term {
		return ha.ErrNotLeader
	}
	lease, err := p.client.CoordinationV1().Leases(p.cfg.Namespace).Get(ctx, p.cfg.Lease, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the lease: %w", err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != p.cfg.ID || lease.Spec.LeaseTransitions == nil || int64(*lease.Spec.LeaseTransitions) != term ||
		lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil ||
		time.Since(lease.Spec.RenewTime.Time) > time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second {
		return fmt.Errorf("%w: the lease is no longer this instance's in term %d", ha.ErrNotLeader, term)
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	cms := p.client.CoreV1().ConfigMaps(p.cfg.Namespace)
	cm, err := cms.Get(ctx, p.configMap(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.configMap(), Namespace: p.cfg.Namespace}}
		fill(cm, doc, body)
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	case err != nil:
		return fmt.Errorf("reading the decisions: %w", err)
	default:
		if t, perr := strconv.ParseInt(cm.Annotations[TermAnnotation], 10, 64); perr == nil && t > term {
			return fmt.Errorf("%w: term %d has published", ha.ErrNotLeader, t)
		}
		fill(cm, doc, body)
		// The resourceVersion read above is a precondition: a write
		// in between fails with a conflict.
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: the decisions changed meanwhile: %v", ha.ErrNotLeader, err)
	}
	if err != nil {
		return fmt.Errorf("writing the decisions: %w", err)
	}
	return nil
}

func fill(cm *corev1.ConfigMap, doc ha.Document, body []byte) {
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[LeaderAnnotation] = doc.Leader
	cm.Annotations[TermAnnotation] = strconv.FormatInt(doc.Term, 10)
	cm.Data = map[string]string{DataKey: string(body)}
}

// watch tells h of every document in the decisions ConfigMap.
func (p *Peers) watch(ctx context.Context, h ha.Handler) {
	lw := cache.NewListWatchFromClient(p.client.CoreV1().RESTClient(), "configmaps", p.cfg.Namespace,
		fields.OneTermEqualSelector("metadata.name", p.configMap()))
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	deliver := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			p.deliver(cm, h)
		}
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    deliver,
		UpdateFunc: func(_, obj any) { deliver(obj) },
	})
	inf.Run(ctx.Done())
}

// probe reads the Lease every RetryPeriod to tell whether the API server,
// and so the published decisions, can be reached. When it can again, it
// reads the decisions at once: the watch may take client-go's backoff
// (tens of seconds) to resume.
func (p *Peers) probe(ctx context.Context, h ha.Handler) {
	t := time.NewTicker(p.cfg.RetryPeriod)
	defer t.Stop()
	reached := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, p.cfg.RetryPeriod)
		_, err := p.client.CoordinationV1().Leases(p.cfg.Namespace).Get(rctx, p.cfg.Lease, metav1.GetOptions{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsNotFound(err) {
			err = nil // reached; nobody has campaigned yet
		}
		switch {
		case err != nil && reached:
			p.log.Warn("cannot reach the API server; serving the last decisions", "error", err)
		case err == nil && !reached:
			p.log.Info("reached the API server again")
			p.readDecisions(ctx, h)
		}
		reached = err == nil
		if p.OnReach != nil {
			p.OnReach(reached, err)
		}
	}
}

// deliver tells h of the document in cm.
func (p *Peers) deliver(cm *corev1.ConfigMap, h ha.Handler) {
	var doc ha.Document
	if err := json.Unmarshal([]byte(cm.Data[DataKey]), &doc); err != nil {
		p.log.Error("unreadable decisions", "configmap", p.configMap(), "error", err)
		return
	}
	h.Published(doc)
}

// readDecisions reads the decisions ConfigMap once.
func (p *Peers) readDecisions(ctx context.Context, h ha.Handler) {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.RetryPeriod)
	defer cancel()
	cm, err := p.client.CoreV1().ConfigMaps(p.cfg.Namespace).Get(rctx, p.configMap(), metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			p.log.Warn("reading the decisions", "error", err)
		}
		return
	}
	p.deliver(cm, h)
}
