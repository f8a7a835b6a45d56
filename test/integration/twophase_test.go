package integration

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli"
)

// racingController stands for the controller of a kind that acts the moment deletion starts
// (ACK, Strimzi, Zalando): it ignores other finalizers and destroys the external resource as soon
// as it sees a deletionTimestamp. It records when it did, then calls onDeletion (nil: nothing),
// say to remove its own finalizer.
type racingController struct {
	mu        sync.Mutex
	destroyed map[string]time.Time
}

func startRacingController(ctx context.Context, ns string, gvk schema.GroupVersionKind, onDeletion func(context.Context, client.ObjectKey)) *racingController {
	GinkgoHelper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	w, err := wc.Watch(ctx, list, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	rc := &racingController{destroyed: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type == watch.Error || u.GetDeletionTimestamp() == nil && ev.Type != watch.Deleted {
				continue
			}
			rc.mu.Lock()
			_, done := rc.destroyed[u.GetName()]
			if !done {
				rc.destroyed[u.GetName()] = time.Now()
			}
			rc.mu.Unlock()
			if !done && onDeletion != nil && ev.Type != watch.Deleted {
				onDeletion(ctx, client.ObjectKeyFromObject(u))
			}
		}
	}()
	return rc
}

// destroyedAt is when the controller saw the object being deleted; zero if it has not.
func (rc *racingController) destroyedAt(name string) time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.destroyed[name]
}

// twoPhasePolicy is a DeleteRequest policy: a backup over http, then a wait.
func twoPhasePolicy(ns, name string, settle time.Duration) *v1alpha1.TeardownPolicy {
	p := namespacedPolicy(ns, name,
		httpStep("backup", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/backup/${object.metadata.name}")}),
		waitStep("settle", settle))
	p.Spec.Trigger = v1alpha1.TriggerDeleteRequest
	return p
}

// requestDelete annotates obj teardown.dev/delete-requested, as the suite's client: "<its user
// name>: <why>".
func requestDelete(ctx context.Context, obj client.Object, value string) {
	GinkgoHelper()
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[v1alpha1.AnnotationDeleteRequested] = asRequest(value)
	obj.SetAnnotations(ann)
	Expect(k8s.Patch(ctx, obj, patch)).To(Succeed())
}

// withdrawDelete removes the delete request from obj.
func withdrawDelete(ctx context.Context, obj client.Object) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	ann := obj.GetAnnotations()
	delete(ann, v1alpha1.AnnotationDeleteRequested)
	obj.SetAnnotations(ann)
	Expect(k8s.Patch(ctx, obj, patch)).To(Succeed())
}

// alive reads obj and reports that it exists and is not being deleted.
func alive(ctx context.Context, obj client.Object) {
	GinkgoHelper()
	live := &corev1.ConfigMap{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), live)).To(Succeed())
	Expect(live.DeletionTimestamp).To(BeNil(), "the object must not be terminating")
}

