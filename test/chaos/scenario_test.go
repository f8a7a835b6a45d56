package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// scenarioPolicy has one step of each kind: http (against the test's server), wait, job (kwok runs
// its pod for a second) and resource (a receipt ConfigMap created as the ServiceAccount receipts).
const scenarioPolicy = `
apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: cp}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  selector: {matchLabels: {app: cp}}
  trigger: %s
  steps:
  - name: notify
    http: {method: POST, url: "%s/%s/cp/notify/${object.metadata.name}"}
  - name: settle
    wait: {duration: 1s}
  - name: dump
    job:
      template:
        spec:
          backoffLimit: 0
          template:
            metadata: {annotations: {teardown.dev/kwok-duration: 1s}}
            spec:
              containers: [{name: main, image: registry.example.com/dump:1, command: [dump, "${object.metadata.name}"]}]
  - name: receipt
    resource:
      serviceAccountName: receipts
      action: Create
      manifest:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "${object.metadata.name}-receipt"}
        data: {from: "${object.metadata.name}"}
`

// foreignFinalizer is another controller's: the operator must leave it where it is.
const foreignFinalizer = "example.com/keep"

// scenario is the teardown the fault-class specs inject their faults into: in a namespace of its
// own, the policy cp (scenarioPolicy) and objects that carry another controller's finalizer too.
type scenario struct {
	ns, trigger string
	objects     []string
	srv         *flakyServer
	watch       *observer
}

// newScenario creates namespace ns with the receipts ServiceAccount and its rights, the policy
// and the objects, and waits until every object is armed.
func newScenario(ctx context.Context, srv *flakyServer, ns, trigger string, objects ...string) *scenario {
	GinkgoHelper()
	s := &scenario{ns: ns, trigger: trigger, objects: objects, srv: srv, watch: observe(ctx, ns)}
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "receipts"}})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "receipts"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}}}})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "receipts"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "receipts"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "receipts"}}})).To(Succeed())
	policy := &v1alpha1.TeardownPolicy{}
	Expect(yaml.UnmarshalStrict([]byte(fmt.Sprintf(scenarioPolicy, trigger, srv.srv.URL, ns)), policy)).To(Succeed())
	policy.Namespace = ns
	Expect(k8s.Create(ctx, policy)).To(Succeed())
	for _, name := range objects {
		Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{"app": "cp"}, Finalizers: []string{foreignFinalizer}}})).To(Succeed())
	}
	for _, name := range objects {
		Eventually(probeFinalizers(ctx, s.object(name)), time.Minute, 100*time.Millisecond).
			Should(ContainElement("teardownpolicy.teardown.dev/cp"), "%s was never armed", name)
	}
	return s
}

func (s *scenario) object(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}
}

// teardown asks for every object's teardown (its deletion, or the annotation of a delete request)
// and waits until each is deleted and released: only the other controller's finalizer is left.
func (s *scenario) teardown(ctx context.Context, within time.Duration) {
	GinkgoHelper()
	for _, name := range s.objects {
		if s.trigger == "DeleteRequest" {
			body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationDeleteRequested: deleteRequest}}})
			Expect(err).NotTo(HaveOccurred())
			Expect(k8s.Patch(ctx, s.object(name), client.RawPatch("application/merge-patch+json", body))).To(Succeed())
		} else {
			Expect(k8s.Delete(ctx, s.object(name))).To(Succeed())
		}
	}
	for _, name := range s.objects {
		obj := s.object(name)
		Eventually(probeFinalizers(ctx, obj), within, 100*time.Millisecond).Should(Equal([]string{foreignFinalizer}), "%s was not released", name)
		Expect(obj.DeletionTimestamp).NotTo(BeNil(), "%s released but not deleted", name)
	}
}

// finish removes the other controller's finalizer, as it would once done, and every object must
// go; then deletes the policy, which the operator must release.
func (s *scenario) finish(ctx context.Context) {
	GinkgoHelper()
	releaseObjects(ctx, s.ns, s.objects...)
	for _, name := range s.objects {
		obj := s.object(name)
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)) }, time.Minute, 100*time.Millisecond).
			Should(BeTrue(), "%s did not go", name)
	}
	policy := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "cp"}}
	Expect(k8s.Delete(ctx, policy)).To(Succeed())
	Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(policy), policy)) }, time.Minute, 100*time.Millisecond).
		Should(BeTrue(), "the policy was not released")
}

