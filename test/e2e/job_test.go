package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// Pods of these Jobs run on kwok's simulated node: test/cluster/kwok.yaml completes a Job's pod,
// or fails it when annotated teardown.dev/kwok-fail, after teardown.dev/kwok-duration. The Job,
// TTL-after-finished, garbage-collector, namespace and RBAC-aggregation controllers are the real
// kube-controller-manager's.

// kwokPod are pod annotations for kwok's stages.
func kwokPod(duration string, fail bool) map[string]string {
	a := map[string]string{"teardown.dev/kwok-duration": duration}
	if fail {
		a["teardown.dev/kwok-fail"], a["teardown.dev/kwok-exit-code"] = "true", "3"
	}
	return a
}

var _ = Describe("Job steps on a real control plane", func() {
	ctx := context.Background()

	It("runs a pipeline with a job step between two wait steps to the end, then lets the Job go after its TTL", func() {
		ns := newNamespace(ctx, "jobs")
		spec := framework.Container("registry.example.com/drain:1", kwokPod("2s", false), "drain", "--target=${object.metadata.name}")
		spec["ttlSecondsAfterFinished"] = 3
		p := framework.NamespacedPolicy(ns, "drain", framework.WaitStep("before", time.Second), framework.JobStep("drain", spec), framework.WaitStep("after", time.Second))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cm := framework.ConfigMap(ns, "orders", map[string]string{"app": "drain"})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/drain"))
		Expect(k8s.Delete(ctx, cm)).To(Succeed())

		job := probe.JobOf(ctx, p, cm, "drain", 1)
		Eventually(job, 30*time.Second).ShouldNot(BeNil())
		Expect(job().Spec.TTLSecondsAfterFinished).To(BeNil(), "no TTL while the run needs the Job")
		uid := job().UID
		Eventually(probe.Gone(ctx, cm), 90*time.Second).Should(BeTrue())

		run := probe.RunFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded), run.Status.Message)
		for _, s := range []string{"before", "drain", "after"} {
			Expect(run.Status.Step(s).Phase).To(Equal(v1alpha1.StepSucceeded), s)
		}
		drain := run.Status.Step("drain")
		Expect(drain.Message).To(ContainSubstring("completed (active 0, succeeded 1, failed 0)"))
		Expect(drain.State).To(HaveKeyWithValue("jobUID", string(uid)))
		Expect(drain.CompletionTime.Sub(drain.StartTime.Time)).To(BeNumerically(">=", time.Second), "the step waited for the pod's 2s")

		By("the Job controller deletes the Job after its ttlSecondsAfterFinished, set once the outcome was recorded")
		Eventually(job, time.Minute, time.Second).Should(BeNil())
		Expect(probe.RunFor(ctx, cm)().Status.Step("drain").Message).To(Equal(drain.Message), "the run keeps the outcome after the Job is gone")
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	})

	It("fails the step with the Job's failure, the failed container, and why its log is missing", func() {
		ns := newNamespace(ctx, "jobfail")
		p := framework.NamespacedPolicy(ns, "snapshot", framework.JobStep("dump", framework.Container("postgres:16", kwokPod("1s", true), "pg_dump")))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cm := framework.ConfigMap(ns, "orders", map[string]string{"app": "snapshot"})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/snapshot"))
		Expect(k8s.Delete(ctx, cm)).To(Succeed())

		Eventually(probe.RunPhase(ctx, cm), 90*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss := probe.RunFor(ctx, cm)().Status.Step("dump")
		Expect(ss.Phase).To(Equal(v1alpha1.StepFailed))
		Expect(ss.Message).To(And(
			ContainSubstring("failed: BackoffLimitExceeded"),
			MatchRegexp(`pod \S+ container main exited with code 3 \(Error\): simulated failure`),
			// kwok simulates pods without a kubelet, so the API server cannot fetch a log.
			ContainSubstring("its log cannot be read: ")))
		GinkgoWriter.Println("step message:", ss.Message)
		Expect(probe.Gone(ctx, cm)()).To(BeFalse(), "failurePolicy Retain keeps the object")

		By("breaking glass releases it")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		cm.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest(ctx, "dump checked by hand")}
		Expect(k8s.Update(ctx, cm)).To(Succeed())
		Eventually(probe.Gone(ctx, cm), 30*time.Second).Should(BeTrue())
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	})

	It("finishes every teardown of a namespace being deleted, a cluster policy running its Jobs in another namespace", func() {
		const n = 5
		doomed := newNamespace(ctx, "doomed-jobs")
		jobs := newNamespace(ctx, "teardown-jobs")
		step := framework.JobStep("archive", framework.Container("registry.example.com/archive:1", kwokPod("1s", false), "archive", "${object.metadata.namespace}/${object.metadata.name}"))
		step.Job.Namespace = jobs
		cp := framework.ClusterPolicy("archive-"+doomed, "archive", doomed, step)
		Expect(k8s.Create(ctx, cp)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(ctx, cp) })
		var targets []*corev1.ConfigMap
		for i := range n {
			cm := framework.ConfigMap(doomed, fmt.Sprintf("db-%d", i), map[string]string{"app": "archive"})
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			targets = append(targets, cm)
		}
		for _, cm := range targets {
			Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(ContainElement("clusterteardownpolicy.teardown.dev/" + cp.Name))
		}

		By("deleting the namespace")
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomed}})).To(Succeed())
		Eventually(probe.Gone(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomed}}), 3*time.Minute, time.Second).Should(BeTrue())

		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.InNamespace(runNamespace), client.MatchingLabels{v1alpha1.LabelTargetNamespace: doomed})).To(Succeed())
		Expect(runs.Items).To(HaveLen(n))
		for _, r := range runs.Items {
			Expect(r.Status.Phase).To(Equal(v1alpha1.RunSucceeded), "run %s: %s", r.Name, r.Status.Message)
			ss := r.Status.Step("archive")
			Expect(ss.State).To(HaveKeyWithValue("job", HavePrefix(jobs+"/")))
			Expect(string(ss.Outputs["jobNamespace"].Raw)).To(Equal(`"` + jobs + `"`))
		}
		var made batchv1.JobList
		Expect(k8s.List(ctx, &made, client.InNamespace(jobs), client.MatchingLabels{v1alpha1.LabelTargetNamespace: doomed})).To(Succeed())
		Expect(made.Items).To(HaveLen(n), "one Job per target, in the Jobs' namespace")
		for _, j := range made.Items {
			Expect(j.Labels).To(HaveKeyWithValue(v1alpha1.LabelRunNamespace, runNamespace))
			Expect(j.OwnerReferences).To(BeEmpty(), "no owner reference across namespaces")
			Expect(j.Spec.TTLSecondsAfterFinished).To(HaveValue(Equal(int32(3600))))
			Expect(j.Spec.Template.Spec.Containers[0].Command[1]).To(HavePrefix(doomed + "/db-"))
		}
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: jobs}})).To(Succeed())
	})

	It("lets a namespace's admin write TeardownPolicies, and edit and view only read them (aggregated ClusterRoles)", func() {
		installYAML(ctx, filepath.Join(root, "config", "rbac", "user_roles.yaml"))
		ns := newNamespace(ctx, "rbac")
		for user, role := range map[string]string{"alice": "admin", "bob": "edit", "carol": "view"} {
			Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
			})).To(Succeed())
		}
		can := func(user, verb, resource string) func() bool {
			return func() bool {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user,
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: ns, Verb: verb, Group: v1alpha1.GroupVersion.Group, Resource: resource,
					},
				}}
				Expect(k8s.Create(ctx, sar)).To(Succeed())
				return sar.Status.Allowed
			}
		}
		// The aggregation controller copies the rules into admin, edit and view.
		Eventually(can("alice", "create", "teardownpolicies"), 30*time.Second).Should(BeTrue())
		Eventually(can("bob", "list", "teardownruns"), 30*time.Second).Should(BeTrue())
		Eventually(can("carol", "get", "teardownpolicies"), 30*time.Second).Should(BeTrue())
		for _, verb := range []string{"delete", "patch", "update"} {
			Expect(can("alice", verb, "teardownpolicies")()).To(BeTrue(), "admin may %s policies", verb)
		}
		for _, user := range []string{"bob", "carol"} {
			for _, verb := range []string{"create", "update", "patch", "delete"} {
				Expect(can(user, verb, "teardownpolicies")()).To(BeFalse(), "%s may not %s policies", user, verb)
			}
		}
		Eventually(can("alice", "patch", "teardownruns"), 30*time.Second).Should(BeTrue(), "admin may annotate a run to retry it")
		for _, user := range []string{"bob", "carol"} {
			Expect(can(user, "patch", "teardownruns")()).To(BeFalse(), "%s may not annotate runs", user)
		}
		for _, user := range []string{"alice", "bob", "carol"} {
			Expect(can(user, "create", "teardownruns")()).To(BeFalse(), "%s may not create runs: they are the operator's", user)
			Expect(can(user, "update", "teardownruns")()).To(BeFalse(), "%s may not rewrite runs: only the operator writes their status", user)
			Expect(can(user, "watch", "teardownruns")()).To(BeTrue())
		}
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	})
})

// installYAML creates or replaces every ClusterRole in a multi-document YAML file.
func installYAML(ctx context.Context, path string) {
	raw, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		role := &rbacv1.ClusterRole{}
		err := dec.Decode(role)
		if errors.Is(err, io.EOF) {
			return
		}
		Expect(err).NotTo(HaveOccurred())
		Expect(role.Kind).To(Equal("ClusterRole"), path)
		existing := &rbacv1.ClusterRole{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(role), existing) == nil {
			role.ResourceVersion = existing.ResourceVersion
			Expect(k8s.Update(ctx, role)).To(Succeed())
			continue
		}
		Expect(k8s.Create(ctx, role)).To(Succeed())
	}
}
