package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kvxds/kvxds/policy"
	"github.com/kvxds/kvxds/test/kube"
)

// manifestsDir holds the deployment manifests, relative to the package.
var manifestsDir = filepath.Join("..", "..", "examples", "kubernetes")

// manifestNamespace is the namespace the manifests are written for: the
// policy's kubernetes block and Envoy's bootstrap name it.
const manifestNamespace = "llm"

// manifests are the objects of examples/kubernetes, decoded strictly into
// their types, in file order.
type manifests struct {
	objects []manifestObject
}

type manifestObject struct {
	file string
	obj  any // a pointer to a typed API object
}

// loadManifests decodes every document of each file strictly (an unknown,
// misspelt or duplicate field fails), as the typed objects a client would
// send.
func loadManifests(t *testing.T, files ...string) *manifests {
	t.Helper()
	m := &manifests{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(manifestsDir, f))
		if err != nil {
			t.Fatal(err)
		}
		// Splitting on "---" by hand would take the last line break of
		// each document, and with it a block scalar's final newline.
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := docs.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 ServiceAccount":
				obj = new(corev1.ServiceAccount)
			case "v1 ConfigMap":
				obj = new(corev1.ConfigMap)
			case "v1 Service":
				obj = new(corev1.Service)
			case "rbac.authorization.k8s.io/v1 Role":
				obj = new(rbacv1.Role)
			case "rbac.authorization.k8s.io/v1 RoleBinding":
				obj = new(rbacv1.RoleBinding)
			case "apps/v1 Deployment":
				obj = new(appsv1.Deployment)
			default:
				t.Fatalf("%s, document %d: unexpected kind %q %q", f, i+1, tm.APIVersion, tm.Kind)
			}
			// The API server's own strict decoder: unlike encoding/json, it
			// matches field names case-sensitively, so "readonly" for
			// "readOnly" fails here rather than being dropped.
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			strict, err := kjson.UnmarshalStrict(js, obj)
			if err = errors.Join(append(strict, err)...); err != nil {
				t.Fatalf("%s, document %d (%s): %v", f, i+1, tm.Kind, err)
			}
			if ns := obj.(metav1.Object).GetNamespace(); ns != "" {
				t.Errorf("%s: %s %s names namespace %q: the manifests are applied with -n", f, tm.Kind, obj.(metav1.Object).GetName(), ns)
			}
			m.objects = append(m.objects, manifestObject{f, obj})
		}
	}
	return m
}

// find is the object of type T called name; it fails the test if there
// is none.
func find[T any](t *testing.T, m *manifests, name string) *T {
	t.Helper()
	for _, o := range m.objects {
		if v, ok := o.obj.(*T); ok && any(v).(metav1.Object).GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("the manifests hold no %T called %q", zero, name)
	return nil
}

// create creates every object in namespace ns of the API server, which
// validates them as it would for kubectl apply.
func (m *manifests) create(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	for _, o := range m.objects {
		var err error
		switch v := o.obj.(type) {
		case *corev1.ServiceAccount:
			_, err = client.CoreV1().ServiceAccounts(ns).Create(ctx, v, opts)
		case *corev1.ConfigMap:
			_, err = client.CoreV1().ConfigMaps(ns).Create(ctx, v, opts)
		case *corev1.Service:
			_, err = client.CoreV1().Services(ns).Create(ctx, v, opts)
		case *rbacv1.Role:
			_, err = client.RbacV1().Roles(ns).Create(ctx, v, opts)
		case *rbacv1.RoleBinding:
			_, err = client.RbacV1().RoleBindings(ns).Create(ctx, v, opts)
		case *appsv1.Deployment:
			_, err = client.AppsV1().Deployments(ns).Create(ctx, v, opts)
		}
		if err != nil {
			t.Fatalf("%s: creating %T %s: %v", o.file, o.obj, o.obj.(metav1.Object).GetName(), err)
		}
	}
}

// container is the Deployment's container called name.
func container(t *testing.T, d *appsv1.Deployment, name string) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %q", d.Name, name)
	return corev1.Container{}
}

// containerPort is the number of c's port called name.
func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

