// Package kubernetes is a discovery source that finds a pool's replicas in
// the EndpointSlices of a Kubernetes Service, through a client-go informer:
// one list, then a watch, so changes arrive as they happen.
//
// Each endpoint that is ready becomes a target; one that is terminating but
// still serving becomes a draining target (it keeps its sessions until it
// goes); the rest are left out. A pod's name is its identity on the hash
// ring, so a pod re-created under the same name (a StatefulSet's) with a
// new IP keeps its sessions.
//
// The source needs only get, list and watch on endpointslices in its
// namespace (examples/kubernetes/rbac.yaml).
package kubernetes

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config is one kubernetes block of a policy.
type Config struct {
	Namespace, Service string
	// Port is the EndpointSlice port's name, or its number; "" matches the
	// unnamed port of a single-port Service.
	Port string
	// Kubeconfig is a kubeconfig file's path; "" means the in-cluster
	// configuration, and outside a cluster $KUBECONFIG (or ~/.kube/config).
	Kubeconfig string
	// NodeLocality puts each endpoint's node name in the target's sub-zone.
	NodeLocality bool
}

// Source watches the EndpointSlices of one Service.
type Source struct {
	cfg      Config
	client   kubernetes.Interface
	log      hclog.Logger
	selector string
}

// New checks cfg and builds a client from its kubeconfig (or the
// in-cluster configuration).
func New(cfg Config, logger hclog.Logger) (*Source, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	rc, err := RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes %s: %w", cfg.name(), err)
	}
	return NewForConfig(cfg, rc, logger)
}

// NewForConfig checks cfg and builds a client from rc.
func NewForConfig(cfg Config, rc *rest.Config, logger hclog.Logger) (*Source, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = "kvxds"
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes %s: building the client: %w", cfg.name(), err)
	}
	return &Source{
		cfg:      cfg,
		client:   client,
		log:      logger.With("namespace", cfg.Namespace, "service", cfg.Service),
		selector: discoveryv1.LabelServiceName + "=" + cfg.Service,
	}, nil
}

func (c Config) name() string { return c.Namespace + "/" + c.Service }

func (c Config) check() error {
	if c.Namespace == "" || c.Service == "" {
		return fmt.Errorf("kubernetes %q: a namespace and a service are required", c.name())
	}
	if n, ok := portNumber(c.Port); ok && (n < 1 || n > 65535) {
		return fmt.Errorf("kubernetes %s: port %d out of range", c.name(), n)
	}
	return nil
}

// RESTConfig loads path, or the in-cluster configuration, or the
// kubeconfig kubectl would use.
func RESTConfig(path string) (*rest.Config, error) {
	if path != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err == nil {
		return rc, nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("loading the in-cluster configuration: %w", err)
	}
	rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("not in a cluster, and no usable kubeconfig ($KUBECONFIG or ~/.kube/config): %w", err)
	}
	return rc, nil
}
