package integration

import (
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
	It("takes a final CloudNativePG Backup (the real CRDs) as its ServiceAccount before the Cluster goes", func(ctx SpecContext) {
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
		By("the Backup the real CRD accepts is created, the plugin's configuration left out")
		backup := backupOf(ns, "orders-final-"+string(cluster.GetUID()))
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(backup), backup) }, 10*time.Second).Should(Succeed())
		spec, _, _ := unstructured.NestedMap(backup.Object, "spec")
		Expect(spec).To(Equal(map[string]any{"cluster": map[string]any{"name": "orders"}, "method": "barmanObjectStore"}))

		By("the Cluster stays until CloudNativePG reports the backup completed")
		Eventually(stepPhase(ctx, cluster, "final-backup"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Consistently(gone(ctx, cluster), 2*time.Second).Should(BeFalse())
		Expect(unstructured.SetNestedField(backup.Object, "completed", "status", "phase")).To(Succeed())
		Expect(unstructured.SetNestedField(backup.Object, "20261127T120000", "status", "backupId")).To(Succeed())
		Expect(k8s.Status().Update(ctx, backup)).To(Succeed())
		run := runFor(ctx, cluster)()
		Eventually(gone(ctx, cluster), 10*time.Second).Should(BeTrue())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), run)).To(Succeed())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(string(run.Status.Steps[0].Outputs["backupId"].Raw)).To(Equal(`"20261127T120000"`))
	})

	It("names the WAL archiver of a plugin-backed Cluster, and fails at once when the Backup fails", func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
		ns := newNamespace(ctx)
		policy := createSample(ctx, samplePath("cnpg-final-backup.yaml"), ns)[0].(*v1alpha1.TeardownPolicy)
		expectReady(ctx, policy, metav1.ConditionTrue)
		cluster := cnpgCluster(ns, "orders")
		unstructured.RemoveNestedField(cluster.Object, "spec", "backup")
		Expect(unstructured.SetNestedSlice(cluster.Object, []any{
			map[string]any{"name": "metrics.example.com"},
			map[string]any{"name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": true},
		}, "spec", "plugins")).To(Succeed())
		Expect(k8s.Create(ctx, cluster, client.FieldValidation("Strict"))).To(Succeed())
		Eventually(finalizers(ctx, cluster), 10*time.Second).Should(ContainElement(finalizerOf(policy)))
		Expect(k8s.Delete(ctx, cluster)).To(Succeed())
		backup := backupOf(ns, "orders-final-"+string(cluster.GetUID()))
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(backup), backup) }, 10*time.Second).Should(Succeed())
		method, _, _ := unstructured.NestedString(backup.Object, "spec", "method")
		plugin, _, _ := unstructured.NestedString(backup.Object, "spec", "pluginConfiguration", "name")
		Expect([]string{method, plugin}).To(Equal([]string{"plugin", "barman-cloud.cloudnative-pg.io"}))

		Expect(unstructured.SetNestedField(backup.Object, "failed", "status", "phase")).To(Succeed())
		Expect(k8s.Status().Update(ctx, backup)).To(Succeed())
		Eventually(runPhase(ctx, cluster), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(runFor(ctx, cluster)().Status.Steps[0].Message).To(ContainSubstring("failureCondition holds"))
		Consistently(gone(ctx, cluster), time.Second).Should(BeFalse(), "failurePolicy Retain keeps the Cluster")
	})
})
