package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps/approval"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// tenantRoles are the shipped ClusterRoles that `admin` aggregates (config/rbac/user_roles.yaml).
// envtest runs no controller manager, so no aggregation: a tenant is bound to each of them.
var tenantRoles = []string{"teardown-operator-policy-editor", "teardown-operator-run-retrier",
	"teardown-operator-approver", "teardown-operator-viewer"}

// tenantOf is a namespace admin of ns as far as teardown.dev goes: the shipped roles that admin
// aggregates, bound in ns.
func tenantOf(ctx context.Context, ns, name string) person {
	GinkgoHelper()
	t := personOf(name)
	for _, role := range tenantRoles {
		grant(ctx, ns, role, t.name)
	}
	return t
}

// abandonAndWait breaks glass on a held object, as its owner would, and waits until it is gone.
func abandonAndWait(ctx context.Context, cm *corev1.ConfigMap) {
	GinkgoHelper()
	update(ctx, cm, func(c *corev1.ConfigMap) {
		c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest("test over")}
	})
	Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
}

// heldOnWait is a deleted object whose teardown waits for an hour, in a namespace of its own.
func heldOnWait(ctx context.Context) *corev1.ConfigMap {
	GinkgoHelper()
	ns := newNamespace(ctx)
	cm := protect(ctx, namespacedPolicy(ns, "slow", waitStep("hold", time.Hour)), "orders")
	Expect(k8s.Delete(ctx, cm)).To(Succeed())
	Eventually(stepPhase(ctx, cm, "hold"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
	return cm
}

// forgeApproval is the run with step's approval decided by who, and the step succeeded.
func forgeApproval(run *v1alpha1.TeardownRun, step, who string) *v1alpha1.TeardownRun {
	forged := run.DeepCopy()
	ss := forged.Status.Step(step)
	ss.Phase = v1alpha1.StepSucceeded
	ss.Approval.Decisions = append(ss.Approval.Decisions, v1alpha1.ApprovalRecord{Decision: v1alpha1.Approve,
		Approver: v1alpha1.Approver{Username: who}, Reason: "forged", Time: metav1.Now(), Attempt: ss.Attempts, Approval: "forged"})
	return forged
}

var _ = Describe("The trust boundary: what a tenant may write decides nothing", func() {
	ctx := context.Background()

	BeforeEach(func() {
		root := filepath.Join("..", "..")
		Expect(framework.InstallAdmissionPolicies(ctx, k8s, root)).To(Succeed())
		Expect(framework.InstallUserRoles(ctx, k8s, root)).To(Succeed())
		Expect(framework.AwaitApprovalsTrusted(ctx, k8s)).To(Succeed())
	})

	It("a namespace admin cannot write a run's status: an approval forged into it counts for nothing", func() {
		restartOperatorAsServiceAccount(ctx)
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "db", approvalStep("dba", "approve the drop?", func(a *v1alpha1.ApprovalStep) {
			a.Approvers = &v1alpha1.Approvers{Groups: []string{"dba"}}
		}), waitStep("after", 0))
		cm := protect(ctx, p, "orders")
		run := deleteAndHold(ctx, cm, "dba")
		mallory := tenantOf(ctx, ns, "mallory@example.com")

		By("patching the run with the operator's field manager: the API server keeps the status as it was")
		forged := forgeApproval(run, "dba", "alice@example.com")
		Expect(mallory.client.Patch(ctx, forged, client.MergeFrom(run), client.FieldOwner(engine.FieldManager))).To(Succeed())
		Expect(forged.Status.Step("dba").Approval.Decisions).To(BeEmpty(), "the status sent with a patch of the run is dropped")

		By("patching the status subresource: refused")
		forged = forgeApproval(run, "dba", "alice@example.com")
		err := mallory.client.Status().Patch(ctx, forged, client.MergeFrom(run), client.FieldOwner(engine.FieldManager))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)

		By("replacing the run's status with an update: refused too")
		forged = forgeApproval(runFor(ctx, cm)(), "dba", "alice@example.com")
		Expect(apierrors.IsForbidden(mallory.client.Status().Update(ctx, forged))).To(BeTrue())

		Consistently(stepPhase(ctx, cm, "dba"), 3*time.Second).Should(Equal(v1alpha1.StepRunning))
		Expect(runFor(ctx, cm)().Status.Step("dba").Approval.Decisions).To(BeEmpty())
		Expect(gone(ctx, cm)()).To(BeFalse(), "the object is still held")
		abandonAndWait(ctx, cm)
	})

	It("a run labelled released by a tenant releases nothing while its status says it runs", func() {
		restartOperatorAsServiceAccount(ctx)
		cm := heldOnWait(ctx)
		run := runFor(ctx, cm)()
		mallory := tenantOf(ctx, cm.Namespace, "mallory@example.com")

		labelled := run.DeepCopy()
		labelled.Labels[v1alpha1.LabelReleased] = "true"
		Expect(mallory.client.Patch(ctx, labelled, client.MergeFrom(run))).To(Succeed())
		By("the run leaves the operator's cache with the label; the operator reads it again and takes the label back")
		Eventually(func() map[string]string { return runFor(ctx, cm)().Labels }, 10*time.Second).ShouldNot(HaveKey(v1alpha1.LabelReleased),
			"the operator takes back a label it did not set")
		Consistently(gone(ctx, cm), 3*time.Second).Should(BeFalse(), "a label anyone who may patch runs can set releases nothing")
		Expect(finalizers(ctx, cm)()).To(ContainElement(finalizerOf(namespacedPolicy(cm.Namespace, "slow"))))
		Expect(runPhase(ctx, cm)()).To(Equal(v1alpha1.RunRunning))
		abandonAndWait(ctx, cm)
	})

	It("a job step never trusts a Job that is not its own, and never shows another Job's UID", Serial, func() {
		ns := newNamespace(ctx)
		cm, job := startJobStep(ctx, ns, "labels")
		created := job()

		By("the step's Job losing the labels the step gave it, while the operator is down")
		stopOperator()
		stripped := created.DeepCopy()
		delete(stripped.Labels, v1alpha1.LabelRunUID)
		Expect(k8s.Patch(ctx, stripped, client.MergeFrom(created))).To(Succeed())
		stopOperator = startOperator()

		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		msg := stepOf(ctx, cm, "dump").Message
		Expect(msg).To(ContainSubstring("is not the one this step created"))
		Expect(msg).NotTo(ContainSubstring(string(created.UID)))
		live := &batchv1.Job{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(created), live)).To(Succeed())
		Expect(live.DeletionTimestamp).To(BeNil(), "a Job that is not the step's own is left alone")
		Expect(live.Spec.TTLSecondsAfterFinished).To(BeNil())
		Expect(live.Name).To(Equal(naming.JobName(runFor(ctx, cm)().Name, "dump", 1)))
	})

	It("counts an approval only for the run it names, and refuses groups that are not the approver's own", func() {
		restartOperatorAsServiceAccount(ctx)
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "db", approvalStep("dba", "approve?"))
		a, b := protect(ctx, p, "a"), protect(ctx, p, "b")
		runA, runB := deleteAndHold(ctx, a, "dba"), deleteAndHold(ctx, b, "dba")

		By("mallory may approve run a only")
		mallory := personOf("mallory@example.com", "dba")
		Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "approve-a"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{v1alpha1.Group}, Resources: []string{"teardownruns"}, Verbs: []string{v1alpha1.ApproveVerb}, ResourceNames: []string{runA.Name}},
				{APIGroups: []string{v1alpha1.Group}, Resources: []string{"teardownapprovals"}, Verbs: []string{"create"}}}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "approve-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "approve-a"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: mallory.name}}})).To(Succeed())

		By("an answer that names run a, so that admission checks RBAC on a, but carries run b's UID")
		crossed := approval.Answer(runB, "dba", 1, v1alpha1.Approve, "crossed", v1alpha1.Approver{Username: mallory.name, Groups: mallory.groups})
		crossed.Spec.Run, crossed.Labels[v1alpha1.LabelRun] = runA.Name, runA.Name
		Expect(mallory.client.Create(ctx, crossed)).To(Succeed(), "admission sees a run mallory may approve")
		Consistently(stepPhase(ctx, b, "dba"), 2*time.Second).Should(Equal(v1alpha1.StepRunning))

		By("olga, who may approve b, approves it: that pass counts hers and says why mallory's does not count")
		olga := personOf("olga@example.com")
		grant(ctx, ns, "teardown-operator-approver", olga.name)
		Expect(olga.client.Create(ctx, approval.Answer(runB, "dba", 1, v1alpha1.Approve, "checked", v1alpha1.Approver{Username: olga.name, Groups: olga.groups}))).To(Succeed())
		Eventually(gone(ctx, b), 10*time.Second).Should(BeTrue())
		rec := runFor(ctx, b)().Status.Step("dba").Approval
		Expect(rec.Ignored).To(ContainElement(ContainSubstring(`spec.run names run "` + runA.Name + `", not this run`)))
		Expect(rec.Decisions).To(HaveLen(1))
		Expect(rec.Decisions[0].Approver.Username).To(Equal(olga.name))

		By("an answer whose groups repeat one of the approver's and leave another out")
		dup := approval.Answer(runA, "dba", 1, v1alpha1.Approve, "dup", v1alpha1.Approver{Username: mallory.name, Groups: []string{"dba", "dba"}})
		Expect(mallory.client.Create(ctx, dup)).To(MatchError(ContainSubstring("spec.approver.uid and spec.approver.groups must be those of the user creating the approval")))
		Expect(stepPhase(ctx, a, "dba")()).To(Equal(v1alpha1.StepRunning))
		abandonAndWait(ctx, a)
	})

	It("admits a delete request or a break glass only from someone who may delete the object, and records who they are", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		p := twoPhasePolicy(ns, "export", time.Hour)
		cm := protect(ctx, p, "orders")
		pat, dee := personOf("pat@example.com"), personOf("dee@example.com")
		roleFor(ctx, ns, pat.name, "configmaps", "get", "list", "watch", "patch")
		roleFor(ctx, ns, dee.name, "configmaps", "get", "list", "watch", "patch", "delete")
		annotate := func(who person, key, value string) error {
			live := &corev1.ConfigMap{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), live)).To(Succeed())
			edited := live.DeepCopy()
			if edited.Annotations == nil {
				edited.Annotations = map[string]string{}
			}
			edited.Annotations[key] = value
			return who.client.Patch(ctx, edited, client.MergeFrom(live))
		}

		By("a user with patch but not delete: refused, whatever name they write")
		for _, key := range []string{v1alpha1.AnnotationDeleteRequested, v1alpha1.AnnotationAbandon} {
			err := annotate(pat, key, pat.name+": let me")
			Expect(err).To(MatchError(And(ContainSubstring(`takes RBAC verb "delete" on it`), ContainSubstring("may not set "+key))), key)
		}
		Expect(annotate(pat, v1alpha1.AnnotationDeleteRequested, dee.name+": on dee's behalf")).To(MatchError(ContainSubstring("must name you as the API server knows you")))

		By("a user who may delete it, naming someone else: refused")
		Expect(annotate(dee, v1alpha1.AnnotationDeleteRequested, "alice@example.com: not me")).To(MatchError(ContainSubstring(`"` + dee.name + `: <why>"`)))
		Expect(annotationsOf(ctx, cm)).NotTo(HaveKey(v1alpha1.AnnotationDeleteRequested))
		Consistently(runFor(ctx, cm), 2*time.Second).Should(BeNil(), "nothing was requested")

		By("the same user naming themselves: the request runs and the run records them")
		Expect(annotate(dee, v1alpha1.AnnotationDeleteRequested, dee.name+": shop closed")).To(Succeed())
		Eventually(stepPhase(ctx, cm, "settle"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Expect(runFor(ctx, cm)().Status.RequestedBy).To(Equal(dee.name + ` (annotation teardown.dev/delete-requested="shop closed")`))

		By("and breaks glass: recorded the same way")
		Expect(annotate(dee, v1alpha1.AnnotationAbandon, dee.name+": INC-7")).To(Succeed())
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunCancelled))
		Expect(runFor(ctx, cm)().Status.CancelledBy).To(ContainSubstring(dee.name + ` (annotation teardown.dev/abandon="INC-7")`))
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Finalizers = nil })
	})

	It("acts on no request while the admission policy that checks requests is missing, and says why", Serial, func() {
		cm := heldOnWait(ctx)

		By("the policy's binding gone, a break glass counts for nothing")
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.RequestsPolicyName}}
		Expect(k8s.Delete(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(framework.InstallRequestsPolicy(ctx, k8s, filepath.Join("..", ".."))).To(Succeed())
			Expect(framework.AwaitRequestsTrusted(ctx, k8s)).To(Succeed())
		})
		update(ctx, cm, func(c *corev1.ConfigMap) {
			c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest("no admission")}
		})
		Eventually(probe().EventNotes(ctx, cm), 10*time.Second).Should(ContainElement(And(HavePrefix(v1alpha1.ReasonRequestIgnored+": "),
			ContainSubstring("ValidatingAdmissionPolicyBinding "+v1alpha1.RequestsPolicyName+" that checks requests is not installed"))))
		Consistently(gone(ctx, cm), 2*time.Second).Should(BeFalse())
		Expect(runPhase(ctx, cm)()).To(Equal(v1alpha1.RunRunning))

		By("installed again, the request set again counts")
		Expect(framework.InstallRequestsPolicy(ctx, k8s, filepath.Join("..", ".."))).To(Succeed())
		Expect(framework.AwaitRequestsTrusted(ctx, k8s)).To(Succeed())
		Expect(gone(ctx, cm)()).To(BeFalse())
		abandonAndWait(ctx, cm)
		Expect(runFor(ctx, cm)().Status.AbandonedBy).To(HavePrefix(adminName + ` (annotation teardown.dev/abandon="test over")`))
	})
})

