package kubernetes

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kvxds/kvxds/test/kube"
)

// rbac is examples/kubernetes/rbac.yaml, as typed objects.
type rbac struct {
	account *corev1.ServiceAccount
	role    *rbacv1.Role
	binding *rbacv1.RoleBinding
}

func loadRBAC(t testing.TB) rbac {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "kubernetes", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var r rbac
	for doc := range bytes.SplitSeq(b, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("rbac.yaml: %v", err)
		}
		var into any
		switch tm.Kind {
		case "ServiceAccount":
			r.account = new(corev1.ServiceAccount)
			into = r.account
		case "Role":
			r.role = new(rbacv1.Role)
			into = r.role
		case "RoleBinding":
			r.binding = new(rbacv1.RoleBinding)
			into = r.binding
		default:
			t.Fatalf("rbac.yaml: unexpected kind %q", tm.Kind)
		}
		// The API server's strict decoder, which unlike encoding/json
		// matches field names case-sensitively: a field spelt "apigroups"
		// fails here instead of being read as apiGroups.
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("rbac.yaml: %v", err)
		}
		strict, err := kjson.UnmarshalStrict(js, into)
		if err := errors.Join(append(strict, err)...); err != nil {
			t.Fatalf("rbac.yaml: %s: %v", tm.Kind, err)
		}
	}
	if r.account == nil || r.role == nil || r.binding == nil {
		t.Fatal("rbac.yaml: want a ServiceAccount, a Role and a RoleBinding")
	}
	return r
}

// testRBAC runs the source as the ServiceAccount of rbac.yaml, through a
// kubeconfig holding its token: it works with the Role as written, and
// reports an error, not targets, when the Role lacks watch.
func testRBAC(t *testing.T, c *kube.Cluster) {
	f := newFixture(t, c, "rbac")
	f.apply(f.slice("llm-a", podEndpoints(4, 0, 4)...))
	r := loadRBAC(t)
	ctx := f.ctx()
	if _, err := f.client.CoreV1().ServiceAccounts(f.ns).Create(ctx, r.account, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the service account: %v", err)
	}
	if _, err := f.client.RbacV1().Roles(f.ns).Create(ctx, r.role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the role: %v", err)
	}
	if _, err := f.client.RbacV1().RoleBindings(f.ns).Create(ctx, r.binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the role binding: %v", err)
	}
	user := "system:serviceaccount:" + f.ns + ":" + r.account.Name
	f.waitAccess(user, "watch", f.ns, true)
	for _, denied := range []struct{ verb, ns, resource string }{
		{"list", "default", "endpointslices"}, // another namespace
		{"create", f.ns, "endpointslices"},
		{"list", f.ns, "pods"},
	} {
		if f.allowed(user, denied.verb, denied.ns, denied.resource) {
			t.Errorf("the role grants %s %s in %s", denied.verb, denied.resource, denied.ns)
		}
	}

	cfg := f.config()
	cfg.Kubeconfig = c.KubeconfigFor(t, c.ServiceAccountToken(t, f.ns, r.account.Name))
	src, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ok := start(t, src)
	ok.waitTargets(podTargets(4, 0, 4), waitFor)

	t.Run("without watch", func(t *testing.T) {
		role := r.role.DeepCopy()
		role.Rules[0].Verbs = slices.DeleteFunc(role.Rules[0].Verbs, func(v string) bool { return v == "watch" })
		if _, err := f.client.RbacV1().Roles(f.ns).Update(f.ctx(), role, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("updating the role: %v", err)
		}
		f.waitAccess(user, "watch", f.ns, false)
		src, err := New(cfg, testLogger(t))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		denied := start(t, src)
		// It can list, but not watch: no targets, an error.
		if u := denied.next(waitFor); u.Err == nil || !apierrors.IsForbidden(u.Err) {
			t.Fatalf("first update = %+v, want a forbidden error", u)
		}

		// Given watch back, it recovers by itself.
		if _, err := f.client.RbacV1().Roles(f.ns).Update(f.ctx(), r.role, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("restoring the role: %v", err)
		}
		denied.waitTargets(podTargets(4, 0, 4), 2*waitFor)
	})
}

func (f *fixture) allowed(user, verb, ns, resource string) bool {
	f.t.Helper()
	group := ""
	if resource == "endpointslices" {
		group = "discovery.k8s.io"
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
	}}
	res, err := f.client.AuthorizationV1().SubjectAccessReviews().Create(f.ctx(), sar, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("reviewing %s's access: %v", user, err)
	}
	return res.Status.Allowed
}

// waitAccess waits until RBAC, which the API server reads from its own
// cache, grants (or denies) user verb on endpointslices in ns.
func (f *fixture) waitAccess(user, verb, ns string, want bool) {
	f.t.Helper()
	deadline := time.Now().Add(waitFor)
	for f.allowed(user, verb, ns, "endpointslices") != want {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s still allowed=%v to %s endpointslices", user, !want, verb)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
