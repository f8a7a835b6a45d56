package e2e

import (
	"context"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// finalBackupPolicy takes a CloudNativePG Backup of a Cluster as the ServiceAccount backup, and
// waits for it to complete.
const finalBackupPolicy = `
apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: final-backup}
spec:
  targetRef: {apiVersion: postgresql.cnpg.io/v1, kind: Cluster}
  steps:
  - name: final-backup
    resource:
      serviceAccountName: backup
      action: Create
      manifest:
        apiVersion: postgresql.cnpg.io/v1
        kind: Backup
        metadata: {name: "${object.metadata.name}-final"}
        spec: {cluster: {name: "${object.metadata.name}"}, method: barmanObjectStore}
      successCondition: resource.?status.?phase.orValue('') == 'completed'
`

var _ = Describe("Resource steps on a real control plane", func() {
	It("adopt the object a killed operator created before it recorded it, and create no second one", func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, filepath.Join(root, "test", "testdata", "crds"))).To(Succeed())
		ns := newNamespace(ctx, "resource")
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backup"}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backup"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"postgresql.cnpg.io"}, Resources: []string{"backups"}, Verbs: []string{"create", "get"}}}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backup"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "backup"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "backup"}}})).To(Succeed())
		policy := &v1alpha1.TeardownPolicy{}
		Expect(yaml.UnmarshalStrict([]byte(finalBackupPolicy), policy)).To(Succeed())
		policy.Namespace = ns
		Expect(k8s.Create(ctx, policy)).To(Succeed())
		Eventually(func() bool {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(policy), policy)
			return policy.Status.ObservedGeneration == policy.Generation && len(policy.Status.Conditions) > 0 &&
				policy.Status.Conditions[0].Status == metav1.ConditionTrue
		}, 30*time.Second).Should(BeTrue())

		By("no run can be recorded in the namespace: the create happens, its record cannot")
		blockRuns(ctx, ns)
		cluster := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
			"metadata": map[string]any{"namespace": ns, "name": "orders"},
			"spec":     map[string]any{"instances": int64(1), "storage": map[string]any{"size": "1Gi"}},
		}}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		Eventually(probe.Finalizers(ctx, cluster), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/final-backup"))
		Expect(k8s.Delete(ctx, cluster)).To(Succeed())
		backup := &unstructured.Unstructured{}
		backup.SetAPIVersion("postgresql.cnpg.io/v1")
		backup.SetKind("Backup")
		backup.SetNamespace(ns)
		backup.SetName("orders-final")
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(backup), backup) }, 30*time.Second).Should(Succeed())
		created := backup.GetUID()
		Expect(runsIn(ctx, ns)()).To(BeZero())

		By("kill -9, then the operator starts again with runs allowed")
		Expect(operator.Process.Signal(syscall.SIGKILL)).To(Succeed())
		_ = operator.Wait()
		unblockRuns(ctx, ns)
		startOperator()

		Eventually(runsIn(ctx, ns), time.Minute).Should(Equal(1))
		Eventually(func() string {
			run := probe.RunFor(ctx, cluster)()
			if run == nil || len(run.Status.Steps) == 0 {
				return ""
			}
			return run.Status.Steps[0].Message
		}, time.Minute).Should(ContainSubstring("Backup " + ns + "/orders-final (adopted: this step created it for this deletion before)"))
		backups := &unstructured.UnstructuredList{}
		backups.SetAPIVersion("postgresql.cnpg.io/v1")
		backups.SetKind("BackupList")
		Expect(k8s.List(ctx, backups, client.InNamespace(ns))).To(Succeed())
		Expect(backups.Items).To(HaveLen(1))
		Expect(backups.Items[0].GetUID()).To(Equal(created))

		Expect(unstructured.SetNestedField(backup.Object, "completed", "status", "phase")).To(Succeed())
		Expect(k8s.Status().Update(ctx, backup)).To(Succeed())
		Eventually(probe.Gone(ctx, cluster), time.Minute).Should(BeTrue())
		run := probe.RunFor(ctx, cluster)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.Steps[0].Attempts).To(Equal(int32(1)))
	})

	It("fail a step whose ServiceAccount may not create the object, naming it, and create nothing", func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, filepath.Join(root, "test", "testdata", "crds"))).To(Succeed())
		ns := newNamespace(ctx, "resource-rbac")
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backup"}})).To(Succeed())
		policy := &v1alpha1.TeardownPolicy{}
		Expect(yaml.UnmarshalStrict([]byte(finalBackupPolicy), policy)).To(Succeed())
		policy.Namespace = ns
		Expect(k8s.Create(ctx, policy)).To(Succeed())
		cluster := cnpgClusterIn(ns)
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		Eventually(probe.Finalizers(ctx, cluster), 30*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/final-backup"))
		Expect(k8s.Delete(ctx, cluster)).To(Succeed())
		Eventually(probe.RunPhase(ctx, cluster), time.Minute).Should(Equal(v1alpha1.RunFailed))
		Expect(probe.RunFor(ctx, cluster)().Status.Steps[0].Message).To(HavePrefix(
			"ServiceAccount " + ns + "/backup may not create backups.postgresql.cnpg.io in namespace " + ns + ": "))
		backups := &unstructured.UnstructuredList{}
		backups.SetAPIVersion("postgresql.cnpg.io/v1")
		backups.SetKind("BackupList")
		Expect(k8s.List(ctx, backups, client.InNamespace(ns))).To(Succeed())
		Expect(backups.Items).To(BeEmpty())
		Consistently(probe.Gone(ctx, cluster), 2*time.Second).Should(BeFalse(), "failurePolicy Retain keeps the Cluster")
	})

	It("make a policy whose manifest names another namespace not Ready, naming the field", func(ctx SpecContext) {
		ns := newNamespace(ctx, "resource-elsewhere")
		policy := &v1alpha1.TeardownPolicy{}
		Expect(yaml.UnmarshalStrict([]byte(finalBackupPolicy), policy)).To(Succeed())
		policy.Namespace = ns
		policy.Spec.Steps[0].Resource.Manifest.Raw = []byte(`{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup", "metadata": {"name": "x", "namespace": "kube-system"}, "spec": {"cluster": {"name": "x"}}}`)
		Expect(k8s.Create(ctx, policy)).To(Succeed())
		Eventually(func() string {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(policy), policy)
			for _, c := range policy.Status.Conditions {
				if c.Type == v1alpha1.ConditionReady && c.Status == metav1.ConditionFalse {
					return c.Message
				}
			}
			return ""
		}, 30*time.Second).Should(ContainSubstring(`spec.steps[0].resource.manifest.metadata.namespace: Forbidden: a TeardownPolicy acts only in its own namespace "` + ns + `"`))
	})
})

