package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
)

var _ = Describe("Run history", func() {
	ctx := context.Background()

	It("records a pipeline that ends at once in one write with runHistory All, and none at the default", func() {
		ns := newNamespace(ctx)
		instant := []v1alpha1.Step{waitStep("first", 0),
			{Name: "skipped", When: "object.metadata.name == 'someone-else'", Wait: &v1alpha1.WaitStep{Duration: dur(time.Hour)}}}
		always := namespacedPolicy(ns, "always", instant...)
		always.Spec.RunHistory = v1alpha1.RunHistoryAll
		cm := protect(ctx, always, "recorded")
		waitPastOperatorStart() // the first pass is to start from the cache (below)
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		run := runFor(ctx, cm)()
		Expect(run).NotTo(BeNil())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(phasesOf(run)).To(Equal([]v1alpha1.StepPhase{v1alpha1.StepSucceeded, v1alpha1.StepSkipped}))
		// Without a status subresource every write of the status counts a generation.
		Expect(run.Generation).To(Equal(int64(1)), "created with its final status, never written again")
		Expect(run.Finalizers).To(BeEmpty(), "a run recorded finished holds nothing")
		for _, mf := range run.ManagedFields {
			Expect(mf.Manager).To(Equal(engine.FieldManager))
		}
		By("the run is the record: no event on the object; the policy's one series counts such teardowns")
		Consistently(probe().EventNotes(ctx, cm), 2*time.Second).Should(BeEmpty())
		Expect(probe().EventNotes(ctx, run)()).To(BeEmpty())
		Eventually(func(g Gomega) {
			series := eventsOn(ctx, g, ns, always.UID)
			g.Expect(series).To(HaveLen(1))
			g.Expect(series[0]).To(MatchFields(IgnoreExtras, Fields{
				"Reason": Equal(v1alpha1.ReasonSucceeded), "Action": Equal("ReleasedAtOnce"), "Type": Equal(corev1.EventTypeNormal),
				"Note": Equal("Objects whose teardown succeeds at once are released in its first pass, each recorded by a TeardownRun (runHistory All); this series counts them. The first: ConfigMap " + ns + "/recorded"),
			}))
		}, 10*time.Second).Should(Succeed())
		By("its pipeline reads only the object's name: the object was not read, the run keeps what the cache knows of it")
		var snapshot corev1.ConfigMap
		Expect(json.Unmarshal(run.Spec.Object.Raw, &snapshot)).To(Succeed())
		Expect(snapshot.Kind).To(Equal("ConfigMap"))
		Expect(snapshot.UID).To(Equal(cm.UID))
		Expect(snapshot.Labels).To(Equal(cm.Labels))
		Expect(snapshot.DeletionTimestamp).NotTo(BeNil())
		Expect(snapshot.Data).To(BeEmpty(), "the metadata alone")

		By("the policy's status lists it, naming its run")
		Eventually(func(g Gomega) {
			var p v1alpha1.TeardownPolicy
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(always), &p)).To(Succeed())
			g.Expect(p.Status.Teardowns).To(Equal(v1alpha1.TeardownCounts{Succeeded: 1}))
			g.Expect(p.Status.RecentTeardowns).To(ConsistOf(MatchFields(IgnoreExtras, Fields{
				"Target":  MatchFields(IgnoreExtras, Fields{"Kind": Equal("ConfigMap"), "Namespace": Equal(ns), "Name": Equal("recorded"), "UID": Equal(cm.UID)}),
				"Outcome": Equal(v1alpha1.RunSucceeded), "Run": Equal(run.Namespace + "/" + run.Name), "Message": Equal("all steps done"),
			})))
		}, 10*time.Second).Should(Succeed())

		By("at the default, SkipImmediateSuccess: the same pipeline leaves no run; the policy's one event series counts such teardowns, its status lists them")
		onFailure := namespacedPolicy(ns, "onfailure", instant...)
		var quiet []*corev1.ConfigMap
		for _, name := range []string{"unrecorded-1", "unrecorded-2", "unrecorded-3"} {
			quiet = append(quiet, protect(ctx, onFailure, name))
		}
		for _, cm := range quiet {
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
			Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		}
		Eventually(func(g Gomega) {
			series := eventsOn(ctx, g, ns, onFailure.UID)
			g.Expect(series).To(HaveLen(1))
			g.Expect(series[0].Reason).To(Equal(v1alpha1.ReasonSucceeded))
			g.Expect(series[0].Note).To(Equal("Objects whose teardown succeeds at once are released without a TeardownRun (runHistory SkipImmediateSuccess); this series counts them. The first: ConfigMap " + ns + "/unrecorded-1"))
			g.Expect(series[0].Series).NotTo(BeNil(), "later teardowns count in the series")
		}, 10*time.Second).Should(Succeed())
		for _, cm := range quiet {
			Expect(runFor(ctx, cm)()).To(BeNil())
			Expect(probe().EventNotes(ctx, cm)()).To(BeEmpty())
		}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(onFailure), onFailure)).To(Succeed())
		Expect(onFailure.Spec.RunHistory).To(Equal(v1alpha1.RunHistorySkipImmediateSuccess), "the default, written by the API server")
		Eventually(func(g Gomega) {
			var p v1alpha1.TeardownPolicy
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(onFailure), &p)).To(Succeed())
			g.Expect(p.Status.Teardowns).To(Equal(v1alpha1.TeardownCounts{Succeeded: 3}))
			g.Expect(p.Status.RecentTeardowns).To(HaveLen(3))
			for i, name := range []string{"unrecorded-3", "unrecorded-2", "unrecorded-1"} { // newest first
				g.Expect(p.Status.RecentTeardowns[i]).To(MatchFields(IgnoreExtras, Fields{
					"Target":  MatchFields(IgnoreExtras, Fields{"Name": Equal(name), "UID": Equal(quiet[2-i].UID)}),
					"Outcome": Equal(v1alpha1.RunSucceeded), "Run": BeEmpty(),
				}))
			}
		}, 15*time.Second).Should(Succeed())

		By("kubectl get -o wide and kubectl teardown status --policy show them")
		cliKubeconfig = writeKubeconfig(cfg)
		out, errOut, code := kubectlTeardown("status", "--policy", "onfailure", "-n", ns)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("TeardownPolicy/" + ns + "/onfailure: teardowns ended 3 times: 3 succeeded, 0 failed, 0 abandoned, 0 cancelled."))
		Expect(out).To(MatchRegexp(`(?m)^\S+Z\s+ConfigMap ` + ns + `/unrecorded-3\s+Succeeded\s+\(not kept\)\s+all steps done$`))
		Expect(out).To(ContainSubstring("No TeardownRun of TeardownPolicy/" + ns + "/onfailure is kept."))
		wide := kubectl("get", "teardownpolicy", "onfailure", "-n", ns, "-o", "wide")
		Expect(wide).To(MatchRegexp(`SUCCEEDED\s+FAILED\s+LAST-TEARDOWN`))
		Expect(wide).To(MatchRegexp(`onfailure\s+ConfigMap\s+True\s+0\s+0\s+0\s+3\s+0\s+\d+s`))
	})

	It("sends a run's events as first events, on the run and on the object related to the run", func() {
		ns := newNamespace(ctx)
		pol := namespacedPolicy(ns, "held", waitStep("hold", time.Second))
		cm := protect(ctx, pol, "held")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		run := runFor(ctx, cm)()
		Expect(run).NotTo(BeNil())
		reasons := []string{v1alpha1.ReasonRunCreated, v1alpha1.ReasonStepStarted, v1alpha1.ReasonStepSucceeded, v1alpha1.ReasonSucceeded}
		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			onRun, onObject := map[string]eventsv1.Event{}, map[string]eventsv1.Event{}
			for _, e := range list.Items {
				switch e.Regarding.UID {
				case run.UID:
					onRun[e.Reason] = e
				case cm.UID:
					onObject[e.Reason] = e
				}
			}
			for _, reason := range reasons {
				g.Expect(onRun).To(HaveKeyWithValue(reason, MatchFields(IgnoreExtras, Fields{
					"ReportingController": Equal("teardown-operator"), "Series": BeNil(), "Related": BeNil(),
					"Regarding": MatchFields(IgnoreExtras, Fields{"Kind": Equal("TeardownRun"), "Name": Equal(run.Name)}),
				})), reason+" on the run")
				g.Expect(onObject).To(HaveKeyWithValue(reason, MatchFields(IgnoreExtras, Fields{
					"ReportingController": Equal("teardown-operator"), "Series": BeNil(),
					"Related": PointTo(MatchFields(IgnoreExtras, Fields{"Kind": Equal("TeardownRun"), "Name": Equal(run.Name), "UID": Equal(run.UID)})),
				})), reason+" on the object")
			}
		}, 10*time.Second).Should(Succeed())
	})

	It("with runHistory OnFailure (SkipImmediateSuccess's earlier name) still records every pipeline that fails or goes on past its first pass", func() {
		ns := newNamespace(ctx)
		hold := waitStep("hold", 2*time.Second)
		hold.When = "object.metadata.name != '' && object.metadata.labels['app'] == 'slow'"
		slow := namespacedPolicy(ns, "slow", hold)
		slow.Spec.RunHistory = v1alpha1.RunHistoryOnFailure
		held := protect(ctx, slow, "held")
		Expect(k8s.Delete(ctx, held)).To(Succeed())
		Eventually(runPhase(ctx, held), 5*time.Second).Should(Equal(v1alpha1.RunRunning))
		Expect(runFor(ctx, held)().Finalizers).To(ContainElement(v1alpha1.FinalizerRun), "a run that goes on holds its own finalizer")
		Expect(runFor(ctx, held)().Status.Step("hold").Phase).NotTo(Equal(v1alpha1.StepSkipped), "its guard read the object's metadata from the cache")
		By("its pipeline reads only the object's metadata, which the cache has: the object is read from the API server only when the run is recorded, for its snapshot")
		var snapshot corev1.ConfigMap
		Expect(json.Unmarshal(runFor(ctx, held)().Spec.Object.Raw, &snapshot)).To(Succeed())
		Expect(snapshot.UID).To(Equal(held.UID))
		Expect(snapshot.Labels).To(Equal(held.Labels))
		Expect(snapshot.Data).To(Equal(held.Data))
		Expect(snapshot.DeletionTimestamp).NotTo(BeNil())
		Eventually(gone(ctx, held), 10*time.Second).Should(BeTrue())
		Expect(runPhase(ctx, held)()).To(Equal(v1alpha1.RunSucceeded))

		By("the same pipeline ending at once leaves no run")
		now := waitStep("now", 0)
		now.When = "object.metadata.labels['app'] == 'quick'" // fails, and so is recorded, were object not the metadata
		quick := namespacedPolicy(ns, "quick", now)
		quick.Spec.RunHistory = v1alpha1.RunHistoryOnFailure
		for _, name := range []string{"quick-1", "quick-2"} {
			cm := protect(ctx, quick, name)
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
			Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
			Consistently(runFor(ctx, cm), time.Second).Should(BeNil())
		}

		By("a finally step its guard skips on a success (when: run.phase != 'Succeeded', as the README's) leaves no run either")
		guarded := namespacedPolicy(ns, "guarded-finally", waitStep("now", 0))
		alert := waitStep("alert", 0)
		alert.When = "run.phase != 'Succeeded'"
		guarded.Spec.Finally = []v1alpha1.Step{alert}
		for _, name := range []string{"guarded-1", "guarded-2"} {
			cm := protect(ctx, guarded, name)
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
			Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
			Consistently(runFor(ctx, cm), time.Second).Should(BeNil())
		}

		failing := namespacedPolicy(ns, "failing", v1alpha1.Step{Name: "broken", When: "object.data.nope == 'x'", Wait: &v1alpha1.WaitStep{Duration: dur(0)}})
		failing.Spec.RunHistory = v1alpha1.RunHistoryOnFailure
		failing.Spec.FailurePolicy = v1alpha1.FailurePolicyRelease
		failed := protect(ctx, failing, "failed")
		Expect(k8s.Delete(ctx, failed)).To(Succeed())
		Eventually(gone(ctx, failed), 10*time.Second).Should(BeTrue())
		run := runFor(ctx, failed)()
		Expect(run).NotTo(BeNil(), "a failed pipeline is always recorded")
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunFailed))
		Expect(run.Status.Step("broken").Message).To(ContainSubstring("when: "))
	})

	// Issue: a run that failed in its first pass was recorded without its own finalizer, so
	// deleting it by hand lost the record of a teardown still owed, and the next reconcile of the
	// object ran the whole pipeline again.
	It("holds its own finalizer on a run that fails in its first pass and keeps its object, until it is abandoned", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusForbidden) })
		p := namespacedPolicy(ns, "export", httpStep("notify", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/notify")}))
		p.Spec.Steps[0].Retry = &v1alpha1.RetryPolicy{Limit: 0}
		cm := protect(ctx, p, "orders")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		run := runFor(ctx, cm)()
		Expect(run.Status.Step("notify").Attempts).To(Equal(int32(1)), "it failed in the pass that recorded it")
		Expect(run.Finalizers).To(ContainElement(v1alpha1.FinalizerRun), "a Failed run that keeps its object is a teardown still owed")

		By("deleted by hand, it stays until the teardown is abandoned, and the pipeline is not run again")
		Expect(k8s.Delete(ctx, run)).To(Succeed())
		Consistently(func() bool { return gone(ctx, run)() }, 2*time.Second).Should(BeFalse())
		breakGlass(ctx, cm)
		Eventually(gone(ctx, run), 10*time.Second).Should(BeTrue())
		Expect(api.calls(ns, "POST /"+ns+"/notify")()).To(Equal(1))
	})

	It("labels a run that released its object a record, and deletes it after --run-retention", Serial, func() {
		restartOperatorWith(func(o *engine.Options) { o.RunRetention = 3 * time.Second })
		ns := newNamespace(ctx)
		always := namespacedPolicy(ns, "instant", waitStep("first", 0))
		always.Spec.RunHistory = v1alpha1.RunHistoryAlways // All's earlier name: still a run for every deletion
		instant := protect(ctx, always, "instant")
		slow := protect(ctx, namespacedPolicy(ns, "slow", waitStep("hold", time.Second)), "slow")
		Expect(k8s.Delete(ctx, instant)).To(Succeed())
		Expect(k8s.Delete(ctx, slow)).To(Succeed())
		for _, cm := range []*corev1.ConfigMap{instant, slow} {
			Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
			Eventually(func() map[string]string {
				if run := runFor(ctx, cm)(); run != nil {
					return run.Labels
				}
				return nil
			}, 5*time.Second).Should(HaveKeyWithValue(v1alpha1.LabelReleased, "true"))
			Expect(runFor(ctx, cm)().Finalizers).To(BeEmpty())
		}
		By("the retention sweeper deletes them, though the operator no longer caches them")
		for _, cm := range []*corev1.ConfigMap{instant, slow} {
			Eventually(runFor(ctx, cm), 15*time.Second).Should(BeNil())
		}
	})

	It("does not trust a run's status written by anyone but the operator", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "guarded", waitStep("hold", time.Hour))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 5*time.Second).Should(Equal(v1alpha1.RunRunning))

		run := runFor(ctx, cm)()
		forged := []byte(`{"status":{"phase":"Succeeded","message":"trust me"}}`)
		Expect(k8s.Patch(ctx, run, client.RawPatch(types.MergePatchType, forged), client.FieldOwner("intruder"))).To(Succeed())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunRunning), "a status sent to the run itself is dropped: only the status subresource writes it")
		Consistently(gone(ctx, cm), 3*time.Second).Should(BeFalse(), "a forged status releases nothing")
		Expect(finalizers(ctx, cm)()).To(ContainElement(finalizerOf(p)))

		By("cleaning up by hand, as the docs say")
		update(ctx, cm, func(c *corev1.ConfigMap) { c.Finalizers = nil })
		Eventually(gone(ctx, cm), 5*time.Second).Should(BeTrue())
	})
})

func phasesOf(run *v1alpha1.TeardownRun) []v1alpha1.StepPhase {
	var out []v1alpha1.StepPhase
	for _, s := range run.Status.Steps {
		out = append(out, s.Phase)
	}
	return out
}

// eventsOn lists the events of namespace ns regarding the object of that UID.
func eventsOn(ctx context.Context, g Gomega, ns string, uid types.UID) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var on []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.UID == uid {
			on = append(on, e)
		}
	}
	return on
}
