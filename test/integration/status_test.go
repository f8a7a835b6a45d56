package integration

import (
	"context"
	"fmt"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// counts reads a policy's status counts as `kubectl get teardownpolicies` shows them.
type counts struct{ Protected, Active, Stuck, MatchErrors int32 }

func policyCounts(ctx context.Context, p *v1alpha1.TeardownPolicy) func() counts {
	return func() counts {
		got := &v1alpha1.TeardownPolicy{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return counts{-1, -1, -1, -1}
		}
		st := got.Status
		return counts{st.Protected, st.ActiveRuns, st.StuckRuns, st.MatchErrors}
	}
}

// scrapeMetrics reads the operator's metrics endpoint, as Prometheus would.
func scrapeMetrics() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// gauges scrapes the operator's metrics endpoint, as Prometheus would, and returns the
// teardown gauges of one policy.
func gauges(p *v1alpha1.TeardownPolicy) func() counts {
	label := fmt.Sprintf("TeardownPolicy/%s/%s", p.Namespace, p.Name)
	return func() counts {
		families, err := scrapeMetrics()
		if err != nil {
			return counts{-1, -1, -1, -1}
		}
		value := func(name string) int32 {
			for _, m := range families[name].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "policy" && l.GetValue() == label {
						return int32(m.GetGauge().GetValue())
					}
				}
			}
			return -1 // absent
		}
		return counts{value("teardown_protected_objects"), value("teardown_runs_active"), value("teardown_runs_stuck"), value("teardown_match_errors")}
	}
}

var _ = Describe("Status and metrics", func() {
	ctx := context.Background()

	It("follow runs from start to stuck to released, with no other write to the policy", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "counted",
			v1alpha1.Step{Name: "hold", When: "object.metadata.name == 'running'", Wait: &v1alpha1.WaitStep{Duration: dur(time.Hour)}},
			v1alpha1.Step{Name: "fail", When: "object.metadata.name == 'failing'", Timeout: dur(time.Second),
				Wait: &v1alpha1.WaitStep{Until: "false", Interval: dur(time.Second)}})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		objs := map[string]*corev1.ConfigMap{}
		for _, name := range []string{"running", "failing", "quiet"} {
			objs[name] = protect(ctx, p, name)
		}
		Eventually(policyCounts(ctx, p), 10*time.Second).Should(Equal(counts{Protected: 3}))
		Eventually(gauges(p), 10*time.Second).Should(Equal(counts{Protected: 3}))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		generation := p.Generation

		By("an object torn down at once is no longer counted")
		Expect(k8s.Delete(ctx, objs["quiet"])).To(Succeed())
		Eventually(gone(ctx, objs["quiet"]), 10*time.Second).Should(BeTrue())
		Eventually(policyCounts(ctx, p), 5*time.Second).Should(Equal(counts{Protected: 2}))

		By("a run in flight is active; a failed one that keeps its object is not")
		deleted := time.Now()
		Expect(k8s.Delete(ctx, objs["running"])).To(Succeed())
		Expect(k8s.Delete(ctx, objs["failing"])).To(Succeed())
		Eventually(runPhase(ctx, objs["failing"]), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Eventually(policyCounts(ctx, p), 5*time.Second).Should(Equal(counts{Protected: 2, Active: 1}))
		Eventually(gauges(p), 5*time.Second).Should(Equal(counts{Protected: 2, Active: 1}))

		By("both count as stuck once they pass --stuck-after, with nothing else happening")
		Eventually(policyCounts(ctx, p), stuckAfter+5*time.Second).Should(Equal(counts{Protected: 2, Active: 1, Stuck: 2}))
		Expect(time.Since(deleted)).To(BeNumerically(">=", stuckAfter-time.Second))
		Eventually(gauges(p), 5*time.Second).Should(Equal(counts{Protected: 2, Active: 1, Stuck: 2}))

		By("breaking glass releases both, and every count goes back to 0")
		for _, name := range []string{"running", "failing"} {
			update(ctx, objs[name], func(c *corev1.ConfigMap) {
				c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest("ops: checked by hand")}
			})
		}
		for _, name := range []string{"running", "failing"} {
			Eventually(gone(ctx, objs[name]), 10*time.Second).Should(BeTrue())
		}
		Eventually(policyCounts(ctx, p), 5*time.Second).Should(Equal(counts{}))
		Eventually(gauges(p), 5*time.Second).Should(Equal(counts{}))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		Expect(p.Generation).To(Equal(generation), "nothing but the operator's status writes touched the policy")
	})

	It("makes a match that fails to evaluate visible: an event on the object and a count in the policy", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "tiered", waitStep("a", 0))
		p.Spec.Match = "object.data.tier == 'prod'" // errors on an object without data.tier
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		prod := configMap(ns, "prod", map[string]string{"app": p.Name})
		prod.Data = map[string]string{"tier": "prod"}
		bare := configMap(ns, "bare", map[string]string{"app": p.Name})
		Expect(k8s.Create(ctx, prod)).To(Succeed())
		Expect(k8s.Create(ctx, bare)).To(Succeed())
		Eventually(finalizers(ctx, prod), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		Eventually(policyCounts(ctx, p), 10*time.Second).Should(Equal(counts{Protected: 1, MatchErrors: 1}))
		Eventually(gauges(p), 5*time.Second).Should(Equal(counts{Protected: 1, MatchErrors: 1}))
		Eventually(probe().EventNotes(ctx, bare), 10*time.Second).Should(ContainElement(SatisfyAll(
			HavePrefix(v1alpha1.ReasonMatchFailed+": "), ContainSubstring("spec.match cannot be evaluated"), ContainSubstring("no such key: tier"))))
		Expect(finalizers(ctx, bare)()).NotTo(ContainElement(finalizerOf(p)))

		By("the object gets the field: its match evaluates again and the count drops")
		update(ctx, bare, func(c *corev1.ConfigMap) { c.Data = map[string]string{"tier": "dev"} })
		Eventually(policyCounts(ctx, p), 10*time.Second).Should(Equal(counts{Protected: 1}))
		Eventually(gauges(p), 5*time.Second).Should(Equal(counts{Protected: 1}))
	})
})