var _ = Describe("The operator's marks on objects: only the operator sets them", func() {
	ctx := context.Background()

	BeforeEach(func() {
		installDeletionGuardPolicy(ctx)
		Expect(framework.AwaitInForce(ctx, k8s, v1alpha1.MarksPolicyName)).To(Succeed())
	})

	It("refuses a tenant who labels an object to exempt it, takes its verdict off, or lifts a veto by annotation", func() {
		ns := newNamespace(ctx)
		p := twoPhasePolicy(ns, "export", 0)
		cm := protect(ctx, p, "orders")
		Eventually(func() map[string]string { return labelsOf(ctx, cm) }, 10*time.Second).Should(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways))
		mallory := personOf("mallory@example.com")
		roleFor(ctx, ns, mallory.name, "configmaps", "get", "list", "watch", "create", "update", "patch", "delete")
		edit := func(f func(c *corev1.ConfigMap)) error {
			live := &corev1.ConfigMap{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), live)).To(Succeed())
			edited := live.DeepCopy()
			f(edited)
			return mallory.client.Patch(ctx, edited, client.MergeFrom(live))
		}
		refusal := func(mark string) types.GomegaMatcher {
			return MatchError(And(ContainSubstring("user "+mallory.name+" may not set, change or remove "+mark),
				ContainSubstring("the teardown operator alone sets them")))
		}

		By("labelling it as made by a run (which would exempt it from every policy): refused")
		Expect(edit(func(c *corev1.ConfigMap) { c.Labels[v1alpha1.LabelRunUID] = "x" })).To(refusal("label " + v1alpha1.LabelRunUID))
		By("taking the deletion guard's verdict off, to delete it next: refused, by patch and by update")
		Expect(edit(func(c *corev1.ConfigMap) { delete(c.Labels, v1alpha1.LabelDeletionGuard) })).To(refusal("label " + v1alpha1.LabelDeletionGuard))
		live := &corev1.ConfigMap{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), live)).To(Succeed())
		live.Labels[v1alpha1.LabelDeletionGuard] = v1alpha1.GuardDeny
		Expect(mallory.client.Update(ctx, live)).To(refusal("label " + v1alpha1.LabelDeletionGuard))
		By("annotating it with the run's computable name, as the operator lifts its own veto: refused")
		run := naming.RunName("TeardownPolicy", ns, p.Name, cm.Name, cm.UID)
		Expect(edit(func(c *corev1.ConfigMap) {
			c.Annotations[v1alpha1.AnnotationDeletedByRun] = run
		})).To(refusal("annotation " + v1alpha1.AnnotationDeletedByRun))
		By("creating an object already labelled as a run's: refused")
		made := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "exempt", Labels: map[string]string{"app": "orders", v1alpha1.LabelRunUID: "x"}}}
		Expect(mallory.client.Create(ctx, made)).To(refusal("label " + v1alpha1.LabelRunUID))

		By("the object is still armed and its veto holds")
		Consistently(func() map[string]string { return labelsOf(ctx, cm) }, 2*time.Second).Should(And(
			HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways), Not(HaveKey(v1alpha1.LabelRunUID))))
		Expect(finalizers(ctx, cm)()).To(ContainElement(finalizerOf(p)))
		Expect(mallory.client.Delete(ctx, cm)).To(MatchError(ContainSubstring("refused by a teardown deletion guard")))
		Expect(annotationsOf(ctx, cm)).NotTo(HaveKey(v1alpha1.AnnotationDeletedByRun))
	})

	It("looks at writes through a status subresource, and lets the endpoint controllers copy a Service's verdict", func() {
		ns := newNamespace(ctx)
		mallory := personOf("mallory@example.com")
		Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "status"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"get", "update", "patch"}}}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "status"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "status"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: mallory.name}}})).To(Succeed())
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders",
			Labels: map[string]string{v1alpha1.LabelDeletionGuard: v1alpha1.GuardDenyAlways}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		Expect(k8s.Create(ctx, svc)).To(Succeed())

		By("a tenant who may update only the Service's status: refused, the status keeps labels of built-in kinds")
		live := svc.DeepCopy()
		delete(live.Labels, v1alpha1.LabelDeletionGuard)
		Expect(mallory.client.Status().Update(ctx, live)).To(MatchError(ContainSubstring(
			"user " + mallory.name + " may not set, change or remove label " + v1alpha1.LabelDeletionGuard)))
		Expect(labelsOf(ctx, svc)).To(HaveKey(v1alpha1.LabelDeletionGuard))

		By("the EndpointSlice controller copying the Service's labels: admitted; a tenant doing the same: refused")
		slice := func() *discoveryv1.EndpointSlice {
			return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "orders-",
				Labels: map[string]string{v1alpha1.LabelDeletionGuard: v1alpha1.GuardDenyAlways, discoveryv1.LabelServiceName: "orders"}},
				AddressType: discoveryv1.AddressTypeIPv4}
		}
		controller := personOf("system:serviceaccount:kube-system:endpointslice-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system")
		Expect(controller.client.Create(ctx, slice())).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slices"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{discoveryv1.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"create"}}}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slices"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "slices"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: mallory.name}}})).To(Succeed())
		Expect(mallory.client.Create(ctx, slice())).To(MatchError(ContainSubstring("may not set, change or remove label")))
	})

	It("refuses a tenant's Job whose pod template carries a run's label", func() {
		ns := newNamespace(ctx)
		mallory := personOf("mallory@example.com")
		name := "mallory-jobs"
		Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "get"}}}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: mallory.name}}})).To(Succeed())
		job := func(labels map[string]string) *batchv1.Job {
			// Labelled itself, so that the API server does not copy the template's labels onto it.
			return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "pods-", Labels: map[string]string{"app": "orders"}}, Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
		}
		Expect(mallory.client.Create(ctx, job(map[string]string{v1alpha1.LabelRunUID: "x"}))).To(
			MatchError(ContainSubstring("may not set, change or remove label teardown.dev/run-uid in a Job's pod template")))
		Expect(mallory.client.Create(ctx, job(map[string]string{"app": "orders"}))).To(Succeed(), "a Job without the label is not looked at")
	})

	It("says a veto is not enforced while the marks policy is missing", Serial, func() {
		ns := newNamespace(ctx)
		p := twoPhasePolicy(ns, "export", 0)
		protect(ctx, p, "orders")
		vetoEnforced := func() *metav1.Condition {
			live := &v1alpha1.TeardownPolicy{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), live)).To(Succeed())
			return meta.FindStatusCondition(live.Status.Conditions, v1alpha1.ConditionVetoEnforced)
		}
		Eventually(vetoEnforced, 10*time.Second).Should(HaveField("Status", metav1.ConditionTrue))

		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.MarksPolicyName}}
		Expect(k8s.Delete(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { installDeletionGuardPolicy(ctx) })
		Eventually(vetoEnforced, 10*time.Second).Should(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Message", ContainSubstring("ValidatingAdmissionPolicyBinding teardown.dev-marks is not installed: anyone who may patch a vetoed object can remove its verdict"))))
		installDeletionGuardPolicy(ctx)
		Eventually(vetoEnforced, 10*time.Second).Should(HaveField("Status", metav1.ConditionTrue))

		By("edited to admit every write, it is as good as missing")
		marks := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: v1alpha1.MarksPolicyName}, marks)).To(Succeed())
		shipped := marks.DeepCopy()
		marks.Spec.Validations[0].Expression = "true"
		Expect(k8s.Update(ctx, marks)).To(Succeed())
		Eventually(vetoEnforced, 10*time.Second).Should(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", v1alpha1.ReasonAdmissionChanged),
			HaveField("Message", ContainSubstring("the ValidatingAdmissionPolicy teardown.dev-marks is not the one shipped with the operator (spec.validations changed)"))))
		Expect(k8s.Get(ctx, client.ObjectKey{Name: v1alpha1.MarksPolicyName}, marks)).To(Succeed())
		marks.Spec = shipped.Spec
		Expect(k8s.Update(ctx, marks)).To(Succeed())
		Eventually(vetoEnforced, 10*time.Second).Should(HaveField("Status", metav1.ConditionTrue))
	})

	It("acts on no request while the requests policy is edited to admit anyone", Serial, func() {
		cm := heldOnWait(ctx)

		requests := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: v1alpha1.RequestsPolicyName}, requests)).To(Succeed())
		shipped := requests.Spec.DeepCopy()
		requests.Spec.MatchConditions[0].Expression = "false"
		Expect(k8s.Update(ctx, requests)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			live := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			Expect(k8s.Get(ctx, client.ObjectKey{Name: v1alpha1.RequestsPolicyName}, live)).To(Succeed())
			live.Spec = *shipped
			Expect(k8s.Update(ctx, live)).To(Succeed())
			Expect(framework.AwaitRequestsTrusted(ctx, k8s)).To(Succeed(), "trusted again only a settle after the edit is undone")
		})
		update(ctx, cm, func(c *corev1.ConfigMap) {
			c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: "someone-else: edited policy"}
		})
		Eventually(probe().EventNotes(ctx, cm), 10*time.Second).Should(ContainElement(And(HavePrefix(v1alpha1.ReasonRequestIgnored+": "),
			ContainSubstring("is not the one shipped with the operator (spec.matchConditions changed)"))))
		Consistently(gone(ctx, cm), 2*time.Second).Should(BeFalse())
		Expect(runPhase(ctx, cm)()).To(Equal(v1alpha1.RunRunning))
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Finalizers = nil })
	})
})