// problems checks what the world saw of the teardowns: one run an object, born once, Succeeded
// with every step; each object's http step called with one Idempotency-Key, at most maxCalls
// times, and never by a process restarted (at restartedAt, if not zero) once its success was
// stored before; one Job and one receipt an object.
func (s *scenario) problems(ctx context.Context, restartedAt time.Time, maxCalls int) []string {
	GinkgoHelper()
	var runs v1alpha1.TeardownRunList
	Expect(k8s.List(ctx, &runs, client.MatchingLabels{v1alpha1.LabelTargetNamespace: s.ns})).To(Succeed())
	byTarget := map[string][]*v1alpha1.TeardownRun{}
	for i := range runs.Items {
		byTarget[runs.Items[i].Spec.Target.Name] = append(byTarget[runs.Items[i].Spec.Target.Name], &runs.Items[i])
	}
	var out []string
	writes := runWrites()
	for _, name := range s.objects {
		if len(byTarget[name]) != 1 {
			out = append(out, fmt.Sprintf("%s: %d runs", name, len(byTarget[name])))
			continue
		}
		out = append(out, s.runProblems(ctx, byTarget[name][0], writes, restartedAt, maxCalls)...)
	}
	out = append(out, s.watch.createdTwice()...)
	return append(out, repeatedBirths(s.ns)...)
}

func (s *scenario) runProblems(ctx context.Context, run *v1alpha1.TeardownRun, writes map[string][]auditEvent, restartedAt time.Time, maxCalls int) []string {
	name := run.Spec.Target.Name
	if run.Status.Phase != v1alpha1.RunSucceeded {
		return []string{fmt.Sprintf("%s: released with its run %s: %s", name, run.Status.Phase, run.Status.Message)}
	}
	var out []string
	for _, ss := range run.Status.Steps {
		if ss.Phase != v1alpha1.StepSucceeded {
			out = append(out, fmt.Sprintf("%s: step %s %s", name, ss.Name, ss.Phase))
		}
	}
	requests := s.srv.snapshot()[fmt.Sprintf("/%s/cp/notify/%s", s.ns, name)]
	keys := map[string]bool{}
	for _, r := range requests {
		keys[r.key] = true
	}
	if len(requests) == 0 || len(requests) > maxCalls || len(keys) != 1 {
		out = append(out, fmt.Sprintf("%s: notify called %d times with %d Idempotency-Keys (want 1 to %d times, one key)", name, len(requests), len(keys), maxCalls))
	}
	if recorded, ok := recordedAt(writes[run.Namespace+"/"+run.Name], "notify"); ok && !restartedAt.IsZero() && recorded.Before(restartedAt) {
		for _, r := range requests {
			if r.at.After(restartedAt) {
				out = append(out, fmt.Sprintf("%s: notify called again by the restarted operator at %s; its success was stored at %s",
					name, r.at.Format(time.RFC3339Nano), recorded.Format(time.RFC3339Nano)))
			}
		}
	}
	receipt := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name + "-receipt"}, receipt); err != nil || receipt.Data["from"] != name {
		out = append(out, fmt.Sprintf("%s: receipt %v %v", name, receipt.Data, err))
	}
	return out
}

// runID tells this run's namespaces from those of an earlier run on a cluster kept with
// CHAOS_KEEP_CLUSTER.
var runID = sync.OnceValue(func() string { return strconv.FormatInt(time.Now().Unix()%(36*36*36), 36) })

// seedFromEnv reads a seed from the environment variable name, or makes a new one (the specs
// print it, so that a failure can be run again).
func seedFromEnv(name string) uint64 {
	if seed, err := strconv.ParseUint(os.Getenv(name), 10, 64); err == nil {
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// steadyServer starts a loopback server that answers every http step with 200 (it stops with the
// spec), and returns the flags of an operator (one replica, no leader election) allowed to call it.
func steadyServer() (*flakyServer, []string) {
	GinkgoHelper()
	srv := newFlakyServer()
	srv.steady = true
	DeferCleanup(srv.srv.Close)
	flags := []string{"--leader-elect=false", "--http-allowed-destinations", strings.TrimPrefix(srv.srv.URL, "http://")}
	return srv, flags
}
