package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// jobPolicy is a TeardownPolicy on ConfigMaps labelled app=<name> whose one step runs a Job of
// the given raw JobSpec.
func jobPolicy(ns, name, spec string) *v1alpha1.TeardownPolicy {
	p := namespacedPolicy(ns, name, v1alpha1.Step{Name: "dump", Timeout: dur(time.Minute), Job: &v1alpha1.JobStep{
		Template: v1alpha1.JobTemplate{Spec: runtime.RawExtension{Raw: []byte(spec)}}}})
	return p
}

var _ = Describe("Policies checked with the API server", func() {
	ctx := context.Background()

	It("are not Ready when the API server refuses a job step's Job, naming the field; ${...} values are not judged by their placeholders", func() {
		ns := newNamespace(ctx)
		// A volume of two sources passes the step's own checks; the API server refuses it.
		refused := jobPolicy(ns, "two-sources", `{"template": {"spec": {"volumes": [{"name": "data", "emptyDir": {}, "secret": {"secretName": "s"}}],
			"containers": [{"name": "dump", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}`)
		Expect(k8s.Create(ctx, refused)).To(Succeed())
		cond := expectReady(ctx, refused, metav1.ConditionFalse)
		Expect(cond.Reason).To(Equal(v1alpha1.ReasonInvalidSpec))
		Expect(cond.Message).To(And(
			ContainSubstring("spec.steps[0].job.template.spec.template.spec.volumes[0].secret: Forbidden: may not specify more than 1 volume type"),
			ContainSubstring("dry-run")), cond.Message)
		GinkgoWriter.Println("Ready:", cond.Message)
		cm := configMap(ns, "orders", map[string]string{"app": refused.Name})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Consistently(finalizers(ctx, cm), 2*time.Second).Should(BeEmpty(), "a policy that is not Ready protects nothing")

		// The placeholder "0" is no restartPolicy the API server accepts, and the Job is not
		// created at all (a dry run): such values are judged when they are rendered.
		templated := jobPolicy(ns, "templated", `{"template": {"spec": {"restartPolicy": "${object.?data.?policy.orValue('Never')}",
			"containers": [{"name": "dump", "image": "${object.data.image}"}]}}}`)
		Expect(k8s.Create(ctx, templated)).To(Succeed())
		expectReady(ctx, templated, metav1.ConditionTrue)
		var jobs batchv1.JobList
		Expect(k8s.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
		Expect(jobs.Items).To(BeEmpty(), "a dry run creates nothing")

		// Fixed, the policy becomes Ready at its next generation.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(refused), refused)).To(Succeed())
		refused.Spec.Steps[0].Job.Template.Spec.Raw = []byte(`{"template": {"spec": {"volumes": [{"name": "data", "emptyDir": {}}],
			"containers": [{"name": "dump", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}}`)
		Expect(k8s.Update(ctx, refused)).To(Succeed())
		expectReady(ctx, refused, metav1.ConditionTrue)
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(refused)))
	})

	It("stay Ready when the API server cannot answer: a cluster policy's Jobs go to a namespace that does not exist yet", func() {
		cp := &v1alpha1.ClusterTeardownPolicy{ObjectMeta: metav1.ObjectMeta{Name: "dry-run-missing-ns"}, Spec: v1alpha1.ClusterTeardownPolicySpec{
			TeardownPolicySpec: v1alpha1.TeardownPolicySpec{
				TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: "ConfigMap"},
				Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": "dry-run-missing-ns"}},
				Pipeline: v1alpha1.Pipeline{Steps: []v1alpha1.Step{{Name: "dump", Timeout: dur(time.Minute), Job: &v1alpha1.JobStep{
					Namespace: "backups-not-yet",
					Template: v1alpha1.JobTemplate{Spec: runtime.RawExtension{Raw: []byte(
						`{"template": {"spec": {"volumes": [{"name": "d", "emptyDir": {}, "secret": {"secretName": "s"}}], "containers": [{"name": "c", "image": "busybox"}]}}}`)}}}}}},
			}}}
		Expect(k8s.Create(ctx, cp)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cp))).To(Succeed()) })
		expectReady(ctx, cp, metav1.ConditionTrue)
	})
})
