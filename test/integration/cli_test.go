package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/creack/pty"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// cliKubeconfig is a kubeconfig for the suite's cluster admin, written for each spec.
var cliKubeconfig string

// writeKubeconfig writes a kubeconfig for rc (envtest's certificate-based config), with the
// identity rc impersonates, if any.
func writeKubeconfig(rc *rest.Config) string {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData, Token: rc.BearerToken,
		Impersonate: rc.Impersonate.UserName, ImpersonateGroups: rc.Impersonate.Groups}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
	return path
}

// kubectlTeardownAs runs the plugin in this process with a kubeconfig (its discovery cache
// next to it, not in $HOME), stdin a buffer (not a terminal).
func kubectlTeardownAs(kubeconfig string, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}
	flags := []string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(kubeconfig), "cache")}
	code = cli.Run(cli.NewCommand(streams), append(flags, args...))
	GinkgoWriter.Printf("$ kubectl teardown %s\n%s%s(exit %d)\n", strings.Join(args, " "), out.String(), errOut.String(), code)
	return out.String(), errOut.String(), code
}

func kubectlTeardown(args ...string) (stdout, stderr string, code int) {
	return kubectlTeardownAs(cliKubeconfig, args...)
}

// kubectl runs the kubectl of the suite's control plane (KUBEBUILDER_ASSETS) and returns its
// output; it fails the spec if kubectl fails.
func kubectl(args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), append([]string{"--kubeconfig", cliKubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	GinkgoWriter.Printf("$ kubectl %s\n%s", strings.Join(args, " "), out)
	Expect(err).NotTo(HaveOccurred(), string(out))
	return string(out)
}

// kubectlTeardownOnTerminal runs the plugin with a terminal (a pseudo-terminal) as its standard
// input, where a user types input.
func kubectlTeardownOnTerminal(input string, args ...string) (stdout, stderr string, code int) {
	GinkgoHelper()
	master, tty, err := pty.Open()
	Expect(err).NotTo(HaveOccurred())
	defer master.Close()
	defer tty.Close()
	_, err = master.WriteString(input)
	Expect(err).NotTo(HaveOccurred())
	go func() { _, _ = io.Copy(io.Discard, master) }() // the terminal's echo
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: tty, Out: &out, ErrOut: &errOut}
	flags := []string{"--kubeconfig", cliKubeconfig, "--cache-dir", filepath.Join(filepath.Dir(cliKubeconfig), "cache")}
	code = cli.Run(cli.NewCommand(streams), append(flags, args...))
	GinkgoWriter.Printf("$ kubectl teardown %s (on a terminal, typed %q)\n%s%s(exit %d)\n", strings.Join(args, " "), input, out.String(), errOut.String(), code)
	return out.String(), errOut.String(), code
}

// expectOneLineError checks a failure's stderr: one line "error: ...", no panic.
func expectOneLineError(stderr, want string) {
	Expect(stderr).To(HavePrefix("error: "))
	Expect(strings.Count(stderr, "\n")).To(Equal(1), stderr)
	Expect(stderr).NotTo(Or(ContainSubstring("goroutine"), ContainSubstring("panic")))
	Expect(stderr).To(ContainSubstring(want))
}

// breakGlass abandons the teardown of cm and waits until it is gone.
func breakGlass(ctx context.Context, cm *corev1.ConfigMap) {
	update(ctx, cm, func(c *corev1.ConfigMap) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[v1alpha1.AnnotationAbandon] = asRequest("test over")
	})
	Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
}

