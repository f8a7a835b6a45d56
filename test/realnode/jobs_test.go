package realnode

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// sleeperMark makes the timed-out container's process easy to find on the host.
const sleeperMark = "3607"

func runsJobSteps(ctx SpecContext) {
	ns := newNamespace(ctx, "rn-jobs")
	apply(ctx, jobPolicy(ns, "ok", `echo "snapshot of $TEARDOWN_TARGET_NAME taken"`, "")+
		jobPolicy(ns, "exit3", `echo "listing objects"; echo "bucket $TEARDOWN_TARGET_NAME still holds 3 objects"; exit 3`, "")+
		jobPolicy(ns, "retry", `echo "attempt $TEARDOWN_ATTEMPT"; [ "$TEARDOWN_ATTEMPT" -ge 2 ]`, "    retry: {limit: 2, backoff: 1s}")+
		jobPolicy(ns, "timeout", "echo started; sleep "+sleeperMark, "    timeout: 8s"))
	targets := map[string]*corev1.ConfigMap{}
	for _, name := range []string{"ok", "exit3", "retry", "timeout"} {
		targets[name] = armed(ctx, ns, name, name)
	}
	for _, cm := range targets {
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
	}

	By("the timed-out step's container runs on the host until its Job's deadline")
	var sleeper int
	Eventually(func() int { sleeper = sleeperPID(); return sleeper }, 60*time.Second, 200*time.Millisecond).ShouldNot(BeZero())

	By("a Job that succeeds releases its object")
	Eventually(probe.Gone(ctx, targets["ok"]), 60*time.Second).Should(BeTrue())

	By("exit code 3: the run fails with the container's code and its last line of log, and keeps the object")
	Eventually(probe.RunPhase(ctx, targets["exit3"]), 60*time.Second).Should(Equal(v1alpha1.RunFailed))
	msg := stepOf(probe.RunFor(ctx, targets["exit3"])(), "clean").Message
	Expect(msg).To(ContainSubstring("exited with code 3"))
	Expect(msg).To(ContainSubstring("bucket exit3 still holds 3 objects"))
	Expect(msg).To(ContainSubstring("listing objects"))
	Expect(probe.Finalizers(ctx, targets["exit3"])()).To(ContainElement("teardownpolicy.teardown.dev/exit3"))

	By("a retry: attempt 1 exits 1, attempt 2 succeeds")
	Eventually(probe.Gone(ctx, targets["retry"]), 60*time.Second).Should(BeTrue())
	run := probe.RunFor(ctx, targets["retry"])()
	Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
	Expect(stepOf(run, "clean").Attempts).To(Equal(int32(2)))
	p := policyOf(ctx, ns, "retry")
	first, second := probe.JobOf(ctx, p, targets["retry"], "clean", 1)(), probe.JobOf(ctx, p, targets["retry"], "clean", 2)()
	Expect(first.Status.Failed).To(Equal(int32(1)))
	Expect(jobPodLog(ctx, first)).To(Equal("attempt 1\n"))
	Expect(second.Status.Succeeded).To(Equal(int32(1)))
	Expect(jobPodLog(ctx, second)).To(Equal("attempt 2\n"))

	By("a step timeout: the Job's deadline fails the step, which says so with the log, and the container is killed")
	Eventually(probe.RunPhase(ctx, targets["timeout"]), 60*time.Second).Should(Equal(v1alpha1.RunFailed))
	msg = stepOf(probe.RunFor(ctx, targets["timeout"])(), "clean").Message
	Expect(msg).To(ContainSubstring("failed: DeadlineExceeded"))
	Expect(msg).To(ContainSubstring("container main was still running"))
	Expect(msg).To(HaveSuffix("last lines of its log:\nstarted"))
	Eventually(func() string { return processExe(sleeper) }, 30*time.Second).Should(BeEmpty(), "the container's process is gone from the host")
	Eventually(func() string {
		job := probe.JobOf(ctx, policyOf(ctx, ns, "timeout"), targets["timeout"], "clean", 1)()
		if job == nil {
			return "gone"
		}
		return jobFailedReason(job)
	}, 30*time.Second).Should(Equal("DeadlineExceeded"), "the Job fails once its pod has stopped")
	GinkgoWriter.Printf("exit3: %s\ntimeout: %s\n", stepOf(probe.RunFor(ctx, targets["exit3"])(), "clean").Message, msg)
}

