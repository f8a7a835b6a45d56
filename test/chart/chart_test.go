package chart_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

const (
	chartDir  = "../../charts/teardown-operator"
	release   = "teardown-operator"
	namespace = "teardown-system"
)

// helm runs the helm binary (HELM, or bin/helm from make tools) and returns its output.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = "../../bin/helm"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no helm at %s: run make tools (%v)", bin, err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	if err != nil {
		return out.String() + errOut.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// rendered is the chart's output for some values, decoded: typed objects for Kubernetes' own
// kinds (decoded strictly, so a misspelled field fails), unstructured for the others.
type rendered struct {
	objects []runtime.Object
}

var decoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

func render(t *testing.T, args ...string) *rendered {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// renderValues renders the chart with values given as YAML, as a user's values file. The file is
// not in t.TempDir(): helm splits -f at commas, which a subtest's name may hold.
func renderValues(t *testing.T, values string) *rendered {
	t.Helper()
	f, err := os.CreateTemp("", "values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(f.Name()) })
	if _, err := f.WriteString(values); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return render(t, "-f", f.Name())
}

// decode decodes a stream of YAML documents.
func decode(t *testing.T, out string) *rendered {
	t.Helper()
	r := &rendered{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading rendered YAML: %v", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(mustJSON(t, doc)); err != nil {
				t.Fatalf("decoding %s: %v", doc, err)
			}
			obj = u
		} else if err != nil {
			t.Fatalf("decoding a rendered object strictly: %v\n%s", err, doc)
		}
		r.objects = append(r.objects, obj)
	}
	if len(r.objects) == 0 {
		t.Fatal("helm template rendered nothing")
	}
	return r
}

// find returns the rendered object of this kind and name, or nil.
func (r *rendered) find(kind, name string) runtime.Object {
	for _, o := range r.objects {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			continue
		}
		obj := unstructured.Unstructured{Object: u}
		if kindOf(o) == kind && obj.GetName() == name {
			return o
		}
	}
	return nil
}

// kinds lists the rendered objects as Kind/name.
func (r *rendered) kinds() []string {
	var out []string
	for _, o := range r.objects {
		u, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		out = append(out, kindOf(o)+"/"+(&unstructured.Unstructured{Object: u}).GetName())
	}
	slices.Sort(out)
	return out
}

func kindOf(o runtime.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	gvks, _, _ := clientgoscheme.Scheme.ObjectKinds(o)
	if len(gvks) > 0 {
		return gvks[0].Kind
	}
	return fmt.Sprintf("%T", o)
}

func mustGet[T runtime.Object](t *testing.T, r *rendered, kind, name string) T {
	t.Helper()
	o := r.find(kind, name)
	if o == nil {
		t.Fatalf("no %s %s rendered; have %v", kind, name, r.kinds())
	}
	typed, ok := o.(T)
	if !ok {
		t.Fatalf("%s %s is a %T", kind, name, o)
	}
	return typed
}

func TestLint(t *testing.T) {
	for _, values := range [][]string{nil, {"-f", "testdata/full-values.yaml"}} {
		if out, err := helm(t, append([]string{"lint", "--strict", chartDir}, values...)...); err != nil {
			t.Errorf("helm lint %v: %v\n%s", values, err, out)
		}
	}
}

