package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/teardown-dev/teardown-operator/internal/faultinject"
)

// watchFaultModes and watchFaultResources are what a plan picks from: every mode, on the watches
// the engine decides from (targets, runs, Jobs, policies).
var (
	watchFaultModes     = []string{faultinject.Coalesce, faultinject.Delay, faultinject.Swap, faultinject.Close, faultinject.Expire}
	watchFaultResources = []string{"configmaps", "teardownruns", "jobs", "teardownpolicies"}
)

// watchFaultPlan is 1 to 3 faults, each at one of the first 12 events of its resource (a
// scenario's 3 objects make about that many of each).
func watchFaultPlan(r *rand.Rand) string {
	var faults []string
	for range 1 + r.IntN(3) {
		f := fmt.Sprintf("%s:%s:%d", watchFaultModes[r.IntN(len(watchFaultModes))], watchFaultResources[r.IntN(len(watchFaultResources))], 1+r.IntN(12))
		if r.IntN(2) == 0 {
			f += fmt.Sprintf(":%dms", 200+r.IntN(4800)) // else the default hold, 2 s
		}
		faults = append(faults, f)
	}
	return strings.Join(faults, ",")
}

var _ = Describe("Missed, delayed, reordered and broken watch events", func() {
	It("change nothing of the outcome: every teardown once, nothing repeated", func(ctx SpecContext) {
		seed, plans := seedFromEnv("WATCHFAULT_SEED"), sizeFromEnv("WATCHFAULT_PLANS", 30)
		r := rand.New(rand.NewPCG(seed, 1))
		srv, flags := steadyServer()
		fired, faults := 0, 0
		for i := range plans {
			plan := watchFaultPlan(r)
			trigger := []string{"Finalizer", "DeleteRequest"}[r.IntN(2)]
			ns := fmt.Sprintf("wf-%s-%d", runID(), i)
			By(fmt.Sprintf("plan %d of %d: %s, trigger %s, in %s (WATCHFAULT_SEED=%d)", i+1, plans, plan, trigger, ns, seed))
			op := launch(faultBin, []string{faultinject.EnvWatchFaults + "=" + plan, faultinject.EnvScope + "=" + ns}, kubeconfig, flags...)
			op.waitLeading(time.Minute)
			sc := newScenario(ctx, srv, ns, trigger, "a", "b", "c")
			sc.teardown(ctx, 2*time.Minute)
			sc.finish(ctx)
			Expect(op.exited()).To(BeFalse(), "the operator died:\n%s", op.log.String())
			op.stop()
			// No crash: every step exactly once.
			Expect(sc.problems(ctx, time.Time{}, 1)).To(BeEmpty(), "plan %s (WATCHFAULT_SEED=%d)", plan, seed)
			faults += strings.Count(plan, ",") + 1
			fired += strings.Count(op.log.String(), "watch fault fired: ")
		}
		report := fmt.Sprintf("%d plans (WATCHFAULT_SEED=%d): %d faults, %d of them fired (the others' events never came): every teardown once, nothing repeated",
			plans, seed, faults, fired)
		GinkgoWriter.Println(report)
		AddReportEntry("watch faults", report)
		Expect(fired).To(BeNumerically(">=", faults/2), "too few faults fired for the spec to prove much")
	})
})
