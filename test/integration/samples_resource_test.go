package integration

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// The samples whose steps are resource steps, against the real CRDs of the kinds they create
// (test/testdata/crds), each step acting as the ServiceAccount the sample ships with its Role.
var _ = Describe("Samples with resource steps", func() {
	BeforeEach(func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
	})

	It("volumesnapshot-before-pvc: a VolumeSnapshot of a bound claim, ready before the claim goes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		policy := createSample(ctx, samplePath("volumesnapshot-before-pvc.yaml"), ns)[0].(*v1alpha1.TeardownPolicy)
		expectReady(ctx, policy, metav1.ConditionTrue)
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-orders-0",
			Labels: map[string]string{"teardown.dev/snapshot-on-delete": "true"}},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		Expect(k8s.Create(ctx, pvc)).To(Succeed())
		Consistently(finalizers(ctx, pvc), 2*time.Second).ShouldNot(ContainElement(finalizerOf(policy)), "a claim not yet bound is not protected")
		pvc.Status.Phase = corev1.ClaimBound
		Expect(k8s.Status().Update(ctx, pvc)).To(Succeed())
		Eventually(finalizers(ctx, pvc), 10*time.Second).Should(ContainElement(finalizerOf(policy)))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)).To(Succeed())
		requestDelete(ctx, pvc, "alice: orders-0 is retired") // two-phase: the claim stays alive meanwhile

		snap := &unstructured.Unstructured{}
		snap.SetAPIVersion("snapshot.storage.k8s.io/v1")
		snap.SetKind("VolumeSnapshot")
		snap.SetNamespace(ns)
		snap.SetName("data-orders-0-final-" + string(pvc.UID))
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(snap), snap) }, 10*time.Second).Should(Succeed())
		source, _, _ := unstructured.NestedString(snap.Object, "spec", "source", "persistentVolumeClaimName")
		class, _, _ := unstructured.NestedString(snap.Object, "spec", "volumeSnapshotClassName")
		Expect([]string{source, class}).To(Equal([]string{"data-orders-0", "csi-snapclass"}))

		By("the claim stays alive until the snapshot controller reports the snapshot ready to use")
		Expect(unstructured.SetNestedField(snap.Object, map[string]any{"readyToUse": false, "boundVolumeSnapshotContentName": "snapcontent-1"}, "status")).To(Succeed())
		Expect(k8s.Status().Update(ctx, snap)).To(Succeed())
		Consistently(func() *metav1.Time {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)
			return pvc.DeletionTimestamp
		}, time.Second).Should(BeNil())
		Expect(unstructured.SetNestedField(snap.Object, true, "status", "readyToUse")).To(Succeed())
		Expect(unstructured.SetNestedField(snap.Object, "1Gi", "status", "restoreSize")).To(Succeed())
		Expect(k8s.Status().Update(ctx, snap)).To(Succeed())
		Eventually(runPhase(ctx, pvc), 10*time.Second).Should(Equal(v1alpha1.RunSucceeded))
		Eventually(func() *metav1.Time {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)
			return pvc.DeletionTimestamp
		}, 10*time.Second).ShouldNot(BeNil(),
			"the operator deletes the claim once its snapshot is ready")
		Eventually(finalizers(ctx, pvc), 10*time.Second).ShouldNot(ContainElement(finalizerOf(policy)))
		Expect(string(runFor(ctx, pvc)().Status.Steps[0].Outputs["content"].Raw)).To(Equal(`"snapcontent-1"`))
	})

	It("statefulset-ordered-teardown: scaled to 0, its pods gone, then its Service and its claims, in order", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		policy := createSample(ctx, samplePath("statefulset-ordered-teardown.yaml"), ns)[0].(*v1alpha1.TeardownPolicy)
		expectReady(ctx, policy, metav1.ConditionTrue)
		instance := map[string]string{"app.kubernetes.io/instance": "orders-db"}
		sts := statefulSet(ns, "orders-db", 2)
		sts.Labels = map[string]string{"teardown.dev/ordered-teardown": "true"}
		sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels = instance, instance
		Expect(k8s.Create(ctx, sts)).To(Succeed())
		sts.Status.Replicas = 2 // as the StatefulSet controller reports its pods
		Expect(k8s.Status().Update(ctx, sts)).To(Succeed())
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-db"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: instance, Ports: []corev1.ServicePort{{Port: 5432}}}}
		Expect(k8s.Create(ctx, svc)).To(Succeed())
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-db-0", Labels: instance},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres"}}}}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		var claims []*corev1.PersistentVolumeClaim
		for _, name := range []string{"data-orders-db-0", "data-orders-db-1"} {
			c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: instance, Finalizers: []string{"example.com/hold"}},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
			Expect(k8s.Create(ctx, c)).To(Succeed())
			claims = append(claims, c)
		}
		Eventually(finalizers(ctx, sts), 10*time.Second).Should(ContainElement(finalizerOf(policy)))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts)).To(Succeed())
		requestDelete(ctx, sts, "alice: orders moved") // two-phase: scaled while alive, as its controller needs

		By("scaled to 0 through its scale subresource; the step waits for the controller to report no replica")
		Eventually(func() int32 {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts)
			return *sts.Spec.Replicas
		}, 10*time.Second).Should(BeZero())
		Eventually(stepPhase(ctx, sts, "scale-to-zero"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Consistently(stepPhase(ctx, sts, "scale-to-zero"), time.Second).Should(Equal(v1alpha1.StepRunning))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts)).To(Succeed())
		sts.Status.Replicas = 0
		Expect(k8s.Status().Update(ctx, sts)).To(Succeed())

		By("then it waits for the pod to go, and only then deletes the Service")
		Eventually(stepPhase(ctx, sts, "pods-gone"), 10*time.Second).Should(Equal(v1alpha1.StepRunning),
			func() string { return fmt.Sprintf("run: %+v", runFor(ctx, sts)().Status) })
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed(), "the Service stays while a pod is left")
		Expect(k8s.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(gone(ctx, svc), 20*time.Second).Should(BeTrue())

		By("then the claims, waiting until they are gone")
		Eventually(stepPhase(ctx, sts, "delete-claims"), 20*time.Second).Should(Equal(v1alpha1.StepRunning))
		for _, c := range claims {
			Eventually(func() *metav1.Time { _ = k8s.Get(ctx, client.ObjectKeyFromObject(c), c); return c.DeletionTimestamp }, 10*time.Second).ShouldNot(BeNil())
		}
		Consistently(func() *metav1.Time {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts)
			return sts.DeletionTimestamp
		}, time.Second).Should(BeNil(),
			"the StatefulSet stays alive until the pipeline ends")
		for _, c := range claims {
			update(ctx, c, func(c *corev1.PersistentVolumeClaim) { c.Finalizers = nil })
		}
		Eventually(gone(ctx, sts), 20*time.Second).Should(BeTrue(), "the operator deletes the StatefulSet once the steps succeeded")
	})

	It("velero-namespace-backup: a Velero Backup of a namespace, requested, completed, then the namespace deleted", func(ctx SpecContext) {
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "velero"}}))).To(Succeed())
		policy := createSample(ctx, samplePath("velero-namespace-backup.yaml"), "")[0]
		expectReady(ctx, policy, metav1.ConditionTrue)
		target := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop-" + rand.String(6), Labels: map[string]string{"teardown.dev/velero-backup": "true"}}}
		Expect(k8s.Create(ctx, target)).To(Succeed())
		Eventually(finalizers(ctx, target), 10*time.Second).Should(ContainElement("clusterteardownpolicy.teardown.dev/velero-namespace-backup"))
		requestDelete(ctx, target, "alice: shop is retired")

		backup := &unstructured.Unstructured{}
		backup.SetAPIVersion("velero.io/v1")
		backup.SetKind("Backup")
		backup.SetNamespace("velero")
		backup.SetName(target.Name + "-final-" + string(target.UID)[:8])
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(backup), backup) }, 10*time.Second).Should(Succeed(),
			func() string { return fmt.Sprintf("run: %+v", runFor(ctx, target)()) })
		included, _, _ := unstructured.NestedStringSlice(backup.Object, "spec", "includedNamespaces")
		Expect(included).To(Equal([]string{target.Name}), "a list rendered from a whole ${...}")

		By("the namespace is alive while Velero backs it up, and deleted once the backup completed")
		// Velero's Backup has no status subresource: Velero writes the whole object.
		Expect(unstructured.SetNestedField(backup.Object, "InProgress", "status", "phase")).To(Succeed())
		Expect(k8s.Update(ctx, backup)).To(Succeed())
		Consistently(func() *metav1.Time {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(target), target)
			return target.DeletionTimestamp
		}, time.Second).Should(BeNil())
		Expect(unstructured.SetNestedField(backup.Object, "Completed", "status", "phase")).To(Succeed())
		Expect(unstructured.SetNestedField(backup.Object, map[string]any{"itemsBackedUp": int64(12), "totalItems": int64(12)}, "status", "progress")).To(Succeed())
		Expect(k8s.Update(ctx, backup)).To(Succeed())
		Eventually(func() *metav1.Time {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(target), target)
			return target.DeletionTimestamp
		}, 10*time.Second).ShouldNot(BeNil())
		run := runFor(ctx, target)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(string(run.Status.Steps[0].Outputs["itemsBackedUp"].Raw)).To(Equal("12"))
	})
})