func TestDefaults(t *testing.T) {
	r := render(t)
	d := mustGet[*appsv1.Deployment](t, r, "Deployment", release)
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d, want 2", *d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/teardown-dev/teardown-operator:0.1.0" {
		t.Errorf("image = %s, want the chart's appVersion", c.Image)
	}
	for _, arg := range []string{"--leader-elect=true", "--leader-election-namespace=" + namespace, "--run-namespace=" + namespace, "--metrics-bind-address=:8443"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	restricted(t, d.Spec.Template.Spec.SecurityContext, c.SecurityContext)
	if d.Spec.Template.Spec.ServiceAccountName != release {
		t.Errorf("serviceAccountName = %s", d.Spec.Template.Spec.ServiceAccountName)
	}
	for _, name := range []string{"teardownpolicies.teardown.dev", "clusterteardownpolicies.teardown.dev", "teardownruns.teardown.dev"} {
		crd := mustGet[*apiextensionsv1.CustomResourceDefinition](t, r, "CustomResourceDefinition", name)
		if crd.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s is not kept on uninstall: %v", name, crd.Annotations)
		}
	}
	mustGet[*corev1.ServiceAccount](t, r, "ServiceAccount", release)
	mustGet[*rbacv1.ClusterRole](t, r, "ClusterRole", release)
	mustGet[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", release)
	mustGet[*corev1.Service](t, r, "Service", release+"-metrics")
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule", "ConfigMap"} {
		for _, k := range r.kinds() {
			if strings.HasPrefix(k, kind+"/") {
				t.Errorf("%s rendered by default", k)
			}
		}
	}
	hook := mustGet[*batchv1.Job](t, r, "Job", release+"-uninstall-drain")
	if hook.Annotations["helm.sh/hook"] != "pre-delete" {
		t.Errorf("drain Job hook = %q, want pre-delete", hook.Annotations["helm.sh/hook"])
	}
	want := []string{"/kubectl-teardown", "drain", "--all", "--yes", "--stop-operator=" + namespace + "/" + release}
	if got := hook.Spec.Template.Spec.Containers[0].Command; !slices.Equal(got, want) {
		t.Errorf("drain Job command = %v, want %v", got, want)
	}
}

// restricted checks the restricted Pod Security Standard's requirements.
func restricted(t *testing.T, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	t.Helper()
	if pod == nil || c == nil {
		t.Fatal("no security context")
	}
	if pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v is not restricted", pod)
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation || c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v is not restricted", c)
	}
}

