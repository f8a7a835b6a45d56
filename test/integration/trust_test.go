package integration

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "slow", waitStep("hold", time.Hour))
		cm := protect(ctx, p, "orders")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(stepPhase(ctx, cm, "hold"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		run := runFor(ctx, cm)()
		mallory := tenantOf(ctx, ns, "mallory@example.com")

		labelled := run.DeepCopy()
		labelled.Labels[v1alpha1.LabelReleased] = "true"
		Expect(mallory.client.Patch(ctx, labelled, client.MergeFrom(run))).To(Succeed())
		By("the run leaves the operator's cache with the label; the operator reads it again and takes the label back")
		Eventually(func() map[string]string { return runFor(ctx, cm)().Labels }, 10*time.Second).ShouldNot(HaveKey(v1alpha1.LabelReleased),
			"the operator takes back a label it did not set")
		Consistently(gone(ctx, cm), 3*time.Second).Should(BeFalse(), "a label anyone who may patch runs can set releases nothing")
		Expect(finalizers(ctx, cm)()).To(ContainElement(finalizerOf(p)))
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
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "slow", waitStep("hold", time.Hour))
		cm := protect(ctx, p, "orders")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(stepPhase(ctx, cm, "hold"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))

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
