package integration

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps/approval"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// person is someone at a keyboard: the suite's admin impersonating them, with a client and a
// kubeconfig for the plugin.
type person struct {
	name, kubeconfig string
	groups           []string
	client           client.Client
}

func personOf(name string, groups ...string) person {
	GinkgoHelper()
	rc := rest.CopyConfig(cfg)
	rc.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: append(groups, "system:authenticated")}
	c, err := client.New(rc, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return person{name: name, kubeconfig: writeKubeconfig(rc), groups: rc.Impersonate.Groups, client: c}
}

// grant binds a shipped user ClusterRole to a user in ns, as a namespace admin would.
func grant(ctx context.Context, ns, clusterRole, user string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterRole + "-" + strings.ReplaceAll(user, ":", "-")},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
}

func approvalStep(name, message string, edit ...func(*v1alpha1.ApprovalStep)) v1alpha1.Step {
	a := &v1alpha1.ApprovalStep{Message: message}
	for _, e := range edit {
		e(a)
	}
	return v1alpha1.Step{Name: name, Approval: a}
}

// approvals lists the TeardownApprovals in ns.
func approvals(ctx context.Context, ns string) func() []v1alpha1.TeardownApproval {
	return func() []v1alpha1.TeardownApproval {
		var list v1alpha1.TeardownApprovalList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		return list.Items
	}
}