var _ = Describe("A Secret's data never reaches what a viewer reads", func() {
	ctx := context.Background()

	It("a wait step whose condition converts a looked-up Secret's value, and a resource step's output of one, quote nothing of it", func() {
		operatorWithToken(ctx) // resource steps impersonate as an install does
		ns := newNamespace(ctx)
		const password = "hunter2-s3cret"
		encoded := "aHVudGVyMi1zM2NyZXQ=" // base64 of password, as the API server serves data
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-creds", Labels: map[string]string{"app": "db"}},
			Data: map[string][]byte{"password": []byte(password)}}
		Expect(k8s.Create(ctx, secret)).To(Succeed())

		By("a condition that would fail with the value in its error (strconv quotes what it cannot parse)")
		p := namespacedPolicy(ns, "leak", v1alpha1.Step{Name: "quote", Timeout: dur(3 * time.Second), Wait: &v1alpha1.WaitStep{
			Until:    "int(creds[0].data.password) > 0",
			Interval: dur(time.Hour),
			Lookups: []v1alpha1.Lookup{{Name: "creds", APIVersion: "v1", Kind: "Secret",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}},
		}})
		cm := protect(ctx, p, "orders")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 15*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss := stepOf(ctx, cm, "quote")
		Expect(ss.Message).To(ContainSubstring("data"), "the condition fails for want of the data")

		By("a resource step reading the Secret back as its output")
		serviceAccountWith(ctx, ns, "reader", "", "secrets", "get", "patch")
		s := v1alpha1.Step{}
		Expect(yaml.UnmarshalStrict([]byte(`
name: read
resource:
  serviceAccountName: reader
  action: Patch
  target: {apiVersion: v1, kind: Secret, name: db-creds}
  patch: {metadata: {labels: {read: "yes"}}}
  outputs: {password: "resource.?data.?password.orValue('none')"}
`), &s)).To(Succeed())
		p2 := namespacedPolicy(ns, "leak-output", s)
		p2.Spec.RunHistory = v1alpha1.RunHistoryAll // kept, to be read
		cm2 := protect(ctx, p2, "orders2")
		Expect(k8s.Delete(ctx, cm2)).To(Succeed())
		Eventually(runPhase(ctx, cm2), 15*time.Second).Should(Equal(v1alpha1.RunSucceeded))
		Expect(string(stepOf(ctx, cm2, "read").Outputs["password"].Raw)).To(Equal(`"none"`), "the output reads no data")

		By("nothing a viewer reads holds the value: runs, events")
		for _, obj := range []*corev1.ConfigMap{cm, cm2} {
			run := runFor(ctx, obj)()
			raw, err := json.Marshal(run)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(raw)).NotTo(Or(ContainSubstring(password), ContainSubstring(encoded)))
			Expect(probe().EventNotes(ctx, run)()).NotTo(ContainElement(Or(ContainSubstring(password), ContainSubstring(encoded))))
		}
	})
})

