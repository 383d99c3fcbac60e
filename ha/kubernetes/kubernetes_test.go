package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvxds/kvxds/ha"
	"github.com/kvxds/kvxds/test/kube"
	"github.com/kvxds/kvxds/weights"
)

// instance records what its Peers tell it.
type instance struct {
	name   string
	peers  *Peers
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	leading bool
	term    int64
	docs    []ha.Document
}

func (i *instance) Leading(l bool, term int64) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.leading, i.term = l, term
}

func (i *instance) Published(d ha.Document) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.docs = append(i.docs, d)
}

func (i *instance) state() (bool, int64, *ha.Document) {
	i.mu.Lock()
	defer i.mu.Unlock()
	var last *ha.Document
	if len(i.docs) > 0 {
		d := i.docs[len(i.docs)-1]
		last = &d
	}
	return i.leading, i.term, last
}

func (i *instance) stop() {
	if i.cancel != nil {
		i.cancel()
		<-i.done
		i.cancel = nil
	}
}

func start(t *testing.T, c *kube.Cluster, name string) *instance {
	t.Helper()
	p, err := NewForConfig(Config{
		Namespace: "kvxds", Lease: "kvxds-chat", ID: name,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}, c.Config(), hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	i := &instance{name: name, peers: p, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(i.done); p.Run(ctx, i) }()
	t.Cleanup(i.stop)
	return i
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leaders(is []*instance) []*instance {
	var out []*instance
	for _, i := range is {
		if l, _, _ := i.state(); l {
			out = append(out, i)
		}
	}
	return out
}

func doc(leader string, term int64, weight uint32) ha.Document {
	return ha.Document{Leader: leader, Term: term, Time: time.Now().UTC().Truncate(time.Second),
		Pools: ha.Decisions{"chat": {"vllm-0": {Weight: weight, Saturated: true}, "vllm-1": {Weight: 2}}}}
}

// Three instances on a real API server: one leads and publishes, every
// instance receives its decisions; when it leaves another takes over in a
// later term; a leader whose Lease was taken cannot publish, and neither
// can one whose successor has.
func TestElection(t *testing.T) {
	c := kube.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvxds"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	is := []*instance{start(t, c, "a"), start(t, c, "b"), start(t, c, "c")}
	waitFor(t, "a leader", 20*time.Second, func() bool { return len(leaders(is)) == 1 })
	first := leaders(is)[0]
	_, term, _ := first.state()

	d := doc(first.name, term, 3)
	if err := first.peers.Publish(ctx, d); err != nil {
		t.Fatal(err)
	}
	for _, i := range is {
		waitFor(t, i.name+" to receive the decisions", 10*time.Second, func() bool {
			_, _, last := i.state()
			return last != nil && last.Leader == d.Leader && last.Term == d.Term &&
				last.Pools["chat"]["vllm-0"] == d.Pools["chat"]["vllm-0"]
		})
	}
	for _, i := range is {
		if i != first {
			if err := i.peers.Publish(ctx, doc(i.name, term, 4)); !errors.Is(err, ha.ErrNotLeader) {
				t.Errorf("follower %s published: %v", i.name, err)
			}
		}
	}

	// The leader leaves (releasing its lease): another takes over, in a
	// later term.
	began := time.Now()
	first.stop()
	var rest []*instance
	for _, i := range is {
		if i != first {
			rest = append(rest, i)
		}
	}
	waitFor(t, "a new leader", 20*time.Second, func() bool { return len(leaders(rest)) == 1 })
	t.Logf("new leader %v after the old one left", time.Since(began).Round(time.Millisecond))
	second := leaders(rest)[0]
	_, term2, _ := second.state()
	if term2 <= term {
		t.Fatalf("new term %d, want above %d", term2, term)
	}
	if err := second.peers.Publish(ctx, doc(second.name, term2, 2)); err != nil {
		t.Fatal(err)
	}

	// Fencing: the Lease taken from under the leader (as the API server
	// sees it when the leader is cut off): its next publish is refused
	// before it notices.
	leases := c.Client().CoordinationV1().Leases("kvxds")
	l, err := leases.Get(ctx, "kvxds-chat", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	thief := "intruder"
	l.Spec.HolderIdentity = &thief
	transitions := *l.Spec.LeaseTransitions + 1
	l.Spec.LeaseTransitions = &transitions
	l.Spec.AcquireTime = &metav1.MicroTime{Time: time.Now()}
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := second.peers.Publish(ctx, doc(second.name, term2, 1)); !errors.Is(err, ha.ErrNotLeader) {
		t.Fatalf("a deposed leader published: %v", err)
	}
	waitFor(t, "the deposed leader to notice", 20*time.Second, func() bool { l, _, _ := second.state(); return !l })

	// A document of a later term is never overwritten by an earlier
	// one, even by a leader that still holds the lease of that term.
	cm, err := c.Client().CoreV1().ConfigMaps("kvxds").Get(ctx, "kvxds-chat"+DecisionsSuffix, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Annotations[TermAnnotation] == "" || cm.Annotations[LeaderAnnotation] != second.name {
		t.Fatalf("decisions annotations %v", cm.Annotations)
	}
}

// BenchmarkPublish is one publish of a 1,000-replica pool's decisions to
// a real API server: its size and its latency (a Lease read, a ConfigMap
// read and one ConfigMap write).
func BenchmarkPublish(b *testing.B) {
	c := kube.Start(b)
	ctx := context.Background()
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kvxds"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	p, err := NewForConfig(Config{
		Namespace: "kvxds", Lease: "kvxds-chat", ID: "a",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
	}, c.Config(), nil)
	if err != nil {
		b.Fatal(err)
	}
	i := &instance{name: "a"}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go p.Run(rctx, i)
	for {
		if l, _, _ := i.state(); l {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, term, _ := i.state()
	pool := map[string]weights.Decision{}
	for r := range 1000 {
		pool[fmt.Sprintf("vllm-%d", r)] = weights.Decision{Weight: uint32(1 + r%4)}
	}
	d := ha.Document{Leader: "a", Term: term, Time: time.Now().UTC(), Pools: ha.Decisions{"chat": pool}}
	body, _ := json.Marshal(d)
	n := 0
	for b.Loop() {
		n++
		pool["vllm-0"] = weights.Decision{Weight: uint32(1 + n%4)}
		if err := p.Publish(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(body))/1024, "doc_KiB")
}
