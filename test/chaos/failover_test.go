package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// leaseName is the operator's leader election lease, in the run namespace.
const leaseName = v1alpha1.LeaderElectionLease

// deployChaos creates the three policies and n protected objects in a new namespace ns, and
// waits until every object carries its policy's finalizer.
func deployChaos(ctx context.Context, ns, base string, n int) {
	GinkgoHelper()
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
	policies := chaosPolicies(ns, base)
	for _, p := range policies {
		Expect(k8s.Create(ctx, p)).To(Succeed())
	}
	for i := range n {
		Expect(k8s.Create(ctx, framework.ConfigMap(ns, fmt.Sprintf("obj-%03d", i), map[string]string{"app": policies[i%len(policies)].Name}))).To(Succeed())
	}
	Eventually(func() int32 {
		var total int32
		for _, p := range policies {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(p), p)
			total += p.Status.Protected
		}
		return total
	}, 2*time.Minute, time.Second).Should(Equal(int32(n)))
}

// deleteSpread deletes the n objects of ns one by one, evenly over d.
func deleteSpread(ctx context.Context, ns string, n int, d time.Duration) {
	defer GinkgoRecover()
	for i := range n {
		_ = k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("obj-%03d", i)}})
		time.Sleep(d / time.Duration(n))
	}
}

var _ = Describe("Leader failover, two replicas with the default leader election", Ordered, func() {
	var srv *flakyServer
	BeforeAll(func() {
		srv = newFlakyServer()
		DeferCleanup(srv.srv.Close)
	})
	allowed := func() string { return strings.TrimPrefix(srv.srv.URL, "http://") }

	It("resumes after the leader is killed mid pipeline, with the same guarantees", func(ctx SpecContext) {
		objects, kills := sizeFromEnv("CHAOS_FAILOVER_OBJECTS", 100), sizeFromEnv("CHAOS_FAILOVER_KILLS", 10)
		users := []string{"chaos-failover-a", "chaos-failover-b"}
		replicas := []*operator{startOperatorAs(users[0], "--http-allowed-destinations", allowed())}
		replicas[0].waitLeading(time.Minute)
		replicas = append(replicas, startOperatorAs(users[1], "--http-allowed-destinations", allowed()))
		DeferCleanup(func() {
			for _, r := range replicas {
				r.stop()
			}
		})
		ns := "chaos-failover"
		deployChaos(ctx, ns, srv.srv.URL, objects)
		watch := observe(ctx, ns)
		// Deletions spread over the time the kills take (a takeover waits out the 15 s lease), so
		// that every kill lands while pipelines are in flight.
		go deleteSpread(ctx, ns, objects, time.Duration(kills)*17*time.Second)

		var takeover []time.Duration
		leader := 0
		for range kills {
			time.Sleep(time.Duration(200+rand.IntN(2300)) * time.Millisecond)
			if remaining(ctx, ns) == 0 {
				break
			}
			replicas[leader].kill()
			killed := time.Now()
			replicas[leader] = startOperatorAs(users[leader], "--http-allowed-destinations", allowed())
			// The standby, or the restarted replica, takes the lease once it expires.
			Eventually(func() bool { return replicas[0].leads() || replicas[1].leads() }, time.Minute, 50*time.Millisecond).Should(BeTrue())
			takeover = append(takeover, time.Since(killed))
			if !replicas[leader].leads() {
				leader = 1 - leader
			}
		}
		Expect(len(takeover)).To(Equal(kills), "every kill must land mid pipeline")
		faultsEnd := time.Now()
		Eventually(func() int { return remaining(ctx, ns) }, 5*time.Minute, time.Second).Should(BeZero(), "objects stuck after the faults stopped")
		settled := time.Since(faultsEnd)
		checkKillInvariants(ctx, ns, objects, srv, watch)
		Expect(repeatedBirths(ns)).To(BeEmpty())
		sort.Slice(takeover, func(i, j int) bool { return takeover[i] < takeover[j] })
		report := fmt.Sprintf("%d objects, %d leader kills; lost 0, stuck 0 (all gone %s after the last takeover); "+
			"time from killing the leader to the standby leading: p50 %s, max %s",
			objects, kills, settled.Round(100*time.Millisecond), takeover[len(takeover)/2].Round(100*time.Millisecond),
			takeover[len(takeover)-1].Round(100*time.Millisecond))
		AddReportEntry("chaos: failover", report)
		GinkgoWriter.Println(report)
	})

	It("stops a leader paused past its lease from acting once it resumes", func(ctx SpecContext) {
		users := []string{"chaos-paused-a", "chaos-paused-b"}
		paused := startOperatorAs(users[0], "--http-allowed-destinations", allowed())
		paused.waitLeading(time.Minute)
		standby := startOperatorAs(users[1], "--http-allowed-destinations", allowed())
		DeferCleanup(func() { paused.stop(); standby.stop() })
		ns := "chaos-pause"
		objects := sizeFromEnv("CHAOS_PAUSE_OBJECTS", 60)
		deployChaos(ctx, ns, srv.srv.URL, objects)
		watch := observe(ctx, ns)
		Expect(k8s.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.HasLabels{"app"})).To(Succeed())

		By("pausing the leader mid pipeline (SIGSTOP) until the standby has taken over and acted")
		time.Sleep(1500 * time.Millisecond)
		paused.pause()
		standby.waitLeading(time.Minute)
		lease := &coordinationv1.Lease{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: runNamespace, Name: leaseName}, lease)).To(Succeed())
		Expect(*lease.Spec.HolderIdentity).NotTo(BeEmpty())
		lost := lease.Spec.AcquireTime.Time // the paused leader's lease was gone by then
		time.Sleep(3 * time.Second)
		Expect(remaining(ctx, ns)).To(BeNumerically(">", 0), "the paused leader must resume with work left")

		By("resuming it: it exits, having written nothing after the standby took the lease")
		paused.resume()
		resumed := time.Now()
		Eventually(paused.exited, 30*time.Second, 100*time.Millisecond).Should(BeTrue(), "a leader that lost its lease must stop")
		exitedAfter := time.Since(resumed)
		Eventually(func() int { return remaining(ctx, ns) }, 5*time.Minute, time.Second).Should(BeZero())
		checkKillInvariants(ctx, ns, objects, srv, watch)
		Expect(repeatedBirths(ns)).To(BeEmpty())
		Expect(writesBy(users[1], lost)).NotTo(BeEmpty(), "the audit log shows the standby's writes: the check below can see writes")
		Expect(writesBy(users[0], lost)).To(BeEmpty(), "writes by the paused leader after it lost the lease")
		report := fmt.Sprintf("paused leader: resumed %s after the standby took over, exited %s after resuming; 0 writes after losing the lease; %d objects, lost 0, stuck 0",
			resumed.Sub(lost).Round(100*time.Millisecond), exitedAfter.Round(100*time.Millisecond), objects)
		AddReportEntry("chaos: paused leader", report)
		GinkgoWriter.Println(report)
	})
})