var _ = Describe("Two-phase delete (trigger DeleteRequest)", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		installDeletionGuardPolicy(ctx)
		restartOperatorAsServiceAccount(ctx)
	})

	It("refuses a plain delete, runs the steps with the object alive on request, then deletes it", func() {
		ns := newNamespace(ctx)
		racer := startRacingController(ctx, ns, corev1.SchemeGroupVersion.WithKind("ConfigMap"), nil)
		var backedUp atomic.Int64 // when the backup was taken, in unix nanoseconds
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			backedUp.CompareAndSwap(0, time.Now().UnixNano())
			w.WriteHeader(http.StatusOK)
		})
		p := twoPhasePolicy(ns, "export", 2*time.Second)
		cm := protect(ctx, p, "orders")
		Eventually(func() map[string]string { return labelsOf(ctx, cm) }, 10*time.Second).
			Should(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways))

		By("a plain delete is refused, saying how to request it")
		Eventually(func() error { return k8s.Delete(ctx, cm, client.DryRunAll) }, 10*time.Second).
			Should(MatchError(ContainSubstring("kubectl teardown delete configmap/orders -n " + ns + " --reason")))
		err := k8s.Delete(ctx, cm)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(v1alpha1.AnnotationDeleteRequested))
		alive(ctx, cm)

		By("a request runs the steps while the object is alive")
		requestDelete(ctx, cm, "alice: decommissioned")
		Eventually(stepPhase(ctx, cm, "settle"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Expect(stepPhase(ctx, cm, "backup")()).To(Equal(v1alpha1.StepSucceeded))
		alive(ctx, cm)
		Expect(racer.destroyedAt(cm.Name).IsZero()).To(BeTrue(), "the object's controller saw a deletion before the steps succeeded")
		run := runFor(ctx, cm)()
		Expect(run.Spec.Trigger).To(Equal(v1alpha1.TriggerDeleteRequest))
		Expect(run.Status.RequestedBy).To(ContainSubstring(`"alice: decommissioned"`))

		By("once the steps succeeded the operator deletes it, and only then does its controller act")
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		Eventually(func() time.Time { return racer.destroyedAt(cm.Name) }, 5*time.Second).ShouldNot(BeZero())
		done := runFor(ctx, cm)()
		Expect(done.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		settled := done.Status.Step("settle").CompletionTime.Time
		Expect(racer.destroyedAt(cm.Name)).To(BeTemporally(">=", settled.Truncate(time.Second)))
		Expect(time.Unix(0, backedUp.Load())).To(BeTemporally("<", racer.destroyedAt(cm.Name)))
		Expect(eventReasons(ctx, done)()).To(ContainElements(v1alpha1.ReasonDeleteRequested, v1alpha1.ReasonSucceeded))
	})

	It("leaves the object untouched when the pipeline fails, resumes on retry, and deletes it then", func() {
		ns := newNamespace(ctx)
		var fixed atomic.Bool
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			if !fixed.Load() {
				http.Error(w, "backup service down", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		p := twoPhasePolicy(ns, "export", 0)
		p.Spec.Steps[0].Retry = &v1alpha1.RetryPolicy{Limit: 0}
		cm := protect(ctx, p, "orders")
		requestDelete(ctx, cm, "bob: cleanup")
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Consistently(func(g Gomega) {
			live := &corev1.ConfigMap{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), live)).To(Succeed())
			g.Expect(live.DeletionTimestamp).To(BeNil())
			g.Expect(live.Labels).To(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways))
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(eventReasons(ctx, cm)()).To(ContainElement(v1alpha1.ReasonFailed))

		fixed.Store(true)
		annotateRun(ctx, cm, v1alpha1.AnnotationRetry, "bob: backup service is back")
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		Expect(runFor(ctx, cm)().Status.Retries).To(Equal(int32(1)))
	})

	It("cancels the run when the request is withdrawn, and starts over on a new request", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		p := twoPhasePolicy(ns, "export", time.Hour)
		cm := protect(ctx, p, "orders")
		requestDelete(ctx, cm, "carol: by mistake")
		Eventually(stepPhase(ctx, cm, "settle"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))

		withdrawDelete(ctx, cm)
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunCancelled))
		run := runFor(ctx, cm)()
		Expect(run.Status.CancelledBy).To(ContainSubstring("withdrawn"))
		Expect(run.Status.Step("settle").Phase).To(Equal(v1alpha1.StepSkipped))
		alive(ctx, cm)
		Expect(labelsOf(ctx, cm)).To(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways))
		Expect(eventReasons(ctx, cm)()).To(ContainElement(v1alpha1.ReasonCancelled))
		backups := api.calls(ns, "POST /"+ns+"/backup/orders")()
		Expect(backups).To(Equal(1))

		By("a new request starts over from the first step, with a fresh Idempotency-Key")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
		requestDelete(ctx, cm, "carol: for real this time")
		Eventually(api.calls(ns, "POST /"+ns+"/backup/orders"), 10*time.Second).Should(Equal(2))
		reqs := api.requests(ns)
		Expect(reqs[0].Header.Get("Idempotency-Key")).NotTo(Equal(reqs[1].Header.Get("Idempotency-Key")))
		Eventually(func() string { return runFor(ctx, cm)().Status.RequestedBy }, 10*time.Second).
			Should(ContainSubstring("for real this time"))
		Expect(runPhase(ctx, cm)()).To(Equal(v1alpha1.RunRunning))
		alive(ctx, cm)
	})

	It("lifts the veto when someone breaks glass, so that a plain delete releases the object without its steps", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		p := twoPhasePolicy(ns, "export", time.Hour)
		cm := protect(ctx, p, "orders")
		requestDelete(ctx, cm, "dave: go")
		Eventually(stepPhase(ctx, cm, "settle"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		update(ctx, cm, func(c *corev1.ConfigMap) {
			c.Annotations[v1alpha1.AnnotationAbandon] = asRequest("dave: the backup service is gone for good")
		})
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunCancelled))
		Eventually(func() map[string]string { return labelsOf(ctx, cm) }, 10*time.Second).ShouldNot(HaveKey(v1alpha1.LabelDeletionGuard))
		alive(ctx, cm)
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		Expect(runFor(ctx, cm)().Status.Phase).To(Equal(v1alpha1.RunAbandoned))
	})

	It("kubectl teardown delete requests the deletion, waits until the object is gone, and withdraws a request", func() {
		cliKubeconfig = writeKubeconfig(cfg)
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		p := twoPhasePolicy(ns, "export", time.Second)
		cm := protect(ctx, p, "orders")
		stdout, stderr, code := kubectlTeardown("plan", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(ContainSubstring("trigger DeleteRequest: a plain delete is refused"))
		Expect(stdout).To(ContainSubstring("delete: refused: "))
		stdout, stderr, code = kubectlTeardown("delete", "configmap/orders", "-n", ns, "--reason", "erin: retired")
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(ContainSubstring(`annotated teardown.dev/delete-requested="`+asRequest("erin: retired")+`"`), "the plugin names who asks")
		Expect(stdout).To(MatchRegexp(`teardownrun %s/orders-\w+ is Succeeded`, ns))
		Expect(stdout).To(ContainSubstring("deleted"))
		Expect(gone(ctx, cm)()).To(BeTrue())

		By("--withdraw cancels; --wait=false returns once requested")
		slow := protect(ctx, twoPhasePolicy(ns, "slow", time.Hour), "slow")
		_, stderr, code = kubectlTeardown("delete", "configmap/slow", "-n", ns, "--reason", "erin: maybe", "--wait=false")
		Expect(code).To(Equal(0), stderr)
		Eventually(stepPhase(ctx, slow, "settle"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		stdout, stderr, code = kubectlTeardown("delete", "configmap/slow", "-n", ns, "--withdraw")
		Expect(code).To(Equal(0), stderr)
		Expect(stdout).To(ContainSubstring("delete request withdrawn"))
		Eventually(runPhase(ctx, slow), 10*time.Second).Should(Equal(v1alpha1.RunCancelled))
		alive(ctx, slow)

		By("an object no two-phase policy protects is refused, naming why")
		plain := configMap(ns, "plain", nil)
		Expect(k8s.Create(ctx, plain)).To(Succeed())
		_, stderr, code = kubectlTeardown("delete", "configmap/plain", "-n", ns, "--reason", "erin")
		Expect(code).To(Equal(2))
		expectOneLineError(stderr, "not protected by a policy with trigger DeleteRequest")
		_, stderr, code = kubectlTeardown("delete", "configmap/orders", "-n", ns)
		Expect(code).To(Equal(2))
		expectOneLineError(stderr, "--reason is required")
	})
})

var _ = Describe("Two-phase delete requested again with kubectl teardown delete", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() { installDeletionGuardPolicy(ctx) })

	// Issue: after a withdrawal, a new request exited 1 with the cancelled run's "is Cancelled"
	// while the operator started that run over and deleted the object; its requestedBy did not
	// name the field manager.
	It("reports that the new request starts the cancelled run over, follows it to the deletion, and records who asked", func() {
		cliKubeconfig = writeKubeconfig(cfg)
		ns := newNamespace(ctx)
		var up atomic.Bool
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			if !up.Load() {
				http.Error(w, "backup service down", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		p := twoPhasePolicy(ns, "export", 0)
		p.Spec.Steps[0].Retry = &v1alpha1.RetryPolicy{Limit: 100, Backoff: dur(time.Second)}
		cm := protect(ctx, p, "orders")
		_, stderr, code := kubectlTeardown("delete", "configmap/orders", "-n", ns, "--reason", "hank: first try", "--wait=false")
		Expect(code).To(Equal(0), stderr)
		Eventually(func(g Gomega) {
			run := runFor(ctx, cm)()
			g.Expect(run).NotTo(BeNil())
			g.Expect(run.Status.Step("backup")).NotTo(BeNil())
			g.Expect(run.Status.Step("backup").Attempts).To(BeNumerically(">=", 1))
		}, 10*time.Second).Should(Succeed())
		_, stderr, code = kubectlTeardown("delete", "configmap/orders", "-n", ns, "--withdraw")
		Expect(code).To(Equal(0), stderr)
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunCancelled))

		up.Store(true)
		stdout, stderr, code := kubectlTeardown("delete", "configmap/orders", "-n", ns, "--reason", "hank: for real")
		Expect(code).To(Equal(0), "stdout: %s\nstderr: %s", stdout, stderr)
		Expect(stdout).To(MatchRegexp(`teardownrun %s/orders-\w+ was cancelled \(.*withdrawn.*\): this request starts it over from its first step`, ns))
		Expect(stdout).To(MatchRegexp(`teardownrun %s/orders-\w+ started over from step backup \(retry 1\)`, ns))
		Expect(stdout).To(ContainSubstring("ConfigMap " + ns + "/orders deleted"))
		Expect(gone(ctx, cm)()).To(BeTrue())
		run := runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.RequestedBy).To(ContainSubstring(`"hank: for real"`))
		Expect(run.Status.RequestedBy).To(HavePrefix(adminName+" (annotation teardown.dev/delete-requested="), "who asked, as admission authenticated them")
	})
})

