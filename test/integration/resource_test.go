package integration

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// serviceAccountWith makes a ServiceAccount in ns allowed verbs on resource of group there (none:
// a ServiceAccount with no Role), and opts ns in to resource steps, as a cluster administrator
// does (the operator may then act as its ServiceAccounts).
func serviceAccountWith(ctx context.Context, ns, name, group, resource string, verbs ...string) {
	GinkgoHelper()
	Expect(framework.OptInResourceSteps(ctx, k8s, filepath.Join("..", ".."), ns, framework.OperatorNamespace, framework.OperatorName)).To(Succeed())
	serviceAccountAlone(ctx, ns, name, group, resource, verbs...)
}

// serviceAccountAlone is serviceAccountWith in a namespace nobody opted in.
func serviceAccountAlone(ctx context.Context, ns, name, group, resource string, verbs ...string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
	if len(verbs) == 0 {
		return
	}
	Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}}})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name}}})).To(Succeed())
}

// serviceAccountToken returns a token of the ServiceAccount namespace/name, made if need be, valid
// for an hour: what a pod of it is given.
func serviceAccountToken(ctx context.Context, namespace, name string) string {
	GinkgoHelper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, sa))).To(Succeed())
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return tok.Status.Token
}

// tokenConfig returns a config for the suite's API server that authenticates with a token of the
// ServiceAccount namespace/name, as a pod of it does.
func tokenConfig(ctx context.Context, namespace, name string) *rest.Config {
	GinkgoHelper()
	as := rest.AnonymousClientConfig(cfg)
	as.BearerToken = serviceAccountToken(ctx, namespace, name)
	return as
}

// resourcePolicy is a TeardownPolicy in ns protecting CloudNativePG Clusters labelled
// teardown.dev/final-backup=true, with one resource step written as YAML.
func resourcePolicy(ns, name, step string) *v1alpha1.TeardownPolicy {
	GinkgoHelper()
	s := v1alpha1.Step{}
	Expect(yaml.UnmarshalStrict([]byte(step), &s)).To(Succeed())
	return &v1alpha1.TeardownPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.TeardownPolicySpec{
			TargetRef: v1alpha1.TargetReference{APIVersion: "postgresql.cnpg.io/v1", Kind: "Cluster"},
			Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"teardown.dev/final-backup": "true"}},
			Pipeline:  v1alpha1.Pipeline{Steps: []v1alpha1.Step{s}},
		},
	}
}

const finalBackupStep = `
name: final-backup
resource:
  serviceAccountName: %s
  action: Create
  manifest:
    apiVersion: postgresql.cnpg.io/v1
    kind: Backup
    metadata:
      name: ${object.metadata.name}-final
      labels: {app: "${object.metadata.name}"}
    spec:
      cluster: {name: "${object.metadata.name}"}
      method: barmanObjectStore
      online: "${object.spec.instances > 1}"
  successCondition: resource.?status.?phase.orValue('') == 'completed'
  failureCondition: resource.?status.?phase.orValue('') == 'failed'
  outputs: {backupID: resource.status.backupId}
`

func backupOf(ns, name string) *unstructured.Unstructured {
	b := &unstructured.Unstructured{}
	b.SetAPIVersion("postgresql.cnpg.io/v1")
	b.SetKind("Backup")
	b.SetNamespace(ns)
	b.SetName(name)
	return b
}

// operatorWithToken restarts the operator, for the rest of the spec, as an install runs it: as
// its ServiceAccount, bound to the shipped ClusterRole, authenticated by a token (not by the
// suite's impersonation, so that its own impersonation of a step's ServiceAccount is what the
// API server authorizes).
func operatorWithToken(ctx context.Context) {
	GinkgoHelper()
	Expect(framework.BindOperatorRole(ctx, k8s, filepath.Join("..", ".."), framework.OperatorNamespace, framework.OperatorName)).To(Succeed())
	stopOperator()
	stopOperator = startOperatorOn(tokenConfig(ctx, framework.OperatorNamespace, framework.OperatorName), func(*engine.Options) {})
	DeferCleanup(func() {
		stopOperator()
		stopOperator = startOperator()
	})
}

