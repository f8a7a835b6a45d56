package realnode

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func tearsDownThroughPods(ctx SpecContext) {
	ns := newNamespace(ctx, "rn-basic")
	out, err := shell(ctx, "kubectl apply -f test/testdata/crds/ack-s3-bucket.yaml && kubectl wait --for=condition=Established crd/buckets.s3.services.k8s.aws")
	Expect(err).NotTo(HaveOccurred(), out)
	apply(ctx, jobPolicy(ns, "orders", `echo "emptying $TEARDOWN_TARGET_KIND $TEARDOWN_TARGET_NAME"`, "")+
		fmt.Sprintf(`apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: buckets, namespace: %s}
spec:
  targetRef: {apiVersion: s3.services.k8s.aws/v1alpha1, kind: Bucket}
  steps:
  - name: settle
    wait: {duration: 1s}
  - name: empty
    job:
      template:
        spec:
          backoffLimit: 0
          template:
            spec:
              containers:
              - name: main
                image: %s
                imagePullPolicy: Never
                command: [sh, -c, 'echo "emptying bucket $TEARDOWN_TARGET_NAME"']
`, ns, busybox))
	cm := armed(ctx, ns, "orders", "orders")
	bystander := armed(ctx, ns, "bystander", "orders")
	bucket := &unstructured.Unstructured{}
	bucket.SetGroupVersionKind(schema.GroupVersionKind{Group: "s3.services.k8s.aws", Version: "v1alpha1", Kind: "Bucket"})
	bucket.SetNamespace(ns)
	bucket.SetName("invoices")
	Expect(unstructured.SetNestedField(bucket.Object, "invoices-bucket", "spec", "name")).To(Succeed())
	Expect(k8s.Create(ctx, bucket)).To(Succeed())
	Eventually(probe.Finalizers(ctx, bucket), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/buckets"))

	By("deleting both: each waits for its Job's container")
	Expect(k8s.Delete(ctx, cm)).To(Succeed())
	Expect(k8s.Delete(ctx, bucket)).To(Succeed())
	Eventually(probe.Gone(ctx, cm), 90*time.Second).Should(BeTrue())
	Eventually(probe.Gone(ctx, bucket), 90*time.Second).Should(BeTrue())

	for _, c := range []struct {
		policy, step, log string
		target            client.Object
	}{{"orders", "clean", "emptying ConfigMap orders", cm}, {"buckets", "empty", "emptying bucket invoices", bucket}} {
		run := probe.RunFor(ctx, c.target)()
		Expect(run).NotTo(BeNil())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(stepOf(run, c.step).Attempts).To(Equal(int32(1)))
		job := probe.JobOf(ctx, policyOf(ctx, ns, c.policy), c.target, c.step, 1)()
		Expect(job).NotTo(BeNil())
		Expect(job.Status.Succeeded).To(Equal(int32(1)))
		Expect(jobPodLog(ctx, job)).To(Equal(c.log+"\n"), "the container's own output, read from the kubelet")
	}
	By("the bystander, armed and not deleted, keeps its finalizer for the uninstall to release")
	Expect(probe.Finalizers(ctx, bystander)()).To(ContainElement("teardownpolicy.teardown.dev/orders"))
}