var _ = Describe("Approval steps", func() {
	ctx := context.Background()

	BeforeEach(func() {
		cliKubeconfig = writeKubeconfig(cfg)
		root := filepath.Join("..", "..")
		Expect(framework.InstallAdmissionPolicies(ctx, k8s, root)).To(Succeed())
		Expect(framework.InstallUserRoles(ctx, k8s, root)).To(Succeed())
		Expect(framework.AwaitApprovalsTrusted(ctx, k8s)).To(Succeed())
	})

	It("waits for a person with the verb, refuses one without, and records who approved before the next step", func() {
		restartOperatorAsServiceAccount(ctx) // the shipped ClusterRole lets it ask RBAC
		ns := newNamespace(ctx)
		var recordedFirst bool
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			// The drop must come after the approval is on record in the run.
			var runs v1alpha1.TeardownRunList
			Expect(k8s.List(ctx, &runs, client.InNamespace(ns))).To(Succeed())
			ss := runs.Items[0].Status.Step("dba")
			recordedFirst = ss != nil && ss.Approval != nil && len(ss.Approval.Decisions) == 1
			w.WriteHeader(http.StatusOK)
		})
		p := namespacedPolicy(ns, "db", waitStep("snapshot", 0),
			approvalStep("dba", "snapshot of ${object.metadata.name} taken; approve the drop?"),
			httpStep("drop", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/drop")}))
		cm := protect(ctx, p, "orders")
		run := deleteAndHold(ctx, cm, "dba")
		ss := run.Status.Step("dba")
		Expect(ss.Message).To(ContainSubstring("waiting for approval (0 of 1): snapshot of orders taken; approve the drop?"))
		Expect(ss.Approval.Request).To(Equal("snapshot of orders taken; approve the drop?"))

		alice, mallory := personOf("alice@example.com", "dba"), personOf("mallory@example.com")
		grant(ctx, ns, "teardown-operator-approver", alice.name)
		grant(ctx, ns, "teardown-operator-viewer", mallory.name)
		Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "answers"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.Group}, Resources: []string{"teardownapprovals"}, Verbs: []string{"create"}}}})).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "answers"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "answers"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: mallory.name}}})).To(Succeed())

		By("someone without the verb is refused by the plugin, naming the verb and resource, and nothing is written")
		_, errOut, code := kubectlTeardownAs(mallory.kubeconfig, "approve", run.Name, "-n", ns, "--reason", "looks fine")
		Expect(code).To(Equal(cli.ExitFindings))
		Expect(errOut).To(And(ContainSubstring(`may not approve or reject run `+run.Name), ContainSubstring(`RBAC verb "approve" on resource "teardownruns"`),
			ContainSubstring("nothing was recorded")))
		Expect(approvals(ctx, ns)()).To(BeEmpty())

		By("and by the API server when they write the answer themselves, as themselves or as someone else")
		own := approval.Answer(run, "dba", 1, v1alpha1.Approve, "by hand", v1alpha1.Approver{Username: mallory.name, Groups: mallory.groups})
		err := mallory.client.Create(ctx, own)
		Expect(err).To(MatchError(And(ContainSubstring(`may not approve or reject run `+run.Name+` in namespace `+ns), ContainSubstring(`RBAC verb "approve" on resource "teardownruns"`))))
		forged := approval.Answer(run, "dba", 1, v1alpha1.Approve, "by hand", v1alpha1.Approver{Username: alice.name, Groups: alice.groups})
		Expect(mallory.client.Create(ctx, forged)).To(MatchError(ContainSubstring("spec.approver.username must be the user creating the approval, " + mallory.name)))
		Expect(approvals(ctx, ns)()).To(BeEmpty())
		Consistently(stepPhase(ctx, cm, "dba"), 2*time.Second).Should(Equal(v1alpha1.StepRunning))
		Expect(api.calls(ns, "POST")()).To(Equal(0))

		By("a person with the verb approves with the plugin")
		out, errOut, code := kubectlTeardownAs(alice.kubeconfig, "approve", run.Name, "-n", ns, "--reason", "snapshot checked")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(And(ContainSubstring("alice@example.com approves step dba of run "+run.Name+" (attempt 1): snapshot checked"),
			ContainSubstring("counted: step dba is ")))
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		Expect(api.calls(ns, "POST")()).To(Equal(1))
		Expect(recordedFirst).To(BeTrue(), "the approval was in the run before the drop started")

		run = runFor(ctx, cm)()
		rec := run.Status.Step("dba").Approval
		Expect(rec.Decisions).To(HaveLen(1))
		d := rec.Decisions[0]
		Expect(d.Decision).To(Equal(v1alpha1.Approve))
		Expect(d.Approver.Username).To(Equal(alice.name))
		Expect(d.Approver.Groups).To(ContainElements("dba", "system:authenticated"))
		Expect(d.Reason).To(Equal("snapshot checked"))
		Expect(d.Approval).To(Equal(naming.ApprovalName(run.UID, "dba", 1, alice.name)))
		Expect(string(run.Status.Step("dba").Outputs["approvedBy"].Raw)).To(Equal(`["alice@example.com"]`))
		Expect(eventReasons(ctx, run)()).To(ContainElement(v1alpha1.ReasonApprovalRecorded))

		By("an answer cannot be given twice or changed")
		ta := approvals(ctx, ns)()[0]
		ta.Spec.Decision = v1alpha1.Reject
		Expect(k8s.Update(ctx, &ta)).To(MatchError(ContainSubstring("spec is immutable")))
	})

	It("fails the step on a rejection: Retain keeps the object, and the run says who rejected and why", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "db", approvalStep("dba", ""), waitStep("after", 0))
		cm := protect(ctx, p, "orders")
		run := deleteAndHold(ctx, cm, "dba")
		bob := personOf("bob@example.com")
		grant(ctx, ns, "teardown-operator-approver", bob.name)

		_, errOut, code := kubectlTeardownAs(bob.kubeconfig, "reject", "configmap/orders", "-n", ns, "--reason", "no snapshot yet")
		Expect(code).To(Equal(cli.ExitUsage), "bob may not read ConfigMaps: %s", errOut)
		_, errOut, code = kubectlTeardownAs(bob.kubeconfig, "reject", run.Name, "-n", ns, "--reason", "no snapshot yet")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		run = runFor(ctx, cm)()
		Expect(run.Status.Message).To(Equal("step dba failed: rejected by bob@example.com: no snapshot yet"))
		Expect(run.Status.Step("after").Phase).To(Equal(v1alpha1.StepSkipped))
		Expect(run.Status.Step("dba").Approval.Decisions[0].Decision).To(Equal(v1alpha1.Reject))
		Consistently(finalizers(ctx, cm), 2*time.Second).Should(ContainElement(finalizerOf(p)))
		Expect(eventReasons(ctx, cm)()).To(ContainElements(v1alpha1.ReasonRejectionRecorded, v1alpha1.ReasonFailed))

		By("a retry asks again, and the old rejection does not count for the new attempt")
		_, errOut, code = kubectlTeardown("retry", run.Name, "-n", ns, "--reason", "snapshot taken now", "--wait=false")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Eventually(stepPhase(ctx, cm, "dba"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Consistently(stepPhase(ctx, cm, "dba"), 2*time.Second).Should(Equal(v1alpha1.StepRunning))
		_, errOut, code = kubectlTeardownAs(bob.kubeconfig, "approve", run.Name, "-n", ns, "--reason", "snapshot there")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
	})

	It("counts only the approvers a step names, and distinct people", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "db", approvalStep("dba", "", func(a *v1alpha1.ApprovalStep) {
			a.Required = 2
			a.Approvers = &v1alpha1.Approvers{Groups: []string{"dba"}}
		}))
		cm := protect(ctx, p, "orders")
		run := deleteAndHold(ctx, cm, "dba")
		carol, dave, erin := personOf("carol", "dba"), personOf("dave", "dba"), personOf("erin", "dev")
		for _, who := range []person{carol, dave, erin} {
			grant(ctx, ns, "teardown-operator-approver", who.name)
		}

		_, errOut, code := kubectlTeardownAs(erin.kubeconfig, "approve", run.Name, "-n", ns, "--reason", "ok")
		Expect(code).To(Equal(cli.ExitUsage))
		Expect(errOut).To(ContainSubstring("you (erin, groups dev, system:authenticated) are not among the approvers of step dba (groups dba)"))
		Expect(approvals(ctx, ns)()).To(BeEmpty())
		By("written by hand, the API server admits it (erin has the verb) and the operator does not count it")
		Expect(erin.client.Create(ctx, approval.Answer(run, "dba", 1, v1alpha1.Approve, "by hand", v1alpha1.Approver{Username: erin.name, Groups: erin.groups}))).To(Succeed())
		Eventually(func() []string { return runFor(ctx, cm)().Status.Step("dba").Approval.Ignored }, 10*time.Second).Should(
			ConsistOf(ContainSubstring("erin is not among the step's approvers (groups dba)")))

		_, errOut, code = kubectlTeardownAs(carol.kubeconfig, "approve", run.Name, "-n", ns, "--reason", "ok")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		_, errOut, code = kubectlTeardownAs(carol.kubeconfig, "approve", run.Name, "-n", ns, "--reason", "again")
		Expect(code).To(Equal(cli.ExitUsage))
		Expect(errOut).To(ContainSubstring("you (carol) already answered attempt 1 of step dba"))
		Consistently(gone(ctx, cm), 2*time.Second).Should(BeFalse(), "one person is one approval of the two")
		Expect(runFor(ctx, cm)().Status.Step("dba").Message).To(ContainSubstring("(1 of 2, from groups dba)"))

		_, errOut, code = kubectlTeardownAs(dave.kubeconfig, "approve", run.Name, "-n", ns, "--reason", "ok too")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		Expect(string(runFor(ctx, cm)().Status.Step("dba").Outputs["approvedBy"].Raw)).To(Equal(`["carol","dave"]`))
	})

	It("counts an answer given while the operator was down once it is back, and asks nothing again", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "db", approvalStep("dba", ""), httpStep("drop", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/drop")}))
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		cm := protect(ctx, p, "orders")
		run := deleteAndHold(ctx, cm, "dba")
		frank := personOf("frank")
		grant(ctx, ns, "teardown-operator-approver", frank.name)

		stopOperator()
		Expect(frank.client.Create(ctx, approval.Answer(run, "dba", 1, v1alpha1.Approve, "by hand", v1alpha1.Approver{Username: frank.name, Groups: frank.groups}))).To(Succeed())
		stopOperator = startOperator()
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		Expect(api.calls(ns, "POST")()).To(Equal(1))
		Expect(runFor(ctx, cm)().Status.Step("dba").Approval.Decisions).To(HaveLen(1))
	})

	It("with trigger DeleteRequest deletes nothing while it waits; a timeout fails it; break glass releases", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "db", approvalStep("dba", "drop ${object.metadata.name}?"))
		p.Spec.Trigger = v1alpha1.TriggerDeleteRequest
		cm := protect(ctx, p, "orders")
		_, errOut, code := kubectlTeardown("delete", "configmap/orders", "-n", ns, "--reason", "decommission", "--wait=false")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Eventually(stepPhase(ctx, cm, "dba"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Consistently(func() *metav1.Time {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
			return cm.DeletionTimestamp
		}, 2*time.Second).Should(BeNil(), "nothing is deleted while the approval waits")
		out, _, _ := kubectlTeardown("status", "configmap/orders", "-n", ns)
		Expect(out).To(And(ContainSubstring("asks: drop orders?"), ContainSubstring("waiting for approval (0 of 1): drop orders?; kubectl teardown approve")))
		run := runFor(ctx, cm)()
		grace := personOf("grace")
		grant(ctx, ns, "teardown-operator-approver", grace.name)
		_, errOut, code = kubectlTeardownAs(grace.kubeconfig, "approve", run.Name, "-n", ns, "--reason", "go")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())

		By("a step timeout ends a wait nobody answers")
		timed := namespacedPolicy(ns, "timed", approvalStep("dba", "", func(*v1alpha1.ApprovalStep) {}))
		timed.Spec.Steps[0].Timeout = dur(2 * time.Second)
		other := protect(ctx, timed, "users")
		Expect(k8s.Delete(ctx, other)).To(Succeed())
		Eventually(runPhase(ctx, other), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(runFor(ctx, other)().Status.Message).To(ContainSubstring("step dba failed: timed out after 2s"))

		By("break glass releases an object whose approval waits")
		glass := namespacedPolicy(ns, "glass", approvalStep("dba", ""))
		third := protect(ctx, glass, "cache")
		deleteAndHold(ctx, third, "dba")
		_, errOut, code = kubectlTeardown("abandon", "configmap/cache", "-n", ns, "--reason", "no DBA tonight")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Eventually(gone(ctx, third), 15*time.Second).Should(BeTrue())
	})
})