// cnpgClusterIn is a CloudNativePG Cluster orders in ns that the real CRD accepts.
func cnpgClusterIn(ns string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
		"metadata": map[string]any{"namespace": ns, "name": "orders"},
		"spec":     map[string]any{"instances": int64(1), "storage": map[string]any{"size": "1Gi"}},
	}}
}

// runsIn counts the TeardownRuns in ns.
func runsIn(ctx context.Context, ns string) func() int {
	return func() int {
		var runs v1alpha1.TeardownRunList
		if err := k8s.List(ctx, &runs, client.InNamespace(ns)); err != nil {
			return -1
		}
		return len(runs.Items)
	}
}

// blockRuns makes the API server refuse every TeardownRun created or updated in ns (an admission
// policy), and waits until it does.
func blockRuns(ctx context.Context, ns string) {
	GinkgoHelper()
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e-no-runs-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.Group}, APIVersions: []string{"*"}, Resources: []string{"teardownruns"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "e2e: no run may be recorded here"}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: vap.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: vap.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}}}}
	Expect(k8s.Create(ctx, vap)).To(Succeed())
	Expect(k8s.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { unblockRuns(ctx, ns) })
	Eventually(func() error { return k8s.Create(ctx, probeRun(ns), client.DryRunAll) }, 30*time.Second).Should(HaveOccurred())
}

// unblockRuns removes blockRuns' policy, and waits until runs can be recorded in ns again.
func unblockRuns(ctx context.Context, ns string) {
	GinkgoHelper()
	name := "e2e-no-runs-" + ns
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
	Eventually(func() error { return k8s.Create(ctx, probeRun(ns), client.DryRunAll) }, 30*time.Second).Should(Succeed())
}

// probeRun is a run the API server accepts unless an admission policy refuses it.
func probeRun(ns string) *v1alpha1.TeardownRun {
	return &v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e-probe"},
		Spec: v1alpha1.TeardownRunSpec{
			PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: ns, Name: "probe"},
			Target:    v1alpha1.TargetObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "probe", UID: "probe"},
			Finalizer: "teardownpolicy.teardown.dev/probe",
			Pipeline:  v1alpha1.Pipeline{Steps: []v1alpha1.Step{{Name: "w", Wait: &v1alpha1.WaitStep{Duration: &metav1.Duration{}}}}},
		}}
}

func ptrTo[T any](v T) *T { return &v }
