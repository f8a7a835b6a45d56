package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

var _ = Describe("Safety", func() {
	ctx := context.Background()

	It("never drops another controller's finalizers while both write the same objects", func() {
		ns := newNamespace(ctx)
		// Few objects and several writers, so that the operator's writes race the others'.
		const n, writers = 5, 4
		var cms []*corev1.ConfigMap
		for i := range n {
			cm := configMap(ns, fmt.Sprintf("cm-%d", i), map[string]string{"app": "shared"})
			Expect(k8s.Create(ctx, cm)).To(Succeed())
			cms = append(cms, cm)
		}

		// Each writer adds finalizers of its own with fresh names, and removes them, with ordinary
		// updates guarded by resourceVersion, as most controllers do. It keeps its own record of
		// what it wrote and never re-adds a finalizer it believes is there, so a finalizer the
		// operator drops stays dropped and shows at the end.
		var mu sync.Mutex
		want := map[string][]string{} // "<object>/<writer>" -> its finalizers on that object
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for seq := 0; ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					cm := &corev1.ConfigMap{}
					name := cms[rng.IntN(n)].Name
					if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
						continue
					}
					key := fmt.Sprintf("%s/%d", name, w)
					mu.Lock()
					mine := slices.Clone(want[key])
					mu.Unlock()
					fs := slices.Clone(cm.Finalizers)
					if len(mine) >= 3 || len(mine) > 0 && rng.IntN(2) == 0 {
						gone := mine[0]
						mine = mine[1:]
						fs = slices.DeleteFunc(fs, func(f string) bool { return f == gone })
					} else {
						f := fmt.Sprintf("other.example.com/w%d-%d", w, seq)
						mine = append(mine, f)
						fs = append(fs, f)
					}
					cm.Finalizers = fs
					err := k8s.Update(ctx, cm)
					if err == nil {
						mu.Lock()
						want[key] = mine
						mu.Unlock()
					} else if !apierrors.IsConflict(err) {
						Fail("other writer: " + err.Error())
					}
				}
			}()
		}

		p := namespacedPolicy(ns, "shared", waitStep("a", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		By("suspending and resuming the policy repeatedly while the others keep writing")
		for i := range 12 {
			time.Sleep(300 * time.Millisecond)
			update(ctx, p, func(p *v1alpha1.TeardownPolicy) { p.Spec.Suspend = i%2 == 0 })
		}
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()

		for _, cm := range cms {
			Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)), cm.Name)
			fs := finalizers(ctx, cm)()
			var others []string
			for _, f := range fs {
				if f != finalizerOf(p) {
					others = append(others, f)
				}
			}
			mu.Lock()
			var expected []string
			for w := range writers {
				expected = append(expected, want[fmt.Sprintf("%s/%d", cm.Name, w)]...)
			}
			mu.Unlock()
			Expect(others).To(ConsistOf(expected), "%s: the other writers' finalizers changed behind their backs", cm.Name)
			Expect(fs).To(HaveLen(len(slices.Compact(slices.Sorted(slices.Values(fs))))), "duplicate finalizers on %s", cm.Name)
		}
		for _, cm := range cms {
			update(ctx, cm, func(c *corev1.ConfigMap) {
				c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f != finalizerOf(p) })
			})
		}
	})

	It("refuses a hand-made run that names another controller's finalizer, and releases nothing", func() {
		ns := newNamespace(ctx)
		cm := configMap(ns, "held", nil)
		cm.Finalizers = []string{"example.com/hold"}
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		forged := &v1alpha1.TeardownRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged"},
			Spec: v1alpha1.TeardownRunSpec{
				PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: ns, Name: "p", UID: "x"},
				Target:    v1alpha1.TargetObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "held", UID: cm.UID},
				Finalizer: "example.com/hold",
				Pipeline:  v1alpha1.Pipeline{Steps: []v1alpha1.Step{waitStep("a", 0)}, FailurePolicy: v1alpha1.FailurePolicyRelease},
			},
		}
		Expect(k8s.Create(ctx, forged)).To(Succeed())
		Eventually(func() string {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(forged), forged)
			return forged.Status.Message
		}, 10*time.Second).Should(ContainSubstring("rejected"))
		Expect(forged.Status.Phase).To(Equal(v1alpha1.RunFailed))
		Consistently(finalizers(ctx, cm), 2*time.Second).Should(Equal([]string{"example.com/hold"}))
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Finalizers = nil })
	})

	It("never adds a finalizer to an object that is already being deleted", func() {
		ns := newNamespace(ctx)
		cm := configMap(ns, "leaving", map[string]string{"app": "late"})
		cm.Finalizers = []string{"other.example.com/hold"}
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		p := namespacedPolicy(ns, "late", waitStep("a", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		Consistently(finalizers(ctx, cm), 2*time.Second).Should(Equal([]string{"other.example.com/hold"}))
		Expect(runFor(ctx, cm)()).To(BeNil())
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Finalizers = nil })
		Eventually(gone(ctx, cm), 5*time.Second).Should(BeTrue())
	})

	It("resumes at the same step after an operator restart, without repeating finished steps", Serial, func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "restart", waitStep("first", time.Second), waitStep("second", 4*time.Second), waitStep("third", time.Second))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(stepPhase(ctx, cm, "second"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		before := runFor(ctx, cm)()
		first, second := before.Status.Step("first").DeepCopy(), before.Status.Step("second").DeepCopy()
		// Events are sent after the status that records them, and a stopping operator drops the
		// ones still queued: stop it once the second step's start has been told.
		Eventually(func() int { return countReason(eventReasons(ctx, cm)(), v1alpha1.ReasonStepStarted) }, 10*time.Second).Should(Equal(2))

		By("stopping the operator mid-step")
		stopOperator()
		stoppedAt := time.Now()
		time.Sleep(2 * time.Second)
		Expect(gone(ctx, cm)()).To(BeFalse())
		Expect(runFor(ctx, cm)().Status).To(Equal(before.Status), "nothing may move while the operator is down")

		By("starting a new operator")
		stopOperator = startOperator()
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		after := runFor(ctx, cm)()
		Expect(after.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(after.Status.Step("first").CompletionTime).To(Equal(first.CompletionTime), "a finished step must not run again")
		Expect(after.Status.Step("first").Attempts).To(Equal(first.Attempts))
		Expect(after.Status.Step("second").StartTime).To(Equal(second.StartTime), "the running step resumes; it does not start over")
		Expect(after.Status.Step("second").Attempts).To(Equal(int32(1)))
		// The 4s wait counts from the step's recorded start, across the restart.
		elapsed := after.Status.Step("second").CompletionTime.Sub(second.StartTime.Time)
		Expect(elapsed).To(BeNumerically(">=", 3*time.Second))
		Expect(elapsed).To(BeNumerically("<", 4*time.Second+time.Since(stoppedAt)))
		Eventually(func() int { return countReason(eventReasons(ctx, after)(), v1alpha1.ReasonStepStarted) }, 5*time.Second).
			Should(Equal(3), "each step starts exactly once")
		Consistently(func() int { return countReason(eventReasons(ctx, after)(), v1alpha1.ReasonStepStarted) }, time.Second).
			Should(Equal(3), "each step starts exactly once")
	})

	It("in a namespace being deleted, keeps a deleted policy's finalizers but adds none, and runs go to the run namespace", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "keep", waitStep("a", 0))
		p.Spec.RunHistory = v1alpha1.RunHistoryAll // where the run goes is what this spec is about
		selected := protect(ctx, p, "selected")
		other := configMap(ns, "other", map[string]string{"app": "other"})
		Expect(k8s.Create(ctx, other)).To(Succeed())

		By("deleting the namespace (envtest runs no namespace controller, so it stays Terminating)")
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(func() string {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(p), p)
			for _, c := range p.Status.Conditions {
				if c.Type == v1alpha1.ConditionReady {
					return c.Message
				}
			}
			return ""
		}, 10*time.Second).Should(ContainSubstring("namespace is being deleted"))
		update(ctx, other, func(c *corev1.ConfigMap) { c.Annotations = map[string]string{"touched": "yes"} })
		Consistently(finalizers(ctx, other), 2*time.Second).Should(BeEmpty(), "an unselected object must not gain the finalizer")
		Expect(finalizers(ctx, selected)()).To(ContainElement(finalizerOf(p)), "the namespace's objects keep it: they are about to be deleted")
		Expect(gone(ctx, p)()).To(BeFalse())

		By("deleting the selected object: its run cannot be created in the namespace")
		Expect(k8s.Delete(ctx, selected)).To(Succeed())
		Eventually(gone(ctx, selected), 10*time.Second).Should(BeTrue())
		run := runFor(ctx, selected)()
		Expect(run.Namespace).To(Equal(runNamespace))
		Expect(run.Labels[v1alpha1.LabelTargetNamespace]).To(Equal(ns))
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Eventually(gone(ctx, p), 10*time.Second).Should(BeTrue(), "the policy goes once its targets are done")
	})
})