var _ = Describe("Resource steps", func() {
	BeforeEach(func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
	})

	It("create an object as the policy's ServiceAccount, wait for its condition and keep its outputs", func(ctx SpecContext) {
		operatorWithToken(ctx)
		ns := newNamespace(ctx)
		serviceAccountWith(ctx, ns, "backup", "postgresql.cnpg.io", "backups", "create", "get")
		policy := resourcePolicy(ns, "final", fmtStep(finalBackupStep, "backup"))
		cluster := deleteProtected(ctx, policy, cnpgCluster(ns, "orders"))

		By("the Backup is created as the ServiceAccount, with a typed field rendered from a whole ${...}")
		backup := backupOf(ns, "orders-final")
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(backup), backup) }, 10*time.Second).Should(Succeed())
		online, found, _ := unstructured.NestedBool(backup.Object, "spec", "online")
		Expect(found && !online).To(BeTrue(), "spec.online rendered as the boolean false: %v", backup.Object["spec"])
		Expect(backup.GetLabels()).To(HaveKeyWithValue("teardown.dev/step", "final-backup"))
		Expect(backup.GetLabels()).To(HaveKey("teardown.dev/deletion"))
		Expect(backup.GetManagedFields()).To(ContainElement(HaveField("Manager", "teardown-operator")))

		By("the Cluster stays while the Backup runs, and goes once it completed")
		Eventually(stepPhase(ctx, cluster, "final-backup"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Expect(unstructured.SetNestedField(backup.Object, "running", "status", "phase")).To(Succeed())
		Expect(k8s.Status().Update(ctx, backup)).To(Succeed())
		Eventually(func() string { return runFor(ctx, cluster)().Status.Steps[0].Message }, 10*time.Second).Should(ContainSubstring("(phase running)"))
		Consistently(gone(ctx, cluster), time.Second).Should(BeFalse())
		Expect(unstructured.SetNestedField(backup.Object, "completed", "status", "phase")).To(Succeed())
		Expect(unstructured.SetNestedField(backup.Object, "20261127T160000", "status", "backupId")).To(Succeed())
		Expect(k8s.Status().Update(ctx, backup)).To(Succeed())
		run := runFor(ctx, cluster)()
		Eventually(gone(ctx, cluster), 10*time.Second).Should(BeTrue())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(run), run)).To(Succeed())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(string(run.Status.Steps[0].Outputs["backupID"].Raw)).To(Equal(`"20261127T160000"`))
		Expect(run.Status.Steps[0].Attempts).To(Equal(int32(1)))
	})

	It("fail when RBAC refuses the ServiceAccount, naming it, the verb, the resource and the namespace, and create nothing", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		serviceAccountWith(ctx, ns, "nobody", "", "")
		policy := resourcePolicy(ns, "final", fmtStep(finalBackupStep, "nobody"))
		cluster := deleteProtected(ctx, policy, cnpgCluster(ns, "orders"))
		Eventually(runPhase(ctx, cluster), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(runFor(ctx, cluster)().Status.Steps[0].Message).To(HavePrefix(
			"ServiceAccount " + ns + "/nobody may not create backups.postgresql.cnpg.io in namespace " + ns + ": "))
		backups := &unstructured.UnstructuredList{}
		backups.SetAPIVersion("postgresql.cnpg.io/v1")
		backups.SetKind("BackupList")
		Expect(k8s.List(ctx, backups, client.InNamespace(ns))).To(Succeed())
		Expect(backups.Items).To(BeEmpty())
		Consistently(gone(ctx, cluster), time.Second).Should(BeFalse(), "failurePolicy Retain keeps the Cluster")
	})

	It("act only in namespaces a cluster administrator opted in, saying how to opt one in", func(ctx SpecContext) {
		operatorWithToken(ctx)
		ns := newNamespace(ctx)
		serviceAccountAlone(ctx, ns, "backup", "postgresql.cnpg.io", "backups", "create", "get")
		policy := resourcePolicy(ns, "final", fmtStep(finalBackupStep, "backup"))
		cluster := deleteProtected(ctx, policy, cnpgCluster(ns, "orders"))
		Eventually(runPhase(ctx, cluster), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(runFor(ctx, cluster)().Status.Steps[0].Message).To(HavePrefix(
			"the operator may not act as ServiceAccount " + ns + "/backup: namespace " + ns + " is not opted in to resource steps; " +
				"a cluster administrator opts it in by binding ClusterRole teardown-operator-resource-steps there"))
		backups := &unstructured.UnstructuredList{}
		backups.SetAPIVersion("postgresql.cnpg.io/v1")
		backups.SetKind("BackupList")
		Expect(k8s.List(ctx, backups, client.InNamespace(ns))).To(Succeed())
		Expect(backups.Items).To(BeEmpty())

		By("opted in, a retry goes on")
		Expect(framework.OptInResourceSteps(ctx, k8s, filepath.Join("..", ".."), ns, framework.OperatorNamespace, framework.OperatorName)).To(Succeed())
		run := runFor(ctx, cluster)()
		retried := run.DeepCopy()
		retried.Annotations = map[string]string{v1alpha1.AnnotationRetry: asRequest("opted in")}
		Expect(k8s.Patch(ctx, retried, client.MergeFrom(run))).To(Succeed())
		Eventually(func() int {
			Expect(k8s.List(ctx, backups, client.InNamespace(ns))).To(Succeed())
			return len(backups.Items)
		}, 10*time.Second).Should(Equal(1))
	})

	It("refuse a policy that acts as a ServiceAccount of kube-system", func(ctx SpecContext) {
		p := &v1alpha1.ClusterTeardownPolicy{ObjectMeta: metav1.ObjectMeta{Name: "system-" + strings.ToLower(rand.String(5))},
			Spec: v1alpha1.ClusterTeardownPolicySpec{TeardownPolicySpec: resourcePolicy("x", "x", `
name: escalate
resource:
  serviceAccountName: clusterrole-aggregation-controller
  serviceAccountNamespace: kube-system
  action: Delete
  target: {apiVersion: postgresql.cnpg.io/v1, kind: Backup, name: "${object.metadata.name}"}`).Spec}}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
		cond := expectReady(ctx, p, metav1.ConditionFalse)
		Expect(cond.Message).To(ContainSubstring("spec.steps[0].resource.serviceAccountNamespace: Forbidden: a resource step never acts as a ServiceAccount of kube-system"))
	})

	It("never act as a ServiceAccount that does not exist, whatever a RoleBinding left to its name grants", func(ctx SpecContext) {
		operatorWithToken(ctx)
		ns := newNamespace(ctx)
		serviceAccountWith(ctx, ns, "gone", "postgresql.cnpg.io", "backups", "create", "get")
		Expect(k8s.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}})).To(Succeed())
		policy := resourcePolicy(ns, "final", fmtStep(finalBackupStep, "gone"))
		cluster := deleteProtected(ctx, policy, cnpgCluster(ns, "orders"))
		Eventually(runPhase(ctx, cluster), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(runFor(ctx, cluster)().Status.Steps[0].Message).To(HavePrefix(
			"ServiceAccount " + ns + "/gone does not exist: a step acts only as a ServiceAccount that exists"))
		backups := &unstructured.UnstructuredList{}
		backups.SetAPIVersion("postgresql.cnpg.io/v1")
		backups.SetKind("BackupList")
		Expect(k8s.List(ctx, backups, client.InNamespace(ns))).To(Succeed())
		Expect(backups.Items).To(BeEmpty(), "the stale RoleBinding's rights went unused")
	})

	It("make a policy not Ready for a manifest in another namespace, and for a field the kind's published schema lacks", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		elsewhere := resourcePolicy(ns, "elsewhere", `
name: final-backup
resource:
  serviceAccountName: backup
  action: Create
  manifest: {apiVersion: postgresql.cnpg.io/v1, kind: Backup, metadata: {name: x, namespace: kube-system}, spec: {cluster: {name: x}}}`)
		Expect(k8s.Create(ctx, elsewhere)).To(Succeed())
		cond := expectReady(ctx, elsewhere, metav1.ConditionFalse)
		Expect(cond.Message).To(ContainSubstring(`spec.steps[0].resource.manifest.metadata.namespace: Forbidden: a TeardownPolicy acts only in its own namespace "` + ns + `"`))

		misspelt := resourcePolicy(ns, "misspelt", fmtStep(finalBackupStep, "backup"))
		misspelt.Spec.Steps[0].Resource.SuccessCondition = "resource.status.phse == 'completed'"
		Expect(k8s.Create(ctx, misspelt)).To(Succeed())
		cond = expectReady(ctx, misspelt, metav1.ConditionFalse)
		Expect(cond.Message).To(ContainSubstring(`spec.steps[0].resource.successCondition: Invalid value: "resource.status.phse == 'completed'"`))
		Expect(cond.Message).To(ContainSubstring(`undefined field 'phse'`))
	})

	It("scale a StatefulSet through its scale subresource, then delete what a selector picks and wait until it is gone", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		serviceAccountWith(ctx, ns, "scaler", "apps", "statefulsets/scale", "patch")
		Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pvcs"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "delete"}},
				{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"get"}}}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pvcs"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pvcs"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scaler"}}})).To(Succeed())
		sts := statefulSet(ns, "orders-db", 3)
		Expect(k8s.Create(ctx, sts)).To(Succeed())
		var children []*corev1.ConfigMap
		for _, n := range []string{"data-0", "data-1"} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n, Labels: map[string]string{"db": "orders"},
				Finalizers: []string{"example.com/hold"}}}
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			children = append(children, cm)
		}
		other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other", Labels: map[string]string{"db": "other"}}}
		Expect(k8s.Create(ctx, other)).To(Succeed())

		policy := resourcePolicy(ns, "scale-down", `
name: scale-to-zero
resource:
  serviceAccountName: scaler
  action: Patch
  target: {apiVersion: apps/v1, kind: StatefulSet, name: "${object.metadata.name}-db", subresource: scale}
  patch: {spec: {replicas: "${0}"}}
  successCondition: resource.spec.replicas == 0
  outputs: {replicas: resource.spec.replicas}`)
		var del v1alpha1.Step
		Expect(yaml.UnmarshalStrict([]byte(`
name: delete-data
resource:
  serviceAccountName: scaler
  action: Delete
  target: {apiVersion: v1, kind: ConfigMap, selector: {matchLabels: {db: "${object.metadata.name}"}}}`), &del)).To(Succeed())
		policy.Spec.Steps = append(policy.Spec.Steps, del)
		cluster := deleteProtected(ctx, policy, cnpgCluster(ns, "orders"))

		Eventually(func() int32 {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts)
			return *sts.Spec.Replicas
		}, 10*time.Second).Should(BeZero())
		Eventually(stepPhase(ctx, cluster, "delete-data"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Eventually(func() string { return runFor(ctx, cluster)().Status.Steps[1].Message }, 10*time.Second).Should(
			ContainSubstring("waiting for 2 to go: data-0, data-1"))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(other), other)).To(Succeed(), "the selector does not pick it")
		Consistently(gone(ctx, cluster), time.Second).Should(BeFalse())
		for _, cm := range children {
			update(ctx, cm, func(c *corev1.ConfigMap) { c.Finalizers = nil })
		}
		Eventually(gone(ctx, cluster), 15*time.Second).Should(BeTrue(), "the step saw the ConfigMaps go (a watch or its interval)")
	})
})

// deleteProtected creates policy and, once it is Ready, obj; then deletes obj once the policy
// protects it.
func deleteProtected(ctx context.Context, policy *v1alpha1.TeardownPolicy, obj client.Object) client.Object {
	GinkgoHelper()
	Expect(k8s.Create(ctx, policy)).To(Succeed())
	expectReady(ctx, policy, metav1.ConditionTrue)
	Expect(k8s.Create(ctx, obj)).To(Succeed())
	Eventually(finalizers(ctx, obj), 10*time.Second).Should(ContainElement(finalizerOf(policy)))
	Expect(k8s.Delete(ctx, obj)).To(Succeed())
	return obj
}

// fmtStep puts the ServiceAccount's name into a step.
func fmtStep(step, serviceAccount string) string {
	return strings.Replace(step, "%s", serviceAccount, 1)
}

// statefulSet is a StatefulSet the API server accepts, with replicas pods.
func statefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas), ServiceName: name,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres"}}}}},
	}
}