// sleeperPID finds the host process of the timed-out step's container (sleep SLEEPERMARK), or 0.
func sleeperPID() int {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		cmd, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && string(cmd) == "sleep\x00"+sleeperMark+"\x00" {
			var pid int
			fmt.Sscan(p.Name(), &pid)
			return pid
		}
	}
	return 0
}

// jobFailedReason is the reason of a Job's Failed condition.
func jobFailedReason(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// jobCreations returns the audit log's Jobs created in ns, by anyone (dry runs aside), in order.
func jobCreations(ns string) []auditEvent {
	return auditEvents(func(ev auditEvent) bool {
		return ev.Verb == "create" && ev.ObjectRef.Resource == "jobs" && ev.ObjectRef.Namespace == ns &&
			ev.ResponseStatus.Code == 201 && !strings.Contains(ev.RequestURI, "dryRun")
	})
}

// jobsOfStep lists the Jobs a step of the run of target created.
func jobsOfStep(ctx context.Context, ns string, target client.Object, step string) []batchv1.Job {
	jobs := &batchv1.JobList{}
	Expect(k8s.List(ctx, jobs, client.InNamespace(ns), client.MatchingLabels{
		"teardown.dev/target-uid": string(target.GetUID()), "teardown.dev/step": step,
	})).To(Succeed())
	return jobs.Items
}

func failsOver(ctx SpecContext) {
	ns := newNamespace(ctx, "rn-failover")
	apply(ctx, fmt.Sprintf(`apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: handover, namespace: %[1]s}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  selector: {matchLabels: {app: handover}}
  steps:
  - name: first
    job: {template: {spec: {backoffLimit: 0, template: {spec: {containers: [{name: main, image: %[2]s, imagePullPolicy: Never, command: [sh, -c, echo first]}]}}}}}
  - name: slow
    job: {template: {spec: {backoffLimit: 0, template: {spec: {containers: [{name: main, image: %[2]s, imagePullPolicy: Never, command: [sh, -c, 'sleep 20; echo slow']}]}}}}}
  - name: last
    wait: {duration: 1s}
`, ns, busybox))
	cm := armed(ctx, ns, "orders", "handover")
	Expect(k8s.Delete(ctx, cm)).To(Succeed())

	By("waiting for the slow step's container to run")
	Eventually(func() bool {
		jobs := jobsOfStep(ctx, ns, cm, "slow")
		return len(jobs) == 1 && jobs[0].Status.Ready != nil && *jobs[0].Status.Ready == 1
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue())
	old := leader(ctx)()
	Expect(old).NotTo(BeEmpty())

	By("deleting the leader's pod " + old)
	Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metaName(namespace, old)})).To(Succeed())
	Eventually(leader(ctx), 60*time.Second, 200*time.Millisecond).ShouldNot(Or(Equal(old), BeEmpty()))
	GinkgoWriter.Printf("leader %s -> %s\n", old, leader(ctx)())

	By("the new leader finishes the run: no step recorded twice, no Job created twice")
	Eventually(probe.Gone(ctx, cm), 90*time.Second).Should(BeTrue())
	run := probe.RunFor(ctx, cm)()
	Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
	for _, step := range []string{"first", "slow"} {
		Expect(stepOf(run, step).Attempts).To(Equal(int32(1)), step)
		Expect(jobsOfStep(ctx, ns, cm, step)).To(HaveLen(1), "the Jobs of step %s", step)
	}
	Expect(jobCreations(ns)).To(HaveLen(2), "one Job created per step, by either replica (the policy's dry runs aside)")
	Expect(strings.TrimSpace(jobPodLog(ctx, &jobsOfStep(ctx, ns, cm, "slow")[0]))).To(Equal("slow"))
}