// countReason counts the events of a reason.
func countReason(reasons []string, reason string) int {
	n := 0
	for _, r := range reasons {
		if r == reason {
			n++
		}
	}
	return n
}

var _ = Describe("Releasing a finalizer", func() {
	ctx := context.Background()

	It("leaves a new object of the same name alone when the run of the old one ends", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "reborn", waitStep("hold", 3*time.Second))
		old := protect(ctx, p, "reborn")
		Expect(k8s.Delete(ctx, old)).To(Succeed())
		Eventually(runPhase(ctx, old), 5*time.Second).Should(Equal(v1alpha1.RunRunning))
		By("someone lets the old object go by hand, and a new one of that name is made and protected")
		update(ctx, old, func(c *corev1.ConfigMap) { c.Finalizers = nil })
		Eventually(gone(ctx, old), 5*time.Second).Should(BeTrue())
		reborn := configMap(ns, "reborn", map[string]string{"app": p.Name})
		Expect(k8s.Create(ctx, reborn)).To(Succeed())
		Eventually(finalizers(ctx, reborn), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		By("the old run ends; the new object keeps its finalizer")
		Eventually(func() v1alpha1.RunPhase {
			var runs v1alpha1.TeardownRunList
			Expect(k8s.List(ctx, &runs, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelTargetUID: string(old.UID)})).To(Succeed())
			if len(runs.Items) != 1 {
				return ""
			}
			return runs.Items[0].Status.Phase
		}, 15*time.Second).Should(BeElementOf(v1alpha1.RunSucceeded, v1alpha1.RunAbandoned))
		Consistently(finalizers(ctx, reborn), 2*time.Second).Should(ContainElement(finalizerOf(p)))
	})

	// The engine removes a finalizer from an object of a built-in kind with a strategic merge
	// patch that carries the object's UID (engine/finalizer_writer.go, strategicOut): this is the
	// API server's side of that contract.
	It("by strategic merge patch removes that finalizer alone, only from the object of that UID, and is refused for a custom kind", func() {
		ns := newNamespace(ctx)
		cm := configMap(ns, "held", nil)
		cm.Finalizers = []string{"a.example.com/first", "ours.example.com/f", "b.example.com/last"}
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		smp := func(uid types.UID) client.Patch {
			body := fmt.Sprintf(`{"metadata":{"uid":%q,"$deleteFromPrimitiveList/finalizers":["ours.example.com/f"]}}`, uid)
			return client.RawPatch(types.StrategicMergePatchType, []byte(body))
		}
		err := k8s.Patch(ctx, cm.DeepCopy(), smp("00000000-0000-4000-8000-000000000000"))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "another UID is refused: %v", err)
		Expect(finalizers(ctx, cm)()).To(Equal(cm.Finalizers))
		Expect(k8s.Patch(ctx, cm.DeepCopy(), smp(cm.UID))).To(Succeed())
		Expect(finalizers(ctx, cm)()).To(Equal([]string{"a.example.com/first", "b.example.com/last"}))
		Expect(k8s.Patch(ctx, cm.DeepCopy(), smp(cm.UID))).To(Succeed(), "removing it again changes nothing")

		p := namespacedPolicy(ns, "custom", waitStep("a", 0))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		err = k8s.Patch(ctx, p.DeepCopy(), smp(p.UID))
		Expect(apierrors.IsUnsupportedMediaType(err)).To(BeTrue(), "a custom kind takes no strategic merge patch: %v", err)
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Finalizers = nil })
	})
})
