package realnode

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// The specs' helpers: objects written as a user would write them, and reads of what came of them.

// apply applies manifests with kubectl, as a user keeping policies in git would.
func apply(ctx context.Context, manifests string) {
	out, err := shell(ctx, "kubectl apply -f - <<'YAML'\n"+manifests+"\nYAML")
	Expect(err).NotTo(HaveOccurred(), out)
}

// jobPolicy is a TeardownPolicy on ConfigMaps labelled app=<name> whose one step, "clean",
// runs script in busybox; extra is more YAML for the step (timeout, retry), indented by 2.
func jobPolicy(ns, name, script, extra string) string {
	return fmt.Sprintf(`apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  selector: {matchLabels: {app: %[2]s}}
  steps:
  - name: clean
%[4]s
    job:
      template:
        spec:
          backoffLimit: 0
          template:
            spec:
              terminationGracePeriodSeconds: 2
              containers:
              - name: main
                image: %[5]s
                imagePullPolicy: Never
                command: [sh, -c, %[3]q]
---
`, ns, name, script, extra, busybox)
}

// armed creates the ConfigMap ns/name labelled app=policy and waits for the policy's finalizer.
func armed(ctx context.Context, ns, name, policy string) *corev1.ConfigMap {
	cm := framework.ConfigMap(ns, name, map[string]string{"app": policy})
	Expect(k8s.Create(ctx, cm)).To(Succeed())
	Eventually(probe.Finalizers(ctx, cm), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/" + policy))
	return cm
}

// newNamespace creates a namespace for a spec's objects.
func newNamespace(ctx context.Context, name string) string {
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

// stepOf returns the status of a run's step.
func stepOf(run *v1alpha1.TeardownRun, step string) v1alpha1.StepStatus {
	for _, s := range run.Status.Steps {
		if s.Name == step {
			return s
		}
	}
	Fail(fmt.Sprintf("run %s has no step %s", run.Name, step))
	return v1alpha1.StepStatus{}
}

// jobPodLog returns the log of the first pod of a Job, read through the API server from the kubelet.
func jobPodLog(ctx context.Context, job *batchv1.Job) string {
	pods := &corev1.PodList{}
	Expect(k8s.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{"job-name": job.Name})).To(Succeed())
	Expect(pods.Items).NotTo(BeEmpty(), "pods of Job %s", job.Name)
	raw, err := clientset.CoreV1().Pods(job.Namespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	return string(raw)
}

// policyOf reads a TeardownPolicy.
func policyOf(ctx context.Context, ns, name string) *v1alpha1.TeardownPolicy {
	p := &v1alpha1.TeardownPolicy{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
	return p
}

// metaName is the ObjectMeta of ns/name.
func metaName(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}
