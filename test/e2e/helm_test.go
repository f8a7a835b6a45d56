package e2e

import (
	"bytes"
	"context"
	"fmt"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// The chart is installed on a kwok cluster of its own (the suite's cluster has the CRDs installed
// without Helm). kwok simulates the operator's pods; the operator itself runs out of cluster, from
// the image's binary, with the chart's ServiceAccount's token and the Deployment's arguments, so
// that what is proven is the chart's RBAC and flags and the image's binary.
var _ = Describe("The Helm chart", Ordered, func() {
	const (
		cluster = "teardown-helm"
		release = "teardown-operator"
		ns      = "teardown-system"
	)
	var (
		ctx            = context.Background()
		c              client.Client
		cs             kubernetes.Interface
		adminConfig    string
		saConfig       string
		opBin, kubectl string
		op             *exec.Cmd
		opOut          bytes.Buffer
		helmEnv        []string
		tmp            string // lives as long as the container
	)
	helm := func(args ...string) string {
		GinkgoHelper()
		cmd := exec.Command(filepath.Join(root, "bin", "helm"), append(args, "--kubeconfig", adminConfig)...)
		cmd.Env = append(os.Environ(), helmEnv...)
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "helm %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}

	BeforeAll(func() {
		for _, f := range []string{"bin/helm", "bin/image/teardown-operator.tar"} {
			_, err := os.Stat(filepath.Join(root, f))
			Expect(err).NotTo(HaveOccurred(), "%s is missing: run make tools image", f)
		}
		var err error
		adminConfig, err = framework.StartCluster(root, cluster)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if os.Getenv("E2E_KEEP_CLUSTER") == "" {
				Expect(framework.StopCluster(root, cluster)).To(Succeed())
			}
		})
		cfg, err := clientcmd.BuildConfigFromFlags("", adminConfig)
		Expect(err).NotTo(HaveOccurred())
		c, err = client.New(cfg, client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		cs, err = kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		tmp = GinkgoT().TempDir()
		helmEnv = []string{"HELM_CACHE_HOME=" + tmp + "/cache", "HELM_CONFIG_HOME=" + tmp + "/config", "HELM_DATA_HOME=" + tmp + "/data"}
		tarball := filepath.Join(root, "bin", "image", "teardown-operator.tar")
		opBin, err = framework.ImageBinary(tarball, "teardown-operator", tmp)
		Expect(err).NotTo(HaveOccurred())
		kubectl, err = framework.ImageBinary(tarball, "kubectl-teardown", tmp)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { stopProcess(op) })
	})

	It("installs: every object exists and the operator's (simulated) pods are ready", func() {
		// kwok completes a Job's pod at once; the hook's pod stays Running for a minute instead,
		// long enough for the spec to run its command (the last spec).
		helm("install", release, filepath.Join(root, "charts", "teardown-operator"), "--namespace", ns, "--create-namespace",
			"--wait", "--timeout", "3m", "--set-string", `uninstall.podAnnotations.teardown\.dev/kwok-duration=60s`)
		d := &appsv1.Deployment{}
		Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: release}, d)).To(Succeed())
		Expect(*d.Spec.Replicas).To(BeEquivalentTo(2))
		Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(2))
		for _, name := range []string{"teardownpolicies.teardown.dev", "clusterteardownpolicies.teardown.dev", "teardownruns.teardown.dev"} {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			Expect(c.Get(ctx, client.ObjectKey{Name: name}, crd)).To(Succeed())
			Expect(crd.Annotations).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
		}
		for _, obj := range []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: release}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: release + "-metrics"}},
			&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: release}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: release}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: release}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: release + "-viewer"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: release + "-leader-election"}},
		} {
			Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed(), "%T %s", obj, obj.GetName())
		}
	})

	It("tears down as the chart's ServiceAccount, with the Deployment's arguments, from the image's binary", func() {
		saConfig = serviceAccountKubeconfig(ctx, cs, adminConfig, ns, release, tmp)
		d := &appsv1.Deployment{}
		Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: release}, d)).To(Succeed())
		args := []string{"--kubeconfig", saConfig}
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			switch {
			case strings.HasPrefix(a, "--metrics-bind-address="), strings.HasPrefix(a, "--health-probe-bind-address="):
				a = a[:strings.IndexByte(a, '=')+1] + "127.0.0.1:0" // not the pod's ports: this is the host
			}
			args = append(args, a)
		}
		op = exec.Command(opBin, args...)
		op.Env = append(os.Environ(), "POD_NAMESPACE="+ns)
		op.Stdout, op.Stderr = &opOut, &opOut
		Expect(op.Start()).To(Succeed())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				AddReportEntry("chart operator log", opOut.String())
			}
		})

		tns := "helm-shop"
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tns}})).To(Succeed())
		p := framework.NamespacedPolicy(tns, "cleanup", framework.WaitStep("settle", 0))
		Expect(c.Create(ctx, p)).To(Succeed())
		cm := framework.ConfigMap(tns, "done", map[string]string{"app": "cleanup"})
		Expect(c.Create(ctx, cm)).To(Succeed())
		hp := framework.Probe{Client: c}
		Eventually(hp.Finalizers(ctx, cm), time.Minute).Should(ContainElement("teardownpolicy.teardown.dev/cleanup"))
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionProtectedFromCreation)).To(BeTrue(), "%v", p.Status.Conditions)
		}, 30*time.Second).Should(Succeed(), "the chart's ClusterRole lets the operator keep the policy's admission policy")
		Expect(c.Get(ctx, client.ObjectKey{Name: naming.ArmingPolicyName(tns, p.Name)}, &admissionv1.MutatingAdmissionPolicyBinding{})).To(Succeed())
		Expect(c.Delete(ctx, cm)).To(Succeed())
		Eventually(hp.Gone(ctx, cm), time.Minute).Should(BeTrue())
		Expect(hp.RunFor(ctx, cm)()).To(BeNil(), "a teardown done at once leaves no run, at the default runHistory")
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(p.Status.Teardowns.Succeeded).To(Equal(int64(1)))
			g.Expect(p.Status.RecentTeardowns).To(HaveLen(1))
			g.Expect(p.Status.RecentTeardowns[0].Target.UID).To(Equal(cm.UID))
		}, 30*time.Second).Should(Succeed(), "the policy's status records it")

		lease := &coordinationv1.Lease{}
		Expect(c.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns))).To(Succeed())
		Eventually(func() string {
			l := &coordinationv1.LeaseList{}
			_ = c.List(ctx, l, client.InNamespace(ns))
			for _, item := range l.Items {
				if item.Spec.HolderIdentity != nil && strings.Contains(item.Name, "teardown") {
					lease = &item
					return *item.Spec.HolderIdentity
				}
			}
			return ""
		}, 30*time.Second).ShouldNot(BeEmpty(), "the leader election lease is held in the release namespace")
		Expect(lease.Namespace).To(Equal(ns))
	})

	It("uninstalls: the drain hook stops the operator and releases every finalizer; the CRDs stay", func() {
		tns := "helm-shop"
		p := framework.NamespacedPolicy(tns, "hold", framework.WaitStep("hold", time.Hour))
		Expect(c.Create(ctx, p)).To(Succeed())
		held := framework.ConfigMap(tns, "held", map[string]string{"app": "hold"})
		kept := framework.ConfigMap(tns, "kept", map[string]string{"app": "hold"})
		Expect(c.Create(ctx, held)).To(Succeed())
		Expect(c.Create(ctx, kept)).To(Succeed())
		hp := framework.Probe{Client: c}
		Eventually(hp.Finalizers(ctx, kept), time.Minute).Should(ContainElement("teardownpolicy.teardown.dev/hold"))
		Eventually(hp.Finalizers(ctx, held), time.Minute).Should(ContainElement("teardownpolicy.teardown.dev/hold"))
		Expect(c.Delete(ctx, held)).To(Succeed())
		Eventually(hp.RunPhase(ctx, held), time.Minute).Should(Equal(v1alpha1.RunRunning))

		By("helm uninstall: Helm creates the pre-delete hook's Role and Job, and waits for the Job")
		const kubelet = "e2e.teardown.dev/kubelet"
		operatorPods := holdPods(ctx, c, ns, kubelet)
		uninstall := exec.Command(filepath.Join(root, "bin", "helm"), "uninstall", release, "--namespace", ns,
			"--wait", "--timeout", "3m", "--kubeconfig", adminConfig)
		uninstall.Env = append(os.Environ(), helmEnv...)
		var uninstallOut bytes.Buffer
		uninstall.Stdout, uninstall.Stderr = &uninstallOut, &uninstallOut
		Expect(uninstall.Start()).To(Succeed())
		uninstalled := make(chan error, 1)
		go func() { uninstalled <- uninstall.Wait() }()
		job := &batchv1.Job{}
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: release + "-uninstall-drain"}, job)).To(Succeed())
			g.Expect(job.Status.Active).To(BeEquivalentTo(1))
		}, time.Minute).Should(Succeed(), "helm said:\n%s", &uninstallOut)
		Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: release + "-uninstall-drain"}, &rbacv1.Role{})).To(Succeed())
		Expect(probe.Finalizers(ctx, kept)()).NotTo(BeEmpty(), "nothing is released before the hook runs")

		By("running the hook Job's command, as its (simulated) pod would, as the operator's ServiceAccount")
		command := job.Spec.Template.Spec.Containers[0].Command
		Expect(command).To(HaveLen(5))
		Expect(command[0]).To(Equal("/kubectl-teardown"))
		drain := exec.Command(kubectl, append(command[1:], "--kubeconfig", saConfig)...)
		var drainOut bytes.Buffer
		drain.Stdout, drain.Stderr = &drainOut, &drainOut
		Expect(drain.Start()).To(Succeed())
		drained := make(chan error, 1)
		go func() { drained <- drain.Wait() }()

		By("stopping the operator's process once its pods terminate, as their kubelet would")
		Eventually(func(g Gomega) {
			select {
			case err := <-drained:
				drained <- err
				StopTrying(fmt.Sprintf("drain ended (%v) before the operator's pods were gone:\n%s", err, drainOut.String())).Now()
			default:
			}
			pods := &corev1.PodList{}
			g.Expect(c.List(ctx, pods, client.InNamespace(ns), operatorPods)).To(Succeed())
			for _, p := range pods.Items {
				g.Expect(p.DeletionTimestamp).NotTo(BeNil(), "pod %s", p.Name)
			}
		}, 2*time.Minute, 200*time.Millisecond).Should(Succeed(), "drain said:\n%s", &drainOut)
		Consistently(drained, 2*time.Second).ShouldNot(Receive(), "drain waits while the operator's pods terminate")
		Expect(probe.Finalizers(ctx, kept)()).NotTo(BeEmpty(), "nothing is released before the operator is stopped")
		stopProcess(op)
		releasePods(ctx, c, ns, operatorPods, kubelet)
		Expect(<-drained).To(Succeed(), drainOut.String())
		AddReportEntry("drain", drainOut.String())
		Expect(drainOut.String()).To(ContainSubstring("stopped deployment " + ns + "/" + release + " (was 2 replicas)"))
		Expect(drainOut.String()).To(ContainSubstring(tns + "/held"))
		Expect(drainOut.String()).To(ContainSubstring("removed 2 MutatingAdmissionPolicies (and their bindings) that arm objects at creation"))
		left := &admissionv1.MutatingAdmissionPolicyList{}
		Expect(c.List(ctx, left, client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy})).To(Succeed())
		Expect(left.Items).To(BeEmpty(), "the uninstall hook removes the admission policies that arm objects at creation")
		Expect(<-uninstalled).To(Succeed(), uninstallOut.String())

		Eventually(hp.Gone(ctx, held), time.Minute).Should(BeTrue())
		Expect(hp.Finalizers(ctx, kept)()).To(BeEmpty())
		for _, obj := range []client.Object{p, &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: tns, Name: "cleanup"}}} {
			Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			Expect(obj.GetFinalizers()).To(BeEmpty(), "policy %s", obj.GetName())
		}
		runs := &v1alpha1.TeardownRunList{}
		Expect(c.List(ctx, runs)).To(Succeed())
		for _, r := range runs.Items {
			Expect(r.Finalizers).To(BeEmpty(), "run %s/%s", r.Namespace, r.Name)
		}
		Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: release}, &appsv1.Deployment{}))).To(BeTrue())
		crd := &apiextensionsv1.CustomResourceDefinition{}
		Expect(c.Get(ctx, client.ObjectKey{Name: "teardownruns.teardown.dev"}, crd)).To(Succeed(), "the CRDs are kept")

		By("deleting what is left: nothing holds it")
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tns}}
		Expect(c.Delete(ctx, nsObj)).To(Succeed())
		Eventually(hp.Gone(ctx, nsObj), 2*time.Minute, time.Second).Should(BeTrue())
	})
})