// servicePort is the Service's port whose target is the container port
// called target.
func servicePort(t *testing.T, s *corev1.Service, target string) int32 {
	t.Helper()
	for _, p := range s.Spec.Ports {
		if p.TargetPort == intstr.FromString(target) {
			return p.Port
		}
	}
	t.Fatalf("Service %s exposes no port targeting %q", s.Name, target)
	return 0
}

// flagValue is the value of --name in args (the form kvxds's flag
// package reads, "--name value" or "--name=value").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		for _, prefix := range []string{"-", "--"} {
			if a == prefix+name && i+1 < len(args) {
				return args[i+1], true
			}
			if v, ok := strings.CutPrefix(a, prefix+name+"="); ok {
				return v, true
			}
		}
	}
	return "", false
}

// mountedVolume is the volume mounted over the directory of file in
// container c.
func mountedVolume(t *testing.T, d *appsv1.Deployment, c corev1.Container, file string) corev1.Volume {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if path.Dir(file) != path.Clean(vm.MountPath) {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name {
				return v
			}
		}
		t.Fatalf("volume mount %s names no volume", vm.Name)
	}
	t.Fatalf("%s is on no volume of container %s", file, c.Name)
	return corev1.Volume{}
}

// mountedFile is the ConfigMap file at path in the pod: the volume
// mounted over it must be a ConfigMap of the manifests, or project one,
// holding the file's name as a key. It returns the ConfigMap and the key.
func mountedFile(t *testing.T, m *manifests, d *appsv1.Deployment, c corev1.Container, file string) (*corev1.ConfigMap, string) {
	t.Helper()
	v := mountedVolume(t, d, c, file)
	var names []string
	if v.ConfigMap != nil {
		names = append(names, v.ConfigMap.Name)
	}
	if v.Projected != nil {
		for _, s := range v.Projected.Sources {
			if s.ConfigMap != nil && len(s.ConfigMap.Items) == 0 {
				names = append(names, s.ConfigMap.Name)
			}
		}
	}
	key := path.Base(file)
	for _, name := range names {
		if cm := find[corev1.ConfigMap](t, m, name); cm.Data[key] != "" {
			return cm, key
		}
	}
	t.Fatalf("%s: no ConfigMap on volume %s has key %q", file, v.Name, key)
	return nil, ""
}

// mountedSecret is the Secret name and key that volume projects as file.
func mountedSecret(t *testing.T, d *appsv1.Deployment, c corev1.Container, file string) (name, key string) {
	t.Helper()
	v := mountedVolume(t, d, c, file)
	if v.Projected != nil {
		for _, s := range v.Projected.Sources {
			if s.Secret == nil {
				continue
			}
			for _, it := range s.Secret.Items {
				if it.Path == path.Base(file) {
					return s.Secret.Name, it.Key
				}
			}
		}
	}
	t.Fatalf("%s: volume %s projects no Secret there", file, v.Name)
	return "", ""
}

// authProxy is a loopback proxy to the admin endpoints at addr that adds
// the bearer token, for the helpers that read them.
func authProxy(t *testing.T, addr, token string) string {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: addr}
	rp := httputil.NewSingleHostReverseProxy(target)
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		r.Header.Set("Authorization", "Bearer "+token)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rp}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// outOfCluster is this process's environment for a kvxds that finds its
// API server through kubeconfig. A test run inside a pod must not reach
// that pod's cluster through the in-cluster configuration, which kvxds
// tries before $KUBECONFIG.
func outOfCluster(kubeconfig string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBERNETES_SERVICE_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	return append(env, "KUBECONFIG="+kubeconfig)
}

