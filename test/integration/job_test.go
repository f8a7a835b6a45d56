package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps/jobstep"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// envtest runs no Job controller: these specs play its part, writing the Job status the
// controller would write, and assert on what the operator does with it.

// dumpSpec is the JobSpec of a backup step, with interpolation in several places.
func dumpSpec() map[string]any {
	spec := framework.Container("postgres:16", nil, "sh", "-c", "pg_dump --table=${object.data.k} > /backup/$${HOSTNAME}.sql")
	c := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	c["env"] = []any{map[string]any{"name": "TARGET", "value": "${object.metadata.namespace}/${object.metadata.name}"}}
	c["resources"] = map[string]any{"limits": map[string]any{"memory": "${object.metadata.name == 'big' ? '2Gi' : '256Mi'}"}}
	return spec
}

// jobOf reads the Job a step created for a target of p, attempt n.
func jobOf(ctx context.Context, p *v1alpha1.TeardownPolicy, target client.Object, step string, n int32) func() *batchv1.Job {
	return probe().JobOf(ctx, p, target, step, n)
}

// finishJob writes the status the Job controller writes when a Job completes or fails.
func finishJob(ctx context.Context, job *batchv1.Job, complete bool, also ...func(*batchv1.Job)) {
	updateStatus(ctx, job, func(j *batchv1.Job) {
		defer func() {
			for _, f := range also {
				f(j)
			}
		}()
		now := metav1.Now()
		start := metav1.NewTime(now.Add(-time.Second))
		j.Status.StartTime = &start
		if complete {
			j.Status.Succeeded = 1
			j.Status.CompletionTime = &now
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
			}
		} else {
			j.Status.Failed = 1
			j.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			}
		}
	})
}

// startJobStep protects a target with a policy of one job step, "dump", deletes the target and
// waits until the step has recorded its Job. It returns the target and a reader of the Job.
func startJobStep(ctx context.Context, ns, policy string) (*corev1.ConfigMap, func() *batchv1.Job) {
	p := namespacedPolicy(ns, policy, framework.JobStep("dump", framework.Container("busybox", nil, "true")))
	cm := protect(ctx, p, "target")
	Expect(k8s.Delete(ctx, cm)).To(Succeed())
	job := jobOf(ctx, p, cm, "dump", 1)
	Eventually(job, 10*time.Second).ShouldNot(BeNil())
	Eventually(stepState(ctx, cm, "dump"), 5*time.Second).Should(HaveKey("jobUID"))
	return cm, job
}

// stepState returns a function reading the state of one step of a target's run (nil until set).
func stepState(ctx context.Context, target client.Object, step string) func() map[string]string {
	return func() map[string]string {
		if r := runFor(ctx, target)(); r != nil {
			if s := r.Status.Step(step); s != nil {
				return s.State
			}
		}
		return nil
	}
}

