package kube

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig writes a kubeconfig file for the admin and returns its path;
// it is removed when the test ends.
func (c *Cluster) Kubeconfig(t testing.TB) string {
	t.Helper()
	return c.KubeconfigFor(t, c.token)
}

// KubeconfigFor writes a kubeconfig file that authenticates with token
// (a ServiceAccountToken, say) and returns its path; it is removed when
// the test ends.
func (c *Cluster) KubeconfigFor(t testing.TB, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kvxds-test"] = &clientcmdapi.Cluster{Server: c.host, CertificateAuthorityData: c.pki.caPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["kvxds-test"] = &clientcmdapi.Context{Cluster: "kvxds-test", AuthInfo: "user"}
	cfg.CurrentContext = "kvxds-test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("kube: writing a kubeconfig: %v", err)
	}
	return path
}

// ServiceAccountToken gets an hour's token for a ServiceAccount through
// the TokenRequest API, as a pod's projected token would be.
func (c *Cluster) ServiceAccountToken(t testing.TB, namespace, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hour := int64(3600)
	tr, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kube: requesting a token for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}
