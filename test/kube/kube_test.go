package kube_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kvxds/kvxds/test/kube"
)

// TestCluster starts a cluster, uses it through a kubeconfig and a
// service-account token, and restarts its API server.
func TestCluster(t *testing.T) {
	c := kube.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}

	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig(t))
	if err != nil {
		t.Fatalf("loading the admin kubeconfig: %v", err)
	}
	admin := kubernetes.NewForConfigOrDie(rc)
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "smoke", metav1.GetOptions{}); err != nil {
		t.Fatalf("reading through the kubeconfig: %v", err)
	}

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}
	if _, err := c.Client().CoreV1().ServiceAccounts("smoke").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a service account: %v", err)
	}
	rc, err = clientcmd.BuildConfigFromFlags("", c.KubeconfigFor(t, c.ServiceAccountToken(t, "smoke", "nobody")))
	if err != nil {
		t.Fatalf("loading the service account's kubeconfig: %v", err)
	}
	// Authenticated, and denied by RBAC: no role grants it anything.
	_, err = kubernetes.NewForConfigOrDie(rc).CoreV1().Namespaces().Get(ctx, "smoke", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("the service account read a namespace: err = %v, want forbidden", err)
	}

	began := time.Now()
	c.Restart(t)
	t.Logf("kube-apiserver restarted in %s", time.Since(began).Round(time.Millisecond))
	if _, err := c.Client().CoreV1().Namespaces().Get(ctx, "smoke", metav1.GetOptions{}); err != nil {
		t.Fatalf("reading after a restart: %v", err)
	}
}