// holdPods puts a finalizer on the pods of the operator's Deployment, so that each stays
// terminating until the spec lets it go: the pods stand for the operator's process, which a
// kubelet would stop before the pod goes.
func holdPods(ctx context.Context, c client.Client, ns, finalizer string) client.MatchingLabels {
	GinkgoHelper()
	selector := client.MatchingLabels{"app.kubernetes.io/name": "teardown-operator"}
	pods := &corev1.PodList{}
	Expect(c.List(ctx, pods, client.InNamespace(ns), selector)).To(Succeed())
	Expect(pods.Items).To(HaveLen(2))
	for i := range pods.Items {
		patch := client.MergeFrom(pods.Items[i].DeepCopy())
		pods.Items[i].Finalizers = append(pods.Items[i].Finalizers, finalizer)
		Expect(c.Patch(ctx, &pods.Items[i], patch)).To(Succeed())
	}
	return selector
}

// releasePods removes holdPods' finalizer.
func releasePods(ctx context.Context, c client.Client, ns string, selector client.MatchingLabels, finalizer string) {
	GinkgoHelper()
	pods := &corev1.PodList{}
	Expect(c.List(ctx, pods, client.InNamespace(ns), selector)).To(Succeed())
	for i := range pods.Items {
		patch := client.MergeFrom(pods.Items[i].DeepCopy())
		pods.Items[i].Finalizers = slices.DeleteFunc(pods.Items[i].Finalizers, func(f string) bool { return f == finalizer })
		Expect(c.Patch(ctx, &pods.Items[i], patch)).To(Succeed())
	}
}

// serviceAccountKubeconfig writes a kubeconfig for the admin kubeconfig's cluster that
// authenticates with a token of the ServiceAccount.
func serviceAccountKubeconfig(ctx context.Context, cs kubernetes.Interface, admin, ns, sa, dir string) string {
	GinkgoHelper()
	expiry := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.LoadFromFile(admin)
	Expect(err).NotTo(HaveOccurred())
	current := cfg.Contexts[cfg.CurrentContext]
	out := clientcmdapi.NewConfig()
	out.Clusters["cluster"] = cfg.Clusters[current.Cluster]
	out.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	out.Contexts["sa"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "sa", Namespace: ns}
	out.CurrentContext = "sa"
	path := filepath.Join(dir, "sa.kubeconfig")
	Expect(clientcmd.WriteToFile(*out, path)).To(Succeed())
	return path
}

// stopProcess stops a process the spec started, if it still runs.
func stopProcess(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil && cmd.ProcessState == nil {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
}
