package integration

import (
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli"
)

// setLease writes the operator's leader election lease in the run namespace as a replica left
// it: renewed at renewed, for duration; the suite's operator runs without leader election, so
// the lease says what the spec wants.
func setLease(ctx context.Context, holder string, renewed time.Time, duration time.Duration) {
	GinkgoHelper()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: runNamespace, Name: v1alpha1.LeaderElectionLease}}
	_ = k8s.Delete(ctx, lease)
	lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(duration / time.Second)),
		AcquireTime: ptr.To(metav1.NewMicroTime(renewed.Add(-time.Hour))), RenewTime: ptr.To(metav1.NewMicroTime(renewed))}
	Eventually(func() error { return k8s.Create(ctx, lease) }, 5*time.Second).Should(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, lease))).To(Succeed()) })
}

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
			ContainSubstring("kubectl teardown abandon configmap/orders"),
			ContainSubstring("kubectl teardown drain --policy TeardownPolicy/hold"),
			ContainSubstring("delete: the object is already being deleted")))
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
})
