package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// Kubernetes' unsafe deletion of an object that cannot be decoded (KEP-3926) removes it from etcd
// whatever its finalizers: the operator cannot hold it. docs/operating.md says what it does.
var _ = Describe("An object deleted unsafely mid pipeline (KEP-3926)", func() {
	It("finishes its pipeline from the run's snapshot, and goes on with the other objects", func(ctx SpecContext) {
		srv, flags := steadyServer()
		op := startOperator(flags...)
		DeferCleanup(func() { op.stop() })
		op.waitLeading(time.Minute)
		ns := "unsafe-delete"
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		post := func(name string) v1alpha1.Step {
			return v1alpha1.Step{Name: name, HTTP: &v1alpha1.HTTPStep{Method: "POST", URL: srv.srv.URL + "/" + ns + "/" + name + "/${object.metadata.name}"}}
		}
		Expect(k8s.Create(ctx, framework.NamespacedPolicy(ns, "u", post("before"), framework.WaitStep("settle", 8*time.Second), post("after")))).To(Succeed())
		corrupt := framework.ConfigMap(ns, "corrupt", map[string]string{"app": "u"})
		healthy := framework.ConfigMap(ns, "healthy", map[string]string{"app": "u"})
		for _, o := range []*corev1.ConfigMap{corrupt, healthy} {
			Expect(k8s.Create(ctx, o)).To(Succeed())
			Eventually(probeFinalizers(ctx, o), time.Minute).Should(ContainElement("teardownpolicy.teardown.dev/u"))
		}

		By("deleting one object: its pipeline waits in its second step")
		Expect(k8s.Delete(ctx, corrupt)).To(Succeed())
		Eventually(func() int { return len(srv.snapshot()["/"+ns+"/before/corrupt"]) }, 30*time.Second).Should(Equal(1))

		By("corrupting it in etcd, then deleting it unsafely")
		etcd := etcdClient()
		key := fmt.Sprintf("/registry/configmaps/%s/%s", ns, corrupt.Name)
		_, err := etcd.Put(ctx, key, "not a protobuf, not JSON")
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(corrupt), &corev1.ConfigMap{})).To(MatchError(ContainSubstring("corrupt object")))
		Expect(k8s.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))).To(MatchError(ContainSubstring("failed to read one or more configmaps")),
			"while it is corrupt, no list of its kind in its namespace works")
		Expect(k8s.Delete(ctx, corrupt, &client.DeleteOptions{Raw: &metav1.DeleteOptions{
			IgnoreStoreReadErrorWithClusterBreakingPotential: ptr.To(true)}})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(corrupt), &corev1.ConfigMap{}))
		}).Should(BeTrue())

		By("no watch tells the operator: its pipeline goes on from the run's snapshot and ends Succeeded")
		// The API server sends no event to its watchers for a corrupt write nor for the unsafe
		// DELETE that removes it: the operator's cache still holds the object as being deleted.
		var run v1alpha1.TeardownRun
		Eventually(func() v1alpha1.RunPhase {
			var runs v1alpha1.TeardownRunList
			_ = k8s.List(ctx, &runs, client.InNamespace(ns))
			for _, r := range runs.Items {
				if r.Spec.Target.Name == corrupt.Name {
					run = r
				}
			}
			return run.Status.Phase
		}, time.Minute, 200*time.Millisecond).Should(Equal(v1alpha1.RunSucceeded), "run %s: %s", run.Name, run.Status.Message)
		for _, s := range run.Status.Steps {
			Expect(s.Phase).To(Equal(v1alpha1.StepSucceeded), "step %s", s.Name)
		}
		Expect(srv.snapshot()["/"+ns+"/after/corrupt"]).To(HaveLen(1), "the last step ran once, with the object's name from the snapshot")

		By("the other object of the same kind is still torn down")
		Expect(k8s.Delete(ctx, healthy)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(healthy), healthy)) }, time.Minute).Should(BeTrue())
		Expect(srv.snapshot()["/"+ns+"/after/healthy"]).To(HaveLen(1))
	})
})

// etcdClient connects to the suite's cluster's etcd, as its API server does.
func etcdClient() *clientv3.Client {
	GinkgoHelper()
	var endpoint string
	for _, a := range controlPlane("kube-apiserver").argv {
		if v, ok := strings.CutPrefix(a, "--etcd-servers="); ok {
			endpoint = v
		}
	}
	Expect(endpoint).NotTo(BeEmpty(), "no --etcd-servers in the API server's command line")
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(c.Close)
	return c
}

// probeFinalizers reads an object's finalizers.
func probeFinalizers(ctx context.Context, o client.Object) func() []string {
	return func() []string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return nil
		}
		return o.GetFinalizers()
	}
}