var _ = Describe("kubectl teardown delete while the operator is down", Serial, func() {
	ctx := context.Background()

	BeforeEach(func() { installDeletionGuardPolicy(ctx) })

	It("records the request, says nothing acts on it, and exits 1 at once rather than wait out its timeout", func() {
		cliKubeconfig = writeKubeconfig(cfg)
		ns := newNamespace(ctx)
		cm := protect(ctx, twoPhasePolicy(ns, "export", 0), "orders")
		stopOperator()
		DeferCleanup(func() { stopOperator = startOperator() })
		setLease(ctx, "teardown-operator-7d9c-x2x4q_1", time.Now().Add(-time.Hour), 15*time.Second)

		start := time.Now()
		out, errOut, code := kubectlTeardown("delete", "configmap/orders", "-n", ns, "--reason", "ivan: retired", "--timeout", "1m")
		Expect(code).To(Equal(cli.ExitFindings), out)
		Expect(time.Since(start)).To(BeNumerically("<", 20*time.Second), "it must not wait out --timeout")
		expectOneLineError(errOut, "nothing is deleted yet: operator: NOT RUNNING")
		Expect(annotationsOf(ctx, cm)).To(HaveKeyWithValue(v1alpha1.AnnotationDeleteRequested, asRequest("ivan: retired")))
		alive(ctx, cm)

		_, errOut, code = kubectlTeardown("delete", "configmap/orders", "-n", ns, "--reason", "ivan: retired", "--wait=false")
		Expect(code).To(Equal(cli.ExitOK), errOut)
		Expect(errOut).To(HavePrefix("warning: nothing is deleted yet"))
	})
})