// TestKubernetesManifests checks examples/kubernetes against a real API
// server and the real binary, so the manifests cannot drift from kvxds:
// every document decodes strictly and is accepted by the API server; the
// ConfigMap's policy parses without a diagnostic; Envoy's bootstrap is
// exactly what the command in its annotation prints; and kvxds, started
// with the container's arguments on the ConfigMap's files, as the
// ServiceAccount of rbac.yaml (its token from the TokenRequest API), serves
// the pods of the Service, so a permission missing from the Role fails
// here.
func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t, "rbac.yaml", "kvxds.yaml", "envoy.yaml")
	account := find[corev1.ServiceAccount](t, m, "kvxds")
	kvxds := find[appsv1.Deployment](t, m, "kvxds")
	kvxdsSvc := find[corev1.Service](t, m, "kvxds")
	envoy := find[appsv1.Deployment](t, m, "envoy")
	envoyBootstrap := find[corev1.ConfigMap](t, m, "envoy")
	c := container(t, kvxds, "kvxds")
	if got := kvxds.Spec.Template.Spec.ServiceAccountName; got != account.Name {
		t.Errorf("kvxds runs as ServiceAccount %q, rbac.yaml grants %q", got, account.Name)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("kvxds requests no CPU or memory: %v", c.Resources.Requests)
	}

	// The policy is the file the container's --policy names, on the
	// ConfigMap volume.
	policyPath, ok := flagValue(c.Args, "policy")
	if !ok {
		t.Fatalf("kvxds's args %q set no --policy", c.Args)
	}
	policyCM, policyKey := mountedFile(t, m, kvxds, c, policyPath)
	text := policyCM.Data[policyKey]
	p, diags := policy.Parse([]byte(text), policyPath)
	if len(diags) > 0 {
		t.Fatalf("the ConfigMap's policy:\n%s", policy.Format(diags))
	}
	if len(p.Pools) != 1 || len(p.Pools[0].Kubernetes) != 1 {
		t.Fatalf("the policy has %d pools, want one discovered from Kubernetes", len(p.Pools))
	}
	pool := p.Pools[0]
	discovered := pool.Kubernetes[0]
	if discovered.Namespace != manifestNamespace {
		t.Errorf("the policy discovers namespace %q, the manifests are for %q", discovered.Namespace, manifestNamespace)
	}
	if discovered.Kubeconfig != "" {
		t.Errorf("the policy sets kubeconfig %q; in a pod kvxds uses its ServiceAccount", discovered.Kubeconfig)
	}
	// The admin port listens on the pod network: it asks for a token,
	// which a Secret projects where the policy reads it.
	if p.Admin.TokenFile == "" {
		t.Fatalf("the policy's admin block (%s) sets no token_file", p.AdminAddress)
	}
	secretName, secretKey := mountedSecret(t, kvxds, c, p.Admin.TokenFile)

	// The ports the policy listens on are the container's, which the
	// Service exposes, and the probes ask the admin port.
	for _, l := range []struct{ addr, port string }{{p.XDSAddress, "grpc-xds"}, {p.AdminAddress, "http-admin"}} {
		_, port, err := net.SplitHostPort(l.addr)
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(int(containerPort(t, c, l.port))); port != want {
			t.Errorf("the policy listens on %s, the container's port %s is %s", l.addr, l.port, want)
		}
		servicePort(t, kvxdsSvc, l.port)
	}
	// Readiness waits for a configuration to be served; liveness only
	// for the process, so a slow API server never gets kvxds restarted.
	probes := map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe}
	for path, pr := range probes {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != path || pr.HTTPGet.Port != intstr.FromString("http-admin") {
			t.Fatalf("kvxds's probe %+v is not an HTTP GET of %s on the admin port", pr, path)
		}
	}

	// Envoy's bootstrap is what kvxds prints for the flags in the
	// annotation, and those point at the Service's xDS port.
	command := strings.Fields(envoyBootstrap.Annotations["kvxds-bootstrap-command"])
	if len(command) < 2 || command[0] != "kvxds" || command[1] != "bootstrap" {
		t.Fatalf("ConfigMap envoy: annotation kvxds-bootstrap-command = %q, want a kvxds bootstrap command", command)
	}
	wantXDS := fmt.Sprintf("kvxds.%s.svc:%d", manifestNamespace, servicePort(t, kvxdsSvc, "grpc-xds"))
	if got, _ := flagValue(command, "xds"); got != wantXDS {
		t.Errorf("Envoy's bootstrap reaches kvxds at %q, the Service is %s", got, wantXDS)
	}
	out, err := exec.Command(kvxdsBinary, command[1:]...).Output()
	if err != nil {
		t.Fatalf("%q: %v", command, err)
	}
	envoyC := container(t, envoy, "envoy")
	bootPath, ok := flagValue(envoyC.Args, "c")
	if !ok {
		t.Fatalf("Envoy's args %q name no bootstrap (-c)", envoyC.Args)
	}
	cm, key := mountedFile(t, m, envoy, envoyC, bootPath)
	if cm != envoyBootstrap {
		t.Fatalf("Envoy reads its bootstrap from ConfigMap %s, not envoy", cm.Name)
	}
	if got := cm.Data[key]; got != string(out) {
		t.Errorf("ConfigMap envoy's %s differs from what %q prints: paste its output\ngot:\n%s\nwant:\n%s", key, command, got, out)
	}
	if got := containerPort(t, envoyC, "http"); int(got) != int(pool.Port) {
		t.Errorf("Envoy's container port http is %d, the pool's listener %d", got, pool.Port)
	}

	// The API server takes every object as written.
	cluster := kube.Start(t)
	client := cluster.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: manifestNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.create(t, client, manifestNamespace)
	// The Secret the README has you create.
	token := "t0ken-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := client.CoreV1().Secrets(manifestNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName},
		StringData: map[string]string{secretKey: token},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The Service the policy discovers, its pods serving in a network
	// namespace as vLLM would: API and /metrics on one port.
	if _, err := client.CoreV1().Services(manifestNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: discovered.Service},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": discovered.Service},
			Ports:    []corev1.ServicePort{{Name: discovered.Port, Port: 8000}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pn := newPodNet(t, 40, 3)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: discovered.Service + "-x1", Labels: map[string]string{discoveryv1.LabelServiceName: discovered.Service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(discovered.Port), Port: ptr(int32(8000))}},
	}
	var pods []string
	for i := range 3 {
		name := fmt.Sprintf("%s-%d", discovered.Service, i)
		serveBackend(t, pn.listen(t, pn.addr(i)+":8000"), name)
		slice.Endpoints = append(slice.Endpoints, pod(name, pn.addr(i), true, true, false))
		pods = append(pods, name)
	}
	if _, err := client.DiscoveryV1().EndpointSlices(manifestNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// kvxds with the container's arguments, reading the ConfigMap's files
	// where the volume puts them, outside a cluster: its kubeconfig holds
	// the ServiceAccount's token, and only the listen addresses move to
	// free loopback ports (later flags win).
	dir := t.TempDir()
	for k, v := range policyCM.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, path.Base(p.Admin.TokenFile)), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		if a == policyPath {
			args[i] = filepath.Join(dir, policyKey)
		}
	}
	xdsAddr, adminAddr := freeAddr(t), freeAddr(t)
	args = append(args, "--xds", xdsAddr, "--admin", adminAddr)
	k := startBinaryWith(t, args, outOfCluster(cluster.KubeconfigFor(t, cluster.ServiceAccountToken(t, manifestNamespace, account.Name))))
	defer k.stop()
	// A flag the binary does not take ends it at once (its usage is in
	// the log), and the probes never answer.
	for path := range probes {
		eventually(t, "kvxds to answer its probe "+path, func() bool {
			resp, err := http.Get("http://" + adminAddr + path)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	// Everything else asks for the token.
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %s, want 401", resp.Status)
	}
	admin := authProxy(t, adminAddr, token)

	// It serves the Service's pods: the fleet lists them, and a gRPC
	// client of the pool reaches each one.
	eventually(t, "kvxds to serve the Service's pods", func() bool {
		f := servedFleet(t, admin)
		if len(f.Pools) != 1 {
			return false
		}
		var got []string
		for _, e := range f.Pools[0].Endpoints {
			got = append(got, e.HashKey)
		}
		slices.Sort(got)
		return slices.Equal(got, pods)
	})
	cl := &goClient{cl: newClientOf(t, xdsAddr, pool.Name)}
	ss := sessions(300)
	eventually(t, "sessions on every pod", func() bool {
		return len(shares(route(t, cl, ss))) == len(pods)
	})
	if n := metric(t, admin, "kvxds_discovery_errors_total"); n != 0 {
		t.Errorf("%v discovery errors", n)
	}

	// The ha block works with the Role's permissions: the instance takes
	// the Lease, and publishes its decisions in the ConfigMap.
	eventually(t, "kvxds to lead", func() bool {
		st, ok := haStatus(t, admin)
		return ok && st.Leading
	})
	eventually(t, "decisions published", func() bool {
		return metric(t, admin, "kvxds_ha_decisions_published_total") > 0
	})
	if n := metric(t, admin, "kvxds_ha_publish_errors_total"); n != 0 {
		t.Errorf("%v publish errors", n)
	}
}