func TestFullValues(t *testing.T) {
	r := render(t, "-f", "testdata/full-values.yaml")
	d := mustGet[*appsv1.Deployment](t, r, "Deployment", "teardown")
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if c.Image != "registry.example.com/teardown-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
		t.Errorf("image = %s, want the digest", c.Image)
	}
	for _, arg := range []string{"--run-namespace=teardown-runs", "--target-workers=32", "--run-workers=8", "--run-retention=720h",
		"--stuck-after=30m", "--admission-arming=false", "--max-arming-policies=50", "--max-arming-policies-per-namespace=5", "--http-allowed-destinations=10.20.0.0/16,127.0.0.1:8443", "--zap-log-level=debug",
		"--http-inline-wait=50ms", "--metrics-bind-address=:9090", "--metrics-cert-dir=/etc/teardown-operator/metrics-certs"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	if *d.Spec.Replicas != 3 || spec.PriorityClassName != "system-cluster-critical" || spec.ServiceAccountName != "teardown-sa" ||
		spec.NodeSelector["kubernetes.io/os"] != "linux" || len(spec.Tolerations) != 1 || spec.Affinity == nil ||
		len(spec.TopologySpreadConstraints) != 1 || len(spec.ImagePullSecrets) != 1 || d.Labels["team"] != "platform" {
		t.Errorf("pod spec does not carry the values: %+v", spec)
	}
	crd := mustGet[*apiextensionsv1.CustomResourceDefinition](t, r, "CustomResourceDefinition", "teardownruns.teardown.dev")
	if _, kept := crd.Annotations["helm.sh/resource-policy"]; kept {
		t.Error("crds.keep=false still keeps the CRDs")
	}
	for _, want := range []string{"ServiceMonitor/teardown", "PrometheusRule/teardown", "PodDisruptionBudget/teardown", "Service/teardown-metrics"} {
		if !slices.Contains(r.kinds(), want) {
			t.Errorf("%s not rendered; have %v", want, r.kinds())
		}
	}
	dashboards := 0
	for _, k := range r.kinds() {
		if strings.HasPrefix(k, "ConfigMap/") {
			dashboards++
		}
	}
	if dashboards != 1 {
		t.Errorf("want the Grafana dashboard ConfigMap; have %v", r.kinds())
	}
	b := mustGet[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", "teardown")
	if b.Subjects[0].Name != "teardown-sa" {
		t.Errorf("ClusterRoleBinding binds %s, want teardown-sa", b.Subjects[0].Name)
	}
}

// TestResourceStepsOptIn: impersonation is granted only where resourceSteps says, never by the
// operator's own ClusterRole.
func TestResourceStepsOptIn(t *testing.T) {
	impersonates := func(rules []rbacv1.PolicyRule) bool {
		for _, r := range rules {
			if slices.Contains(r.Verbs, "impersonate") || slices.Contains(r.Verbs, "*") {
				return true
			}
		}
		return false
	}
	r := render(t)
	if impersonates(mustGet[*rbacv1.ClusterRole](t, r, "ClusterRole", release).Rules) {
		t.Error("the operator's ClusterRole grants impersonate")
	}
	if !impersonates(mustGet[*rbacv1.ClusterRole](t, r, "ClusterRole", release+"-resource-steps").Rules) {
		t.Error("the resource steps' ClusterRole does not grant impersonate")
	}
	for _, k := range r.kinds() {
		if strings.HasSuffix(k, "/"+release+"-resource-steps") && strings.Contains(k, "Binding") {
			t.Errorf("bound by default: %s", k)
		}
	}
	r = render(t, "--set", "resourceSteps.namespaces={shop,db}")
	for _, ns := range []string{"shop", "db"} {
		var b *rbacv1.RoleBinding
		for _, o := range r.objects {
			if rb, ok := o.(*rbacv1.RoleBinding); ok && rb.Namespace == ns && rb.Name == release+"-resource-steps" {
				b = rb
			}
		}
		if b == nil || b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != release+"-resource-steps" ||
			b.Subjects[0].Name != release || b.Subjects[0].Namespace != namespace {
			t.Errorf("namespace %s: RoleBinding %+v, want %s-resource-steps bound to the operator's ServiceAccount", ns, b, release)
		}
	}
	if slices.Contains(r.kinds(), "ClusterRoleBinding/"+release+"-resource-steps") {
		t.Error("namespaces listed, yet bound in every namespace")
	}
	r = render(t, "--set", "resourceSteps.allNamespaces=true")
	mustGet[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", release+"-resource-steps")
}

// TestTargetRules: rbac.targetRules replace the rule on every kind, and only it.
func TestTargetRules(t *testing.T) {
	wildcard := func(rules []rbacv1.PolicyRule) bool {
		for _, r := range rules {
			if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") {
				return true
			}
		}
		return false
	}
	def := mustGet[*rbacv1.ClusterRole](t, render(t), "ClusterRole", release).Rules
	if !wildcard(def) {
		t.Fatal("the default ClusterRole has no rule on every kind")
	}
	narrowed := mustGet[*rbacv1.ClusterRole](t, render(t, "--set-json",
		`rbac.targetRules=[{"apiGroups":["postgresql.cnpg.io"],"resources":["clusters"],"verbs":["get","list","watch","patch","update"]}]`), "ClusterRole", release).Rules
	if wildcard(narrowed) {
		t.Errorf("narrowed, the ClusterRole still has a rule on every kind: %v", narrowed)
	}
	if len(narrowed) != len(def) || !slices.ContainsFunc(narrowed, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.APIGroups, []string{"postgresql.cnpg.io"}) && slices.Equal(r.Resources, []string{"clusters"})
	}) {
		t.Errorf("narrowed rules %v: want the default's with the rule on every kind replaced by the one given", narrowed)
	}
}

func TestCRDsDisabled(t *testing.T) {
	for _, k := range render(t, "--set", "crds.enabled=false").kinds() {
		if strings.HasPrefix(k, "CustomResourceDefinition/") {
			t.Errorf("crds.enabled=false rendered %s", k)
		}
	}
}

func TestNoDrainHook(t *testing.T) {
	for _, k := range render(t, "--set", "uninstall.drain=false").kinds() {
		if strings.Contains(k, "uninstall-drain") {
			t.Errorf("uninstall.drain=false rendered %s", k)
		}
	}
}