// The admission policy exempts no identity: the operator lifts its own veto before it deletes, so
// a two-phase delete finishes however the operator is installed. Issue: with the operator's
// ServiceAccount exempt by name, an operator run outside the cluster (an administrator's
// kubeconfig) or installed in another namespace had its own DELETE refused for ever.
var _ = Describe("Two-phase delete, whoever the operator runs as", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() { installDeletionGuardPolicy(ctx) })

	// requestAndExpectDeleted protects a ConfigMap with a two-phase policy, checks that a plain
	// delete by the suite's administrator is refused, requests the deletion and waits until the
	// operator deleted it.
	requestAndExpectDeleted := func(ns string) {
		GinkgoHelper()
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		cm := protect(ctx, twoPhasePolicy(ns, "export", 0), "orders")
		Eventually(func() error { return k8s.Delete(ctx, cm, client.DryRunAll) }, 10*time.Second).
			Should(MatchError(ContainSubstring("request it with `kubectl teardown delete configmap/orders -n "+ns+" --reason")),
				"a cluster administrator is not exempt either")
		requestDelete(ctx, cm, "frank: retired")
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue(), "the operator's own DELETE must get through")
		run := runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(eventReasons(ctx, run)()).NotTo(ContainElement(v1alpha1.ReasonDeleteFailed))
	}

	It("deletes the object when the operator runs with an administrator's credentials, as outside the cluster", func() {
		requestAndExpectDeleted(newNamespace(ctx))
	})

	It("deletes the object when the operator runs as a ServiceAccount of another namespace and name", func() {
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform-ops"}}))).To(Succeed())
		restartOperatorAs(ctx, "platform-ops", "teardown")
		requestAndExpectDeleted(newNamespace(ctx))
	})

	It("still refuses the operator's DELETE while another policy's deletion guard holds, and deletes once it does not", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		guard := namespacedPolicy(ns, "in-use", waitStep("settle", 0))
		guard.Spec.Selector.MatchLabels = map[string]string{"app": "export"} // the two-phase policy's objects
		guard.Spec.DeletionGuard = &v1alpha1.DeletionGuard{Deny: "has(object.data) && 'in-use' in object.data", Message: "still in use"}
		Expect(k8s.Create(ctx, guard)).To(Succeed())
		expectReady(ctx, guard, metav1.ConditionTrue)
		cm := protect(ctx, twoPhasePolicy(ns, "export", 0), "orders")
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Data = map[string]string{"in-use": "yes"} })
		Eventually(func() string { return annotationsOf(ctx, cm)[v1alpha1.AnnotationDeletionGuardMessage] }, 10*time.Second).
			Should(ContainSubstring("TeardownPolicy/" + ns + "/in-use: still in use"))
		requestDelete(ctx, cm, "grace: retired")
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunSucceeded))
		Eventually(eventReasons(ctx, runFor(ctx, cm)()), 10*time.Second).Should(ContainElement(v1alpha1.ReasonDeleteFailed))
		alive(ctx, cm)
		Expect(labelsOf(ctx, cm)).To(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDeny), "only the other policy's guard is left")
		Expect(annotationsOf(ctx, cm)).To(HaveKeyWithValue(v1alpha1.AnnotationDeletedByRun, runFor(ctx, cm)().Name))

		update(ctx, cm, func(c *corev1.ConfigMap) { c.Data = nil })
		Eventually(gone(ctx, cm), 30*time.Second).Should(BeTrue())
	})
})
