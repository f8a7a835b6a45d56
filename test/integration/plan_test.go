package integration

import (
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// planDeletionJSON is the part of plan -o json about an object being deleted.
type planDeletionJSON struct {
	Operator struct{ State, Since string }
	Deleting *struct {
		Since      string
		Finalizers []string
		Runs       []struct{ Name, Namespace, Phase string }
		Acting     bool
		Message    string
	}
	OtherNamespaces *struct {
		Policies []string
		Message  string
	}
}

func planJSONOf(args ...string) planDeletionJSON {
	GinkgoHelper()
	out, errOut, code := kubectlTeardown(append([]string{"plan", "-o", "json"}, args...)...)
	Expect(code).To(Equal(cli.ExitOK), errOut)
	var rep planDeletionJSON
	Expect(json.Unmarshal([]byte(out), &rep)).To(Succeed())
	return rep
}

var _ = Describe("kubectl teardown plan", func() {
	ctx := context.Background()

	BeforeEach(func() { cliKubeconfig = writeKubeconfig(cfg) })

	It("says an object is being deleted with nobody acting while the operator is down, and then who acts", Serial, func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "hold", waitStep("hold", time.Hour))
		cm := protect(ctx, p, "orders")
		DeferCleanup(func() { breakGlass(ctx, cm) }) // once the operator is back (cleanups run last first)
		Eventually(armedAtCreation(ctx, configMap(ns, "probe", map[string]string{"app": p.Name}), finalizerOf(p)), 10*time.Second).Should(BeTrue())

		stopOperator()
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				stopOperator = startOperator()
			}
		})
		down := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
		setLease(ctx, "teardown-operator-7d9c-x2x4q_1", down, 15*time.Second)
		Expect(k8s.Delete(ctx, cm)).To(Succeed())

		out, errOut, code := kubectlTeardown("plan", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(And(
			ContainSubstring("operator: NOT RUNNING: no replica has held lease "+runNamespace+"/"+v1alpha1.LeaderElectionLease+" since "+down.UTC().Format(time.RFC3339)),
			ContainSubstring("BEING DELETED since "),
			ContainSubstring("held by teardown finalizers: "+finalizerOf(p)),
			ContainSubstring("no run exists for it"),
			ContainSubstring("nobody acts on it: no replica of the operator has held its lease"),
			ContainSubstring("start the operator"),
			ContainSubstring("kubectl teardown drain --policy TeardownPolicy/hold -n "+ns),
			ContainSubstring("delete: the object is already being deleted")))
		Expect(out).NotTo(ContainSubstring("kubectl teardown abandon"), "abandon needs the operator running")

		By("an object created while the operator is down is armed at its creation, by the policy's admission policy")
		born := configMap(ns, "born", map[string]string{"app": p.Name})
		Expect(k8s.Create(ctx, born)).To(Succeed())
		Expect(born.Finalizers).To(ConsistOf(finalizerOf(p)))
		out, errOut, code = kubectlTeardown("plan", "configmap/born", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("protected from creation: yes: MutatingAdmissionPolicy " + naming.ArmingPolicyName(ns, p.Name)))

		By("an object that comes to match while the operator is down is selected but not armed: deleted now, it would go without its teardown")
		late := configMap(ns, "late", map[string]string{"app": "not-yet"})
		Expect(k8s.Create(ctx, late)).To(Succeed())
		update(ctx, late, func(c *corev1.ConfigMap) { c.Labels["app"] = p.Name })
		Expect(late.Finalizers).To(BeEmpty())
		out, errOut, code = kubectlTeardown("plan", "configmap/late", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("the operator is not running (no replica has held its lease since " + down.UTC().Format(time.RFC3339) + "), so nothing arms it; deleted now, it would go without this teardown"))
		rep := planJSONOf("configmap/orders", "-n", ns)
		Expect(rep.Operator.State).To(Equal("not running"))
		Expect(rep.Operator.Since).To(Equal(down.UTC().Format(time.RFC3339)))
		Expect(rep.Deleting).NotTo(BeNil())
		Expect(rep.Deleting.Acting).To(BeFalse())
		Expect(rep.Deleting.Finalizers).To(Equal([]string{finalizerOf(p)}))
		Expect(rep.Deleting.Runs).To(BeEmpty())

		// The operator back: its run carries the teardown, and plan lists it.
		stopOperator, restarted = startOperator(), true
		setLease(ctx, "teardown-operator-7d9c-x2x4q_2", time.Now(), time.Hour)
		Eventually(stepPhase(ctx, cm, "hold"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		run := runFor(ctx, cm)()
		out, errOut, code = kubectlTeardown("plan", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(And(ContainSubstring("run "+run.Namespace+"/"+run.Name+": Running, step hold"),
			ContainSubstring("its runs carry its teardown")))
		Expect(out).NotTo(ContainSubstring("NOT RUNNING"))
		rep = planJSONOf("configmap/orders", "-n", ns)
		Expect(rep.Operator.State).To(Equal("running"))
		Expect(rep.Deleting.Acting).To(BeTrue())
		Expect(rep.Deleting.Runs).To(HaveLen(1))
		Expect(rep.Deleting.Runs[0].Phase).To(Equal(string(v1alpha1.RunRunning)))
	})

	It("names the TeardownPolicies of other namespaces that target the kind when none of the object's namespace does", func() {
		home, other := newNamespace(ctx), newNamespace(ctx)
		p := namespacedPolicy(other, "grace", waitStep("pause", time.Second))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Expect(k8s.Create(ctx, configMap(home, "orders", map[string]string{"app": "grace"}))).To(Succeed())

		out, errOut, code := kubectlTeardown("plan", "configmap/orders", "-n", home)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		// (Other specs' policies may be listed too, and cluster policies may target ConfigMaps.)
		Expect(out).To(And(ContainSubstring("TeardownPolicies of other namespaces target ConfigMap: "),
			MatchRegexp(`target ConfigMap: [^;]*TeardownPolicy/`+other+`/grace[,;]`),
			ContainSubstring("a TeardownPolicy protects only objects in its own namespace, and this object is in "+home+": create the policy in "+home)))
		rep := planJSONOf("configmap/orders", "-n", home)
		Expect(rep.OtherNamespaces).NotTo(BeNil())
		Expect(rep.OtherNamespaces.Policies).To(ContainElement("TeardownPolicy/" + other + "/grace"))
		Expect(rep.Deleting).To(BeNil())

		// A policy of its own namespace: nothing to say about the others.
		Expect(k8s.Create(ctx, namespacedPolicy(home, "own", waitStep("pause", time.Second)))).To(Succeed())
		Expect(planJSONOf("configmap/orders", "-n", home).OtherNamespaces).To(BeNil())
	})

	It("renders a job step's Job with the activeDeadlineSeconds its timeout gives it", func() {
		ns := newNamespace(ctx)
		p := jobPolicy(ns, "dump", `{"template": {"spec": {"containers": [{"name": "dump", "image": "busybox"}]}}}`)
		p.Spec.Steps[0].Timeout = dur(10 * time.Minute)
		cm := protect(ctx, p, "orders")
		Expect(cm).NotTo(BeNil())
		out, errOut, code := kubectlTeardown("plan", "configmap/orders", "-n", ns, "-o", "yaml")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("activeDeadlineSeconds: 570"))
	})

	It("renders a resource step and asks the API server whether its ServiceAccount may make each call", func() {
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
		ns := newNamespace(ctx)
		serviceAccountWith(ctx, ns, "backup", "postgresql.cnpg.io", "backups", "create")
		p := resourcePolicy(ns, "final", fmtStep(finalBackupStep, "backup"))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		cluster := cnpgCluster(ns, "orders")
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		Eventually(finalizers(ctx, cluster), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		out, errOut, code := kubectlTeardown("plan", "cluster.postgresql.cnpg.io/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		sa := "system:serviceaccount:" + ns + ":backup"
		Expect(out).To(ContainSubstring("final-backup (resource): create Backup " + ns + "/orders-final as ServiceAccount " + ns + "/backup, then wait until"))
		Expect(out).To(ContainSubstring("may " + sa + " create backups.postgresql.cnpg.io in " + ns + "? allowed"))
		Expect(out).To(ContainSubstring("may " + sa + " get backups.postgresql.cnpg.io in " + ns + "? NOT ALLOWED: the step would fail"))
		Expect(out).To(ContainSubstring("online: false"), "the Backup rendered, a whole ${...} typed")
		var backups unstructured.UnstructuredList
		backups.SetAPIVersion("postgresql.cnpg.io/v1")
		backups.SetKind("BackupList")
		Expect(k8s.List(ctx, &backups, client.InNamespace(ns))).To(Succeed())
		Expect(backups.Items).To(BeEmpty(), "a plan creates nothing")
	})
})