// TestBadValues: a wrong value is refused, naming the field and the problem.
func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want []string
	}{
		{[]string{"--set", "replicaCount=two"}, []string{"replicaCount", "integer"}},
		{[]string{"--set", "image.pullPolicy=Sometimes"}, []string{"pullPolicy", "Always"}},
		{[]string{"--set", "replicas=2"}, []string{"replicas", "additional"}},
		{[]string{"--set", "operator.runRetention=7days"}, []string{"runRetention", "pattern"}},
		{[]string{"--set", "operator.logLevel=verbose"}, []string{"logLevel"}},
		{[]string{"--set", "image.digest=latest"}, []string{"digest"}},
		{[]string{"--set", "metrics.port=70000"}, []string{"port", "maximum"}},
		{[]string{"--set", "operator.extraArgs[0]=verbose"}, []string{"extraArgs", "pattern"}},
		{[]string{"--set", "podDisruptionBudget.maxUnavailable=0%"}, []string{"maxUnavailable"}},
		{[]string{"--set", "metrics.port=8081"}, []string{"/metrics/port"}},
		{[]string{"--set", "prometheusRule.stuckFor=1.5m"}, []string{"stuckFor", "pattern"}},
		{[]string{"--set", "operator.extraArgs[0]=--leader-elect=false"}, []string{"operator.extraArgs: --leader-elect is set by the chart"}},
		{[]string{"--set", "leaderElection.enabled=false"}, []string{"leaderElection.enabled must be true when replicaCount is more than 1"}},
		{[]string{"--set", "serviceAccount.create=false"}, []string{"serviceAccount.name is required"}},
		{[]string{"--set", "metrics.enabled=false", "--set", "metrics.serviceMonitor.enabled=true"}, []string{"metrics.serviceMonitor.enabled needs metrics.enabled"}},
		{[]string{"--set", "metrics.secure=yes"}, []string{"/metrics/secure", "boolean"}},
		{[]string{"--set", "metrics.certSecret=Metrics_Cert"}, []string{"certSecret", "pattern"}},
		{[]string{"--set", "metrics.secure=false", "--set", "metrics.certSecret=metrics-cert"}, []string{"metrics.certSecret needs metrics.secure"}},
		{[]string{"--set", "metrics.serviceMonitor.tlsConfig=verify"}, []string{"tlsConfig", "object"}},
		{[]string{"--set", "spreadReplicas=maybe"}, []string{"spreadReplicas", "boolean"}},
		{[]string{"--set", "operator.extraArgs[0]=--metrics-secure=false"}, []string{"operator.extraArgs: --metrics-secure is set by the chart"}},
		{[]string{"--set", "resourceSteps.namespaces={kube-system}"}, []string{"resourceSteps.namespaces: kube-system is refused"}},
		{[]string{"--set", "resourceSteps.namespaces={Shop}"}, []string{"resourceSteps/namespaces/0", "pattern"}},
		{[]string{"--set", "resourceSteps.allNamespaces=yes"}, []string{"allNamespaces", "boolean"}},
		{[]string{"--set-json", `rbac.targetRules=[{"apiGroups":[""],"resources":["secrets"],"verbs":["escalate"]}]`}, []string{"/rbac/targetRules/0/verbs/0", "must be one of"}},
	} {
		out, err := helm(t, append([]string{"template", release, chartDir}, tc.set...)...)
		if err == nil {
			t.Errorf("%v: accepted", tc.set)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error does not say %q:\n%s", tc.set, w, out)
			}
		}
	}
}

func TestOneReplicaWithoutLeaderElection(t *testing.T) {
	d := mustGet[*appsv1.Deployment](t, render(t, "--set", "replicaCount=1", "--set", "leaderElection.enabled=false"), "Deployment", release)
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--leader-elect=false") {
		t.Errorf("args %v", d.Spec.Template.Spec.Containers[0].Args)
	}
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func mustJSON(t *testing.T, doc []byte) []byte {
	t.Helper()
	j, err := utilyaml.ToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestLongReleaseName: the longest release name Helm allows still gives names that are DNS labels
// where Kubernetes requires one (Services, Jobs), and the alerts select the Service's real name.
func TestLongReleaseName(t *testing.T) {
	long := strings.Repeat("r", 53)
	out, err := helm(t, "template", long, chartDir, "--set", "prometheusRule.enabled=true", "--set", "metrics.serviceMonitor.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, out)
	var service string
	for _, k := range r.kinds() {
		kind, name, _ := strings.Cut(k, "/")
		if (kind == "Service" || kind == "Job") && len(name) > 63 {
			t.Errorf("%s is %d characters long", k, len(name))
		}
		if kind == "Service" {
			service = name
		}
	}
	if service == "" || !strings.Contains(out, fmt.Sprintf("job=%q", service)) {
		t.Errorf("the alerts do not select the metrics Service %q", service)
	}
}
