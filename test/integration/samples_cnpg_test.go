package integration

import (
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// cnpgCluster is a CloudNativePG Cluster the real CRD accepts, backed up to an object store.
func cnpgCluster(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
		"metadata": map[string]any{"namespace": ns, "name": name, "labels": map[string]any{"teardown.dev/final-backup": "true"}},
		"spec": map[string]any{"instances": int64(1), "storage": map[string]any{"size": "1Gi"},
			"backup": map[string]any{"barmanObjectStore": map[string]any{"destinationPath": "s3://backups/" + name,
				"s3Credentials": map[string]any{"inheritFromIAMRole": true}}}},
	}}
	return u
}

var _ = Describe("Sample cnpg-final-backup", func() {
	It("takes a final CloudNativePG Backup (the real CRDs) before the Cluster goes", func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
		ns := newNamespace(ctx)
		policy := createSample(ctx, samplePath("cnpg-final-backup.yaml"), ns)[0].(*v1alpha1.TeardownPolicy)
		expectReady(ctx, policy, metav1.ConditionTrue)
		cluster := cnpgCluster(ns, "orders")
		Expect(k8s.Create(ctx, cluster, client.FieldValidation("Strict"))).To(Succeed())
		Eventually(finalizers(ctx, cluster), 10*time.Second).Should(ContainElement(finalizerOf(policy)))
		unbacked := cnpgCluster(ns, "scratch")
		unstructured.RemoveNestedField(unbacked.Object, "spec", "backup")
		Expect(k8s.Create(ctx, unbacked)).To(Succeed())
		expectUnprotected(ctx, unbacked, "a Cluster without backups configured is not protected")

		Expect(k8s.Delete(ctx, cluster)).To(Succeed())
		job := jobOf(ctx, policy, cluster, "request-backup", 1)
		Eventually(job, 10*time.Second).ShouldNot(BeNil())

		By("the Job's Backup manifest is one the real Backup CRD accepts: created as kubectl apply would")
		manifest := job().Spec.Template.Annotations["teardown.dev/backup"]
		backup := &unstructured.Unstructured{}
		Expect(json.Unmarshal([]byte(manifest), &backup.Object)).To(Succeed(), manifest)
		backup.SetNamespace(ns)
		Expect(k8s.Create(ctx, backup, client.FieldValidation("Strict"))).To(Succeed())
		Expect(backup.GetName()).To(Equal("orders-final-" + string(cluster.GetUID())))
		method, _, _ := unstructured.NestedString(backup.Object, "spec", "method")
		Expect(method).To(Equal("barmanObjectStore"))
		Expect(job().Spec.Template.Spec.Volumes[0].DownwardAPI.Items[0].FieldRef.FieldPath).To(Equal("metadata.annotations['teardown.dev/backup']"))
		finishJob(ctx, job(), true)

		By("the Cluster stays until CloudNativePG reports the backup completed")
		Eventually(stepPhase(ctx, cluster, "wait-for-backup"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Consistently(gone(ctx, cluster), 2*time.Second).Should(BeFalse())
		Expect(unstructured.SetNestedField(backup.Object, "completed", "status", "phase")).To(Succeed())
		Expect(k8s.Status().Update(ctx, backup)).To(Succeed())
		Eventually(gone(ctx, cluster), 10*time.Second).Should(BeTrue())
		Expect(runPhase(ctx, cluster)()).To(Equal(v1alpha1.RunSucceeded))
	})
})