// updateStatus re-reads obj, applies mutate and writes its status subresource (as the suite's
// admin), retrying on conflicts.
func updateStatus[T client.Object](ctx context.Context, obj T, mutate func(T)) {
	Eventually(func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return k8s.Status().Update(ctx, obj)
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

var _ = Describe("Job steps", func() {
	ctx := context.Background()

	It("creates the Job from the template, waits for it, and releases the target when it completes", func() {
		ns := newNamespace(ctx)
		step := framework.JobStep("dump", dumpSpec())
		step.Job.Template.Metadata = v1alpha1.JobTemplateMetadata{
			Labels:      map[string]string{"team": "data", "target": "${object.metadata.name}"},
			Annotations: map[string]string{"example.com/reason": "teardown of ${object.metadata.namespace}/${object.metadata.name}"},
		}
		step.Timeout = dur(10 * time.Minute)
		p := namespacedPolicy(ns, "backup", waitStep("before", 0), step, waitStep("after", 0))
		cm := protect(ctx, p, "orders")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())

		job := jobOf(ctx, p, cm, "dump", 1)
		Eventually(job, 10*time.Second).ShouldNot(BeNil())
		Eventually(stepPhase(ctx, cm, "dump"), 5*time.Second).Should(Equal(v1alpha1.StepRunning))
		run := runFor(ctx, cm)()
		j := job()

		By("the Job is the template, rendered, with the operator's labels, variables and bounds")
		Expect(j.Name).To(Equal(naming.JobName(run.Name, "dump", 1)))
		Expect(j.Labels).To(And(
			HaveKeyWithValue("team", "data"), HaveKeyWithValue("target", "orders"),
			HaveKeyWithValue(v1alpha1.LabelRun, run.Name), HaveKeyWithValue(v1alpha1.LabelRunNamespace, ns),
			HaveKeyWithValue(v1alpha1.LabelRunUID, string(run.UID)), HaveKeyWithValue(v1alpha1.LabelStep, "dump"),
			HaveKeyWithValue(v1alpha1.LabelAttempt, "1"), HaveKeyWithValue(v1alpha1.LabelPolicy, "backup"),
			HaveKeyWithValue(v1alpha1.LabelTargetUID, string(cm.UID))))
		Expect(j.Spec.Template.Labels).To(HaveKeyWithValue(v1alpha1.LabelRunUID, string(run.UID)))
		Expect(j.Annotations).To(HaveKeyWithValue("example.com/reason", "teardown of "+ns+"/orders"))
		c := j.Spec.Template.Spec.Containers[0]
		Expect(c.Command).To(Equal([]string{"sh", "-c", "pg_dump --table=v > /backup/${HOSTNAME}.sql"}), "interpolated, with $${ kept literal")
		Expect(c.Resources.Limits.Memory().String()).To(Equal("256Mi"), "a quantity can be interpolated")
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		Expect(env).To(Equal(map[string]string{
			"TARGET": ns + "/orders", jobstep.EnvTargetAPIVersion: "v1", jobstep.EnvTargetKind: "ConfigMap",
			jobstep.EnvTargetNamespace: ns, jobstep.EnvTargetName: "orders", jobstep.EnvTargetUID: string(cm.UID),
			jobstep.EnvRunName: run.Name, jobstep.EnvRunNamespace: ns, jobstep.EnvRunUID: string(run.UID),
			jobstep.EnvStep: "dump", jobstep.EnvAttempt: "1",
		}))
		Expect(c.Env[len(c.Env)-1].Name).To(Equal("TARGET"), "the template's own variables come after ours, so they may refer to them")
		Expect(j.Spec.Template.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
		Expect(j.Spec.ActiveDeadlineSeconds).NotTo(BeNil())
		Expect(*j.Spec.ActiveDeadlineSeconds).To(BeNumerically("~", 570, 5), "capped at the step's timeout, less a margin for the step to see the Job fail")
		Expect(j.Spec.TTLSecondsAfterFinished).To(BeNil(), "kept until the step has recorded the outcome")
		Expect(j.OwnerReferences).To(ConsistOf(HaveField("UID", run.UID)))

		By("the target stays while the Job runs")
		Consistently(gone(ctx, cm), time.Second).Should(BeFalse())
		Expect(stepOf(ctx, cm, "dump").Message).To(ContainSubstring("waiting for Job " + ns + "/" + j.Name + " to finish"))

		By("completing the Job")
		finishJob(ctx, j, true)
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		run = runFor(ctx, cm)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		ss := run.Status.Step("dump")
		Expect(ss.Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(ss.Message).To(And(ContainSubstring("completed"), ContainSubstring("succeeded 1")))
		Expect(ss.State).To(HaveKeyWithValue("jobUID", string(j.UID)))
		Expect(string(ss.Outputs["jobName"].Raw)).To(Equal(`"` + j.Name + `"`))
		Expect(run.Status.Step("after").Phase).To(Equal(v1alpha1.StepSucceeded))
		Eventually(func() *int32 { return job().Spec.TTLSecondsAfterFinished }, 5*time.Second).Should(HaveValue(Equal(int32(3600))),
			"once recorded, the Job may be cleaned up after the default TTL")
	})

	It("fails with the Job's reason and the failed container, and says why it has no log", func() {
		ns := newNamespace(ctx)
		spec := framework.Container("busybox", nil, "false")
		spec["ttlSecondsAfterFinished"] = 30
		p := namespacedPolicy(ns, "failing", framework.JobStep("drain", spec))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		job := jobOf(ctx, p, cm, "drain", 1)
		Eventually(job, 10*time.Second).ShouldNot(BeNil())
		j := job()

		By("a failed pod of the Job, as the Job controller would have made it (no node: no log)")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: j.Name + "-x7k2p", Labels: map[string]string{batchv1.ControllerUidLabel: string(j.UID)}},
			Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		updateStatus(ctx, pod, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "busybox", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "connection refused"}}}}
		})
		finishJob(ctx, j, false)

		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss := stepOf(ctx, cm, "drain")
		Expect(ss.Phase).To(Equal(v1alpha1.StepFailed))
		Expect(ss.Message).To(And(
			ContainSubstring("failed: BackoffLimitExceeded: Job has reached the specified backoff limit"),
			ContainSubstring("pod "+pod.Name+" container main exited with code 3 (Error): connection refused"),
			// envtest's pod is on no node, and the API server answers an unscheduled pod's log
			// with nothing (the kwok e2e suite covers a log that cannot be read).
			ContainSubstring("its log is empty")))
		Expect(gone(ctx, cm)()).To(BeFalse(), "failurePolicy Retain keeps the target")
		Eventually(func() *int32 { return job().Spec.TTLSecondsAfterFinished }, 5*time.Second).Should(HaveValue(Equal(int32(30))),
			"the template's ttlSecondsAfterFinished, set once the outcome is recorded")
		Expect(probe().EventNotes(ctx, runFor(ctx, cm)())()).To(ContainElement(And(ContainSubstring("StepFailed"), ContainSubstring("BackoffLimitExceeded"))))
	})

	It("succeeds when successCondition holds, even before the Job completes, and fails a completed Job for which it is false", func() {
		ns := newNamespace(ctx)
		twoOf := framework.JobStep("shards", framework.Container("busybox", nil, "true"))
		twoOf.Job.SuccessCondition = "has(job.status.succeeded) && job.status.succeeded >= 2"
		early := protect(ctx, namespacedPolicy(ns, "early", twoOf), "early")
		never := framework.JobStep("shards", framework.Container("busybox", nil, "true"))
		never.Job.SuccessCondition = "job.metadata.annotations['example.com/verified'] == 'yes'"
		late := protect(ctx, namespacedPolicy(ns, "late", never), "late")
		Expect(k8s.Delete(ctx, early)).To(Succeed())
		Expect(k8s.Delete(ctx, late)).To(Succeed())

		earlyJob := jobOf(ctx, &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "early"}}, early, "shards", 1)
		Eventually(earlyJob, 10*time.Second).ShouldNot(BeNil())
		updateStatus(ctx, earlyJob(), func(j *batchv1.Job) {
			start := metav1.Now()
			j.Status.StartTime, j.Status.Active, j.Status.Succeeded = &start, 1, 2
		})
		Eventually(gone(ctx, early), 10*time.Second).Should(BeTrue())
		Expect(stepOf(ctx, early, "shards").Message).To(ContainSubstring("successCondition holds (active 1, succeeded 2, failed 0)"))
		Eventually(earlyJob, 5*time.Second).Should(BeNil(), "the Job still running when its step succeeded is deleted")

		lateJob := jobOf(ctx, &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}}, late, "shards", 1)
		Eventually(lateJob, 10*time.Second).ShouldNot(BeNil())
		update(ctx, lateJob(), func(j *batchv1.Job) { j.Annotations = map[string]string{"example.com/verified": "no"} })
		finishJob(ctx, lateJob(), true)
		Eventually(runPhase(ctx, late), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(stepOf(ctx, late, "shards").Message).To(ContainSubstring("completed, but successCondition is false"))

		By("a Job that failed fails the step, whatever successCondition says")
		always := framework.JobStep("shards", framework.Container("busybox", nil, "true"))
		always.Job.SuccessCondition = "has(job.status.succeeded) && job.status.succeeded >= 1"
		p := namespacedPolicy(ns, "partial", always)
		partial := protect(ctx, p, "partial")
		Expect(k8s.Delete(ctx, partial)).To(Succeed())
		partialJob := jobOf(ctx, p, partial, "shards", 1)
		Eventually(partialJob, 10*time.Second).ShouldNot(BeNil())
		finishJob(ctx, partialJob(), false, func(j *batchv1.Job) { j.Status.Succeeded = 1 })
		Eventually(runPhase(ctx, partial), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(stepOf(ctx, partial, "shards").Message).To(ContainSubstring("failed: BackoffLimitExceeded"))
	})

	It("retries with a fresh Job for the next attempt", func() {
		ns := newNamespace(ctx)
		step := framework.JobStep("drain", framework.Container("busybox", nil, "drain"))
		step.Retry = &v1alpha1.RetryPolicy{Limit: 2, Backoff: dur(100 * time.Millisecond)}
		p := namespacedPolicy(ns, "retrying", step)
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		first := jobOf(ctx, p, cm, "drain", 1)
		Eventually(first, 10*time.Second).ShouldNot(BeNil())
		finishJob(ctx, first(), false)

		second := jobOf(ctx, p, cm, "drain", 2)
		Eventually(second, 10*time.Second).ShouldNot(BeNil(), "attempt 2 runs a new Job")
		Expect(second().UID).NotTo(Equal(first().UID))
		Expect(second().Labels).To(HaveKeyWithValue(v1alpha1.LabelAttempt, "2"))
		Expect(second().Spec.BackoffLimit).To(HaveValue(Equal(int32(0))), "the JobSpec's own backoffLimit stays the user's")
		Expect(first().Spec.TTLSecondsAfterFinished).NotTo(BeNil(), "the failed attempt's Job may be cleaned up")
		ss := stepOf(ctx, cm, "drain")
		Expect(ss.Attempts).To(Equal(int32(2)))
		Expect(ss.State).To(HaveKeyWithValue("jobUID", string(second().UID)))

		finishJob(ctx, second(), true)
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		Expect(stepOf(ctx, cm, "drain").Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(jobOf(ctx, p, cm, "drain", 3)()).To(BeNil())
	})

	It("adopts the Job it created when a crash lost the status write, instead of creating a second", Serial, func() {
		ns := newNamespace(ctx)
		cm, job := startJobStep(ctx, ns, "adopting")
		created := job()

		By("stopping the operator and putting the run back as it was before the Job was recorded")
		stopOperator()
		run := runFor(ctx, cm)()
		updateStatus(ctx, run, func(r *v1alpha1.TeardownRun) {
			ss := r.Status.Step("dump")
			ss.State, ss.Outputs, ss.Message = nil, nil, ""
		})
		Expect(stepOf(ctx, cm, "dump").State).NotTo(HaveKey("jobUID"))

		By("a new operator adopts the existing Job")
		stopOperator = startOperator()
		Eventually(stepState(ctx, cm, "dump"), 10*time.Second).Should(HaveKeyWithValue("jobUID", string(created.UID)))
		var jobs batchv1.JobList
		Expect(k8s.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelRunUID: string(run.UID)})).To(Succeed())
		Expect(jobs.Items).To(HaveLen(1), "no second Job")
		finishJob(ctx, job(), true)
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
	})

	It("never trusts a same-named Job it did not create: neither one there before, nor one that replaced its own", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "wary", framework.JobStep("dump", framework.Container("busybox", nil, "true")))
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)

		By("a leftover Job already has the name the step will use")
		squatted := configMap(ns, "squatted", map[string]string{"app": p.Name})
		Expect(k8s.Create(ctx, squatted)).To(Succeed())
		Eventually(finalizers(ctx, squatted), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		run := naming.RunName("TeardownPolicy", ns, p.Name, squatted.Name, squatted.UID)
		leftover := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: naming.JobName(run, "dump", 1), Labels: map[string]string{"owner": "someone-else"}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}},
		}
		Expect(k8s.Create(ctx, leftover)).To(Succeed())
		finishJob(ctx, leftover, true)
		Expect(k8s.Delete(ctx, squatted)).To(Succeed())
		Eventually(runPhase(ctx, squatted), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		Expect(stepOf(ctx, squatted, "dump").Message).To(ContainSubstring("already exists and was not created by attempt 1 of this step"))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(leftover), leftover)).To(Succeed())
		Expect(leftover.Labels).To(Equal(map[string]string{"owner": "someone-else"}), "the leftover is not touched")
		Expect(leftover.Spec.TTLSecondsAfterFinished).To(BeNil())

	})

	It("never trusts a Job that replaced its own under the same name", Serial, func() {
		ns := newNamespace(ctx)
		cm, job := startJobStep(ctx, ns, "replaced")
		original := job()

		By("replacing the Job by a completed one of the same name and labels while the operator is down")
		stopOperator()
		Expect(k8s.Delete(ctx, original, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		Eventually(job, 5*time.Second).Should(BeNil())
		impostor := original.DeepCopy()
		impostor.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: original.Name, Labels: original.Labels}
		impostor.Spec.Selector, impostor.Spec.ManualSelector = nil, nil
		impostor.Spec.Template.Labels = nil
		Expect(k8s.Create(ctx, impostor)).To(Succeed())
		finishJob(ctx, impostor, true)
		stopOperator = startOperator()

		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		msg := stepOf(ctx, cm, "dump").Message
		Expect(msg).To(ContainSubstring("is not the one this step created (another Job of that name"))
		Expect(msg).NotTo(ContainSubstring(string(impostor.UID)), "another object's UID is never shown")
		Expect(gone(ctx, cm)()).To(BeFalse(), "the step did not succeed")
	})

	It("deletes its running Job when the step times out", func() {
		ns := newNamespace(ctx)
		step := framework.JobStep("slow", framework.Container("busybox", nil, "sleep", "3600"))
		step.Timeout = dur(2 * time.Second)
		step.OnFailure = v1alpha1.OnFailureContinue
		p := namespacedPolicy(ns, "bounded", step, waitStep("after", 0))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		job := jobOf(ctx, p, cm, "slow", 1)
		Eventually(job, 10*time.Second).ShouldNot(BeNil())
		Expect(*job().Spec.ActiveDeadlineSeconds).To(BeNumerically("<=", 2))
		uid := job().UID
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		Expect(stepOf(ctx, cm, "slow").Message).To(ContainSubstring("timed out after 2s"))
		Eventually(func() types.UID {
			if j := job(); j != nil && j.DeletionTimestamp == nil {
				return j.UID
			}
			return ""
		}, 5*time.Second).Should(BeEmpty(), "the Job %s no longer runs behind the pipeline", uid)
	})

	It("deletes its running Job when someone breaks glass, and any Job of the run when the run ends", func() {
		ns := newNamespace(ctx)
		cm, job := startJobStep(ctx, ns, "glass")
		run := runFor(ctx, cm)()

		By("a Job of the run's that its status never recorded (a crash lost the write)")
		stray := job().DeepCopy()
		stray.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "stray", Labels: job().Labels}
		stray.Spec.Selector, stray.Spec.ManualSelector, stray.Spec.Template.Labels = nil, nil, nil
		Expect(k8s.Create(ctx, stray)).To(Succeed())
		finishJob(ctx, stray, true)

		By("breaking glass while the Job runs")
		update(ctx, cm, func(c *corev1.ConfigMap) {
			c.Annotations = map[string]string{v1alpha1.AnnotationAbandon: asRequest("ops: the database is already gone")}
		})
		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		Expect(runFor(ctx, cm)().Status.Phase).To(Equal(v1alpha1.RunAbandoned))
		Eventually(job, 5*time.Second).Should(BeNil(), "the running Job is deleted")
		Eventually(func() *int32 {
			j := &batchv1.Job{}
			if k8s.Get(ctx, client.ObjectKeyFromObject(stray), j) != nil {
				return nil
			}
			return j.Spec.TTLSecondsAfterFinished
		}, 5*time.Second).Should(HaveValue(Equal(int32(3600))), "the finished stray Job found by its run label may be cleaned up")
		Eventually(func() []string { return runFor(ctx, cm)().Finalizers }, 5*time.Second).ShouldNot(ContainElement(v1alpha1.FinalizerRun))
		Expect(run.UID).To(Equal(runFor(ctx, cm)().UID))
	})

	It("takes the outcome of a Job that completed before the step's deadline while the operator was down", Serial, func() {
		ns := newNamespace(ctx)
		step := framework.JobStep("dump", framework.Container("postgres:16", nil, "pg_dump"))
		step.Timeout = dur(4 * time.Second)
		p := namespacedPolicy(ns, "downtime", step)
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		job := jobOf(ctx, p, cm, "dump", 1)
		Eventually(job, 10*time.Second).ShouldNot(BeNil())
		Eventually(stepState(ctx, cm, "dump"), 5*time.Second).Should(HaveKey("jobUID"))

		By("stopping the operator; the Job completes; the step's deadline passes")
		stopOperator()
		finishJob(ctx, job(), true)
		deadline := stepOf(ctx, cm, "dump").Deadline.Time
		time.Sleep(time.Until(deadline) + time.Second)
		stopOperator = startOperator()

		Eventually(gone(ctx, cm), 10*time.Second).Should(BeTrue())
		ss := stepOf(ctx, cm, "dump")
		Expect(ss.Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(ss.Message).To(And(ContainSubstring("completed"), ContainSubstring("by the step's deadline")))
	})

	It("fails at once in a namespace being deleted, saying why, for a TeardownPolicy", func() {
		ns := newNamespace(ctx)
		p := namespacedPolicy(ns, "doomed", framework.JobStep("dump", framework.Container("postgres:16", nil, "pg_dump")))
		cm := protect(ctx, p, "target")
		By("deleting the namespace (envtest runs no namespace controller: it stays Terminating)")
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 10*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss := stepOf(ctx, cm, "dump")
		Expect(ss.Attempts).To(Equal(int32(1)))
		Expect(ss.Message).To(And(ContainSubstring("namespace "+ns+" is being deleted"), ContainSubstring("use a ClusterTeardownPolicy whose job.namespace names another namespace")))
		Expect(runFor(ctx, cm)().Namespace).To(Equal(runNamespace))
	})

	It("reports a template it cannot use, naming the field, and protects nothing", func() {
		ns := newNamespace(ctx)
		spec := framework.Container("busybox", nil, "echo ${HOME}")
		spec["backoffLimit"] = "${object.data.retries}"
		spec["template"].(map[string]any)["spec"].(map[string]any)["restartPolicy"] = "Always"
		step := framework.JobStep("bad", spec)
		step.Job.Namespace = "kube-system"
		p := namespacedPolicy(ns, "invalid", step)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		cond := expectReady(ctx, p, metav1.ConditionFalse)
		Expect(cond.Message).To(And(
			ContainSubstring(`spec.steps[0].job.namespace: Forbidden: a TeardownPolicy runs Jobs only in its own namespace`),
			ContainSubstring(`spec.steps[0].job.template.spec.template.spec.containers[0].command[0]`),
			ContainSubstring(`write $${ for a literal ${`),
			ContainSubstring(`cannot fill a number or boolean field`),
			ContainSubstring(`spec.steps[0].job.template.spec.template.spec.restartPolicy: Unsupported value: "Always"`)))
		cm := configMap(ns, "target", map[string]string{"app": p.Name})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Consistently(finalizers(ctx, cm), time.Second).Should(BeEmpty())

		By("a misspelt field")
		spec = framework.Container("busybox", nil, "true")
		spec["parallelizm"] = 2
		typo := namespacedPolicy(ns, "typo", framework.JobStep("bad", spec))
		Expect(k8s.Create(ctx, typo)).To(Succeed())
		Expect(expectReady(ctx, typo, metav1.ConditionFalse).Message).To(ContainSubstring(`spec.steps[0].job.template.spec: Invalid value: unknown field "parallelizm"`))
	})
})