// roleFor binds user, in ns, to a Role with verbs on resource (core group).
func roleFor(ctx context.Context, ns, user, resource string, verbs ...string) {
	GinkgoHelper()
	name := strings.NewReplacer("@", "-", ".", "-").Replace(user)
	Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: verbs}}})).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
}

var _ = Describe("Policies that stop protecting stop vetoing", func() {
	ctx := context.Background()

	BeforeEach(func() { installDeletionGuardPolicy(ctx) })

	It("a suspended two-phase policy lifts its veto: a plain delete goes through", func() {
		ns := newNamespace(ctx)
		p := twoPhasePolicy(ns, "export", 0)
		cm := protect(ctx, p, "orders")
		Eventually(func() map[string]string { return labelsOf(ctx, cm) }, 10*time.Second).Should(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways))
		Expect(k8s.Delete(ctx, cm)).To(MatchError(ContainSubstring("refused by a teardown deletion guard")))
		update(ctx, p, func(p *v1alpha1.TeardownPolicy) { p.Spec.Suspend = true })
		Eventually(func() map[string]string { return labelsOf(ctx, cm) }, 10*time.Second).ShouldNot(HaveKey(v1alpha1.LabelDeletionGuard))
		Eventually(func() error { return k8s.Delete(ctx, cm) }, 10*time.Second).Should(Succeed())
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
	})

	It("a two-phase TeardownPolicy deleted with its namespace tears its objects down instead of holding the namespace", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		p := twoPhasePolicy(ns, "export", 0)
		cm := protect(ctx, p, "orders")
		Eventually(func() map[string]string { return labelsOf(ctx, cm) }, 10*time.Second).Should(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways))

		By("the namespace deleted, and the policy with it (envtest runs no namespace controller: the spec deletes the policy as it would)")
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue(), "the namespace's deletion is the request: the pipeline runs and the operator deletes the object")
		Expect(api.calls(ns, "POST /"+ns+"/backup/orders")()).To(Equal(1))
		run := runFor(ctx, cm)()
		Expect(run.Status.RequestedBy).To(Equal("the deletion of namespace " + ns))
		Eventually(gone(ctx, p), 10*time.Second).Should(BeTrue(), "the policy goes once its objects are done")
	})
})