// deleteAndHold deletes a target whose policy's first step is a long wait, and returns its run
// once that step is Running.
func deleteAndHold(ctx context.Context, cm *corev1.ConfigMap, step string) *v1alpha1.TeardownRun {
	Expect(k8s.Delete(ctx, cm)).To(Succeed())
	Eventually(stepPhase(ctx, cm, step), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
	return runFor(ctx, cm)()
}

type planJSON struct {
	Policies []struct {
		Policy   string
		Protects bool
		Why      string
	}
}

const planFile = `apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: from-file}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  selector: {matchLabels: {app: db}}
  steps:
  - name: pause
    wait: {duration: 1s}
`

var _ = Describe("kubectl teardown", func() {
	ctx := context.Background()

	BeforeEach(func() { cliKubeconfig = writeKubeconfig(cfg) })

	It("plans a deletion: renders every step and sends, creates and deletes nothing", func() {
		ns := newNamespace(ctx)
		const token = "Bearer s3cr3t-plan-token-42"
		createSecret(ctx, ns, "api-token", map[string]string{"token": token})
		p := namespacedPolicy(ns, "full",
			httpStep("notify", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/v1/${object.metadata.name}/final"),
				Headers:  []v1alpha1.HTTPHeader{authFrom("api-token", "token")},
				JSONBody: "{'name': object.metadata.name, 'tier': object.data.tier}"}),
			framework.JobStep("dump", framework.Container("busybox:1.36", nil, "echo", "dump-${object.metadata.name}")),
			v1alpha1.Step{Name: "children", Wait: &v1alpha1.WaitStep{Until: "size(children) == 0", Lookups: []v1alpha1.Lookup{{
				Name: "children", APIVersion: "v1", Kind: "ConfigMap",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"parent": "${object.metadata.name}"}}}}}},
			v1alpha1.Step{Name: "prod-only", When: "object.?data.?tier.orValue('') == 'prod'", Wait: &v1alpha1.WaitStep{Duration: dur(time.Second)}})
		prod := namespacedPolicy(ns, "prod", waitStep("pause", 0))
		prod.Spec.Selector = p.Spec.Selector
		prod.Spec.Match = "object.?data.?tier.orValue('') == 'prod'"
		for _, pol := range []*v1alpha1.TeardownPolicy{p, prod} {
			Expect(k8s.Create(ctx, pol)).To(Succeed())
			expectReady(ctx, pol, metav1.ConditionTrue)
		}
		cm := configMap(ns, "orders", map[string]string{"app": "full"})
		cm.Data["tier"] = "dev"
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Expect(k8s.Create(ctx, configMap(ns, "orders-child", map[string]string{"parent": "orders"}))).To(Succeed())
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))

		out, errOut, code := kubectlTeardown("plan", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("TeardownPolicy/" + ns + "/full protects it\n"))
		Expect(out).To(ContainSubstring("1. notify (http): POST " + api.url(ns, "/v1/orders/final")))
		Expect(out).To(And(ContainSubstring(`"name":"orders"`), ContainSubstring(`"tier":"dev"`)))
		Expect(strings.ToLower(out)).To(MatchRegexp(`authorization: .*redacted`))
		Expect(out + errOut).NotTo(ContainSubstring("s3cr3t"))
		Expect(out).To(And(ContainSubstring("2. dump (job): create Job "+ns+"/"), ContainSubstring("kind: Job"),
			ContainSubstring("image: busybox:1.36"), ContainSubstring("dump-orders")))
		Expect(out).To(And(ContainSubstring("3. children (wait): wait until size(children) == 0 (false now: the step would wait)"),
			ContainSubstring(ns+"/orders-child")))
		Expect(out).To(ContainSubstring("4. prod-only (wait): skipped"))
		Expect(out).To(ContainSubstring("TeardownPolicy/" + ns + "/prod does not protect it: its match (" + prod.Spec.Match + ") is false for the object"))
		Expect(out).To(ContainSubstring("delete: allowed (dry run)"))
		Expect(out).To(ContainSubstring("note: the operator refuses this request unless its --http-allowed-destinations allows the address"))
		out, errOut, code = kubectlTeardown("plan", "configmap/orders", "-n", ns, "--http-allowed-destinations", api.srv.Listener.Addr().String())
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).NotTo(ContainSubstring("note: the operator refuses"), "the destination the operator allows")

		By("nothing was sent, created or deleted")
		Consistently(func() []received { return api.requests(ns) }, time.Second).Should(BeEmpty())
		var jobs batchv1.JobList
		Expect(k8s.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
		Expect(jobs.Items).To(BeEmpty())
		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.MatchingLabels{v1alpha1.LabelTargetUID: string(cm.UID)})).To(Succeed())
		Expect(runs.Items).To(BeEmpty())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		Expect(cm.DeletionTimestamp).To(BeNil())

		out, errOut, code = kubectlTeardown("plan", "configmap/orders", "-n", ns, "-o", "json")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		var rep planJSON
		Expect(json.Unmarshal([]byte(out), &rep)).To(Succeed(), out)
		Expect(rep.Policies).To(ConsistOf(
			And(HaveField("Policy", "TeardownPolicy/"+ns+"/full"), HaveField("Protects", true), HaveField("Why", "")),
			And(HaveField("Policy", "TeardownPolicy/"+ns+"/prod"), HaveField("Protects", false), HaveField("Why", ContainSubstring("is false")))))
	})

	It("plans a policy file before it is applied: the objects it would protect", func() {
		ns := newNamespace(ctx)
		for _, name := range []string{"db-1", "db-2"} {
			Expect(k8s.Create(ctx, configMap(ns, name, map[string]string{"app": "db"}))).To(Succeed())
		}
		Expect(k8s.Create(ctx, configMap(ns, "web", map[string]string{"app": "web"}))).To(Succeed())
		file := filepath.Join(GinkgoT().TempDir(), "policy.yaml")
		Expect(os.WriteFile(file, []byte(planFile), 0o600)).To(Succeed())

		out, errOut, code := kubectlTeardown("plan", "-f", file, "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(And(ContainSubstring("TeardownPolicy/"+ns+"/from-file would protect 2 objects:"),
			ContainSubstring("  ConfigMap "+ns+"/db-1\n"), ContainSubstring("  ConfigMap "+ns+"/db-2\n"),
			ContainSubstring("  not ConfigMap "+ns+"/web: its selector")))
		out, _, code = kubectlTeardown("plan", "-f", file, "-n", ns, "-o", "json")
		Expect(code).To(Equal(cli.ExitOK))
		var reps []struct{ Protects []string }
		Expect(json.Unmarshal([]byte(out), &reps)).To(Succeed(), out)
		Expect(reps).To(HaveLen(1))
		Expect(reps[0].Protects).To(ConsistOf("ConfigMap "+ns+"/db-1", "ConfigMap "+ns+"/db-2"))

		By("the policy was not applied, and nothing was protected")
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "from-file"}, &v1alpha1.TeardownPolicy{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		Expect(finalizers(ctx, configMap(ns, "db-1", nil))()).To(BeEmpty())
	})

	It("shows a teardown in flight as a tree, in the list of runs, and as JSON", func() {
		ns := newNamespace(ctx)
		cm := protect(ctx, namespacedPolicy(ns, "slow", waitStep("drain", time.Hour), waitStep("after", 0)), "orders")
		run := deleteAndHold(ctx, cm, "drain")
		DeferCleanup(func() { breakGlass(ctx, cm) })

		out, errOut, code := kubectlTeardown("status", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("TeardownRun " + run.Namespace + "/" + run.Name + "  Running"))
		Expect(out).To(ContainSubstring("policy  TeardownPolicy/" + ns + "/slow"))
		Expect(out).To(MatchRegexp(`├─ drain  Running  attempts 1  running for`))
		Expect(out).To(ContainSubstring("└─ after  Pending"))

		out, errOut, code = kubectlTeardown("status", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+TARGET\s+POLICY\s+PHASE\s+STEP`))
		Expect(out).To(MatchRegexp(`(?m)^` + run.Name + `\s+ConfigMap ` + ns + `/orders\s+TeardownPolicy/` + ns + `/slow\s+Running\s+drain\s`))

		out, errOut, code = kubectlTeardown("status", "configmap/orders", "-n", ns, "-o", "json")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		var got v1alpha1.TeardownRun
		Expect(json.Unmarshal([]byte(out), &got)).To(Succeed(), out)
		Expect(got.UID).To(Equal(run.UID))
		Expect(got.Spec.Target.UID).To(Equal(cm.UID))
		Expect(got.Status.Phase).To(Equal(v1alpha1.RunRunning))
		Expect(got.Status.CurrentStep).To(Equal("drain"))
		Expect(runPhase(ctx, cm)()).To(Equal(v1alpha1.RunRunning), "status changes nothing")
		Expect(gone(ctx, cm)()).To(BeFalse())
	})

	It("retries a Failed run once the cause is fixed, and refuses to retry a run that has not failed", func() {
		ns := newNamespace(ctx)
		var fixed atomic.Bool
		api.handle(ns, func(w http.ResponseWriter, _ *http.Request) {
			if !fixed.Load() {
				http.Error(w, "backend down", http.StatusInternalServerError)
			}
		})
		p := namespacedPolicy(ns, "hook", httpStep("hook", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/hook")}))
		p.Spec.FailurePolicy = v1alpha1.FailurePolicyRetain
		p.Spec.Steps[0].Retry = &v1alpha1.RetryPolicy{Limit: 0}
		cm := protect(ctx, p, "orders")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 15*time.Second).Should(Equal(v1alpha1.RunFailed))
		Consistently(gone(ctx, cm), time.Second).Should(BeFalse(), "Retain keeps the object")

		fixed.Store(true)
		out, errOut, code := kubectlTeardown("retry", "configmap/orders", "-n", ns, "--reason", "alice: backend fixed")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("retry 1 accepted: the run resumed from step hook"))
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		run := runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.LastRetry).NotTo(BeNil())
		Expect(run.Status.LastRetry.RequestedBy).To(ContainSubstring("alice: backend fixed"))
		Expect(api.calls(ns, "POST /"+ns+"/hook")()).To(Equal(2))

		_, errOut, code = kubectlTeardown("retry", run.Name, "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "is Succeeded")
		Expect(runFor(ctx, cm)().Status.Retries).To(Equal(int32(1)))
	})

	It("breaks glass: refuses without a reason, then abandons a teardown in flight", func() {
		ns := newNamespace(ctx)
		cm := protect(ctx, namespacedPolicy(ns, "stuck", waitStep("hold", time.Hour)), "orders")
		_, errOut, code := kubectlTeardown("abandon", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "--reason is required")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		Expect(cm.Annotations).NotTo(HaveKey(v1alpha1.AnnotationAbandon))

		deleteAndHold(ctx, cm, "hold")
		_, errOut, code = kubectlTeardown("retry", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "is Running")
		Expect(runFor(ctx, cm)().Annotations).NotTo(HaveKey(v1alpha1.AnnotationRetry))

		out, errOut, code := kubectlTeardown("abandon", "configmap/orders", "-n", ns, "--reason", "alice: INC-4211 snapshot taken by hand")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(MatchRegexp(`teardownrun ` + ns + `/\S+ is Abandoned`))
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		run := runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunAbandoned))
		Expect(run.Status.AbandonedBy).To(ContainSubstring("alice: INC-4211 snapshot taken by hand"))

		By("a Failed run that keeps its object is followed until it let go, not reported Failed at once")
		api.handle(ns, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusForbidden) })
		failing := namespacedPolicy(ns, "failing", httpStep("notify", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/notify")}))
		failing.Spec.Steps[0].Retry = &v1alpha1.RetryPolicy{Limit: 0}
		kept := protect(ctx, failing, "kept")
		Expect(k8s.Delete(ctx, kept)).To(Succeed())
		Eventually(runPhase(ctx, kept), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		out, errOut, code = kubectlTeardown("abandon", "configmap/kept", "-n", ns, "--reason", "alice: the API is gone for good")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(MatchRegexp(`teardownrun ` + ns + `/\S+ is Abandoned`))
		Expect(out).NotTo(ContainSubstring("is Failed"))
		Eventually(gone(ctx, kept), 10*time.Second).Should(BeTrue())
	})

	It("drains teardown finalizers once the operator is stopped, and keeps other controllers' finalizers", Serial, func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "keep", waitStep("hold", time.Hour))
		idle := protect(ctx, p, "idle")
		deleting := protect(ctx, p, "deleting")
		shared := configMap(ns, "shared", map[string]string{"app": "keep"})
		shared.Finalizers = []string{"example.com/keep"}
		Expect(k8s.Create(ctx, shared)).To(Succeed())
		Eventually(finalizers(ctx, shared), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		run := deleteAndHold(ctx, deleting, "hold")
		Expect(run.Finalizers).To(ContainElement(v1alpha1.FinalizerRun))

		stopOperator()
		DeferCleanup(func() { stopOperator = startOperator() })
		DeferCleanup(func() {
			update(ctx, shared, func(c *corev1.ConfigMap) {
				c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == "example.com/keep" })
			})
		})
		objs := []client.Object{idle, deleting, shared, run}
		var before [][]string
		for _, o := range objs {
			before = append(before, finalizers(ctx, o)())
		}

		out, errOut, code := kubectlTeardown("drain", "--policy", "TeardownPolicy/keep", "-n", ns, "--dry-run")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(And(ContainSubstring("would release 3 finalizers from 3 objects"),
			ContainSubstring("would release "+finalizerOf(p)+" from configmaps "+ns+"/deleting (being deleted: its deletion would complete)")))
		for i, o := range objs {
			Expect(finalizers(ctx, o)()).To(Equal(before[i]), "a dry run changes nothing")
		}

		By("--all without --yes, where it cannot ask, refuses and changes nothing")
		out, errOut, code = kubectlTeardown("drain", "--all")
		Expect(code).To(Equal(cli.ExitUsage))
		Expect(out).To(BeEmpty())
		expectOneLineError(errOut, "cannot ask here (standard input is not a terminal): add --yes")
		for i, o := range objs {
			Expect(finalizers(ctx, o)()).To(Equal(before[i]), "a refused drain changes nothing")
		}

		By("on a terminal it shows what it would release and asks; no keeps everything")
		out, errOut, code = kubectlTeardownOnTerminal("no\n", "drain", "--all")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(And(ContainSubstring("would release "+finalizerOf(p)+" from configmaps "+ns+"/deleting"),
			MatchRegexp(`Release \d+ finalizers from \d+ objects\? Type yes to confirm: `), ContainSubstring("nothing released")))
		for i, o := range objs {
			Expect(finalizers(ctx, o)()).To(Equal(before[i]), "a declined drain changes nothing")
		}

		By("yes releases")
		out, errOut, code = kubectlTeardownOnTerminal("yes\n", "drain", "--all")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("released " + finalizerOf(p) + " from configmaps " + ns + "/deleting"))
		Expect(gone(ctx, deleting)()).To(BeTrue(), "the object being deleted is deleted")
		Expect(finalizers(ctx, idle)()).To(BeEmpty())
		Expect(finalizers(ctx, shared)()).To(Equal([]string{"example.com/keep"}))
		Expect(finalizers(ctx, run)()).NotTo(ContainElement(v1alpha1.FinalizerRun))
		Expect(finalizers(ctx, p)()).NotTo(ContainElement(v1alpha1.FinalizerPolicy))

		out, errOut, code = kubectlTeardown("drain", "--all", "--yes")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("nothing to drain"))
		Expect(finalizers(ctx, shared)()).To(Equal([]string{"example.com/keep"}))
	})

	// Issue: drain released every finalizer while the operator ran, which put them back at once.
	It("refuses to drain while a replica holds the operator's lease, unless told to", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "leased", waitStep("hold", time.Hour))
		cm := protect(ctx, p, "idle")
		setLease(ctx, "teardown-operator-7d9c-x2x4q_1", time.Now(), time.Hour)

		_, errOut, code := kubectlTeardown("drain", "--all", "--yes")
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "the operator is running (replica teardown-operator-7d9c-x2x4q_1 holds lease "+runNamespace+"/"+v1alpha1.LeaderElectionLease)
		Expect(errOut).To(ContainSubstring("--stop-operator"))
		_, errOut, code = kubectlTeardown("drain", "--policy", "TeardownPolicy/leased", "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "the operator is running")
		Expect(finalizers(ctx, cm)()).To(ContainElement(finalizerOf(p)))

		By("a dry run only warns")
		out, errOut, code := kubectlTeardown("drain", "--policy", "TeardownPolicy/leased", "-n", ns, "--dry-run")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(errOut).To(HavePrefix("warning: the operator is running"))
		Expect(out).To(ContainSubstring("would release 1 finalizer from 1 object"))

		By("a suspended policy's objects are let go by the operator itself: no refusal")
		update(ctx, p, func(p *v1alpha1.TeardownPolicy) { p.Spec.Suspend = true })
		Eventually(finalizers(ctx, cm), 10*time.Second).ShouldNot(ContainElement(finalizerOf(p)))
		_, errOut, code = kubectlTeardown("drain", "--policy", "TeardownPolicy/leased", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
	})

	// Issue: a policy left deleting (its operator gone) kept its own finalizer after drain --policy.
	It("drains a policy being deleted, its own finalizer included, while the operator is stopped", Serial, func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "orphan", waitStep("hold", time.Hour))
		cm := protect(ctx, p, "idle")
		stopOperator()
		DeferCleanup(func() { stopOperator = startOperator() })
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Consistently(gone(ctx, p), time.Second).Should(BeFalse(), "nothing lets the policy go while the operator is stopped")

		out, errOut, code := kubectlTeardown("drain", "--policy", "TeardownPolicy/orphan", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(ContainSubstring("released " + finalizerOf(p) + " from configmaps " + ns + "/idle"))
		Expect(out).To(ContainSubstring("released " + v1alpha1.FinalizerPolicy + " from teardownpolicies.teardown.dev " + ns + "/orphan"))
		Expect(finalizers(ctx, cm)()).To(BeEmpty())
		Eventually(gone(ctx, p), 5*time.Second).Should(BeTrue())
	})

	It("answers bad input with one line on stderr and exit code 2", func() {
		ns := newNamespace(ctx)
		_, errOut, code := kubectlTeardown("plan", "nosuchkind/x", "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "nosuchkind")

		_, errOut, code = kubectlTeardown("plan", "configmap/missing", "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "not found")
		Expect(gone(ctx, configMap(ns, "missing", nil))()).To(BeTrue())

		nobody, err := testEnv.AddUser(envtest.User{Name: "nobody"}, nil)
		Expect(err).NotTo(HaveOccurred())
		nc, err := client.New(nobody.Config(), client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		err = nc.List(ctx, &v1alpha1.TeardownRunList{}, client.InNamespace(ns))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the user has no rights: %v", err)
		_, errOut, code = kubectlTeardownAs(writeKubeconfig(nobody.Config()), "status", "-n", ns)
		Expect(code).To(Equal(cli.ExitUsage))
		expectOneLineError(errOut, "forbidden")
	})

	It("serves a user with rights in one namespace only: plan and status without cluster-wide lists", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "hold", waitStep("hold", time.Hour))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cm := configMap(ns, "orders", map[string]string{"app": "hold"})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))

		user, err := testEnv.AddUser(envtest.User{Name: "ns-admin-" + ns}, nil)
		Expect(err).NotTo(HaveOccurred())
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "teardown-user"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.Group}, Resources: []string{"teardownpolicies", "teardownruns"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "delete"}},
		}}
		Expect(k8s.Create(ctx, role)).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "teardown-user"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "ns-admin-" + ns}}})).To(Succeed())
		kubeconfig := writeKubeconfig(user.Config())

		out, errOut, code := kubectlTeardownAs(kubeconfig, "plan", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(And(ContainSubstring("TeardownPolicy/"+ns+"/hold protects it"), ContainSubstring("you may not list ClusterTeardownPolicies")))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		Expect(cm.DeletionTimestamp).To(BeNil(), "the dry-run delete deleted nothing")

		run := deleteAndHold(ctx, cm, "hold")
		out, errOut, code = kubectlTeardownAs(kubeconfig, "status", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(out).To(And(ContainSubstring("TeardownRun "+ns+"/"+run.Name+"  Running"), ContainSubstring("hold  Running")))
		Expect(runPhase(ctx, cm)()).To(Equal(v1alpha1.RunRunning))
	})
})
