package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/teardown-dev/teardown-operator/internal/faultinject"
)

var _ = Describe("Crash at every write point", func() {
	for _, trigger := range []string{"Finalizer", "DeleteRequest"} {
		It("keeps every invariant when the operator dies after any one of its writes, trigger "+trigger, func(ctx SpecContext) {
			srv, _ := steadyServer()
			prefix := "cp-" + runID() + "-" + strings.ToLower(trigger[:1])
			By("tracing the points of a scenario without a crash")
			trace := filepath.Join(GinkgoT().TempDir(), "trace")
			points := crashScenario(ctx, srv, trigger, prefix+"-0", []string{faultinject.EnvTrace + "=" + trace}).points
			Expect(points).NotTo(BeEmpty())
			chosen, seed := choosePoints(len(points))
			GinkgoWriter.Printf("trigger %s: %d points: %s\n", trigger, len(points), strings.Join(points, ", "))
			var missed []int
			for _, k := range chosen {
				By(fmt.Sprintf("crashing after point %d of %d: %s (CRASHPOINT_SEED=%d)", k, len(points), points[k-1], seed))
				at := ""
				// The count of points varies by one or two between runs (a patch more or less of
				// the object); a point beyond this run's count is tried again in a new run.
				for try := 0; try < 3 && at == ""; try++ {
					at = crashScenario(ctx, srv, trigger, fmt.Sprintf("%s-%d-%d", prefix, k, try),
						[]string{faultinject.EnvAfter + "=" + strconv.Itoa(k)}).crashedAt
				}
				if at == "" {
					missed = append(missed, k)
				}
			}
			report := fmt.Sprintf("trigger %s: %d points traced; killed at %d of the %d chosen (CRASHPOINT_SEED=%d): every invariant held",
				trigger, len(points), len(chosen)-len(missed), len(chosen), seed)
			if len(missed) > 0 {
				report += fmt.Sprintf("; points %v never reached in 3 runs (those runs made fewer writes)", missed)
			}
			GinkgoWriter.Println(report)
			AddReportEntry("crash points: "+trigger, report)
			Expect(len(missed)).To(BeNumerically("<=", max(1, len(chosen)/10)), "too many points never reached: %v", missed)
		})
	}
})

// choosePoints returns the points to crash at, 1 to n: all of them, or CRASHPOINT_SAMPLE of
// them chosen with CRASHPOINT_SEED (a new seed each run when unset; it is printed).
func choosePoints(n int) ([]int, uint64) {
	seed := seedFromEnv("CRASHPOINT_SEED")
	all := make([]int, n)
	for i := range all {
		all[i] = i + 1
	}
	sample := sizeFromEnv("CRASHPOINT_SAMPLE", n)
	if sample >= n {
		return all, seed
	}
	r := rand.New(rand.NewPCG(seed, 0))
	r.Shuffle(n, func(i, j int) { all[i], all[j] = all[j], all[i] })
	chosen := all[:sample]
	slices.Sort(chosen)
	return chosen, seed
}

// crashScenario runs one teardown in a new namespace ns under the operator built with crash
// points (env chooses the point, or a trace), restarting it (without a crash point) whenever it
// dies, and checks the invariants.
func crashScenario(ctx context.Context, srv *flakyServer, trigger, ns string, env []string) scenarioResult {
	GinkgoHelper()
	flags := []string{"--leader-elect=false", "--http-allowed-destinations", strings.TrimPrefix(srv.srv.URL, "http://")}
	env = append(env, faultinject.EnvScope+"="+ns)
	var restartedAt time.Time // written under the supervisor's lock (its start runs under it)
	firstOp := launch(faultBin, env, kubeconfig, flags...)
	sup := supervise(func() *operator {
		if firstOp != nil {
			op := firstOp
			firstOp = nil
			return op
		}
		restartedAt = time.Now()
		return startOperator(flags...)
	})
	first := sup.current()
	defer sup.stop()
	sc := newScenario(ctx, srv, ns, trigger, "orders")
	sc.teardown(ctx, 2*time.Minute)
	sc.finish(ctx)
	// Only now: the last points are the policy's release.
	res := scenarioResult{points: tracedPoints(env)}
	if sup.count() > 0 {
		m := regexp.MustCompile(`crashpoint \d+ reached: (.*): killing the process`).FindStringSubmatch(first.log.String())
		Expect(m).NotTo(BeNil(), "the first process died, but not at a crash point:\n%s", first.log.String())
		res.crashedAt = m[1]
	}
	// At least once: the call whose record the crash lost may be made again.
	Expect(sc.problems(ctx, restartedAt, 2)).To(BeEmpty())
	return res
}

// scenarioResult is what one scenario tells: the points it traced, and where its first process
// was killed ("" when it was not).
type scenarioResult struct {
	points    []string
	crashedAt string
}

// tracedPoints reads the points a process traced, when env asked it to.
func tracedPoints(env []string) []string {
	GinkgoHelper()
	path, ok := envValue(env, faultinject.EnvTrace)
	if !ok {
		return nil
	}
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	var points []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if _, name, ok := strings.Cut(line, "\t"); ok {
			points = append(points, name)
		}
	}
	return points
}

func envValue(env []string, name string) (string, bool) {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v, true
		}
	}
	return "", false
}
