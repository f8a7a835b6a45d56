package jobstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// The step's state in the run status: the attempt's Job (namespace/name) and the UID of the Job
// the step created or adopted (no other is trusted).
var recordKeys = steps.RecordKeys{Object: "job", UID: "jobUID"}

// retrySoon is the wait after a transient API error, which is not an attempt.
const retrySoon = 2 * time.Second

// state is what the step keeps in its status between reconciles.
type state = steps.ObjectRecord

func readState(m map[string]string) state { return steps.ReadRecord(m, recordKeys) }

// Execute implements steps.Action. Each call does one thing: create (or adopt) the attempt's Job,
// or look at it. The Job is cleaned up only after the outcome is written (Release).
func (a *action) Execute(ctx context.Context, in *steps.Input) steps.Result {
	st := readState(in.Status.State)
	if st.Attempt != in.Status.Attempts {
		st = state{Attempt: in.Status.Attempts} // a new attempt gets a new Job
	}
	if st.UID == "" {
		return a.create(ctx, in, st)
	}
	return a.observe(ctx, in, st)
}

func (a *action) create(ctx context.Context, in *steps.Input, st state) steps.Result {
	job, err := a.build(ctx, in)
	if err != nil {
		return steps.Fail(false, "%v", err)
	}
	st.Namespace, st.Name = job.Namespace, job.Name
	msg := fmt.Sprintf("Job %s created; waiting for it to finish", st.Ref())
	err = a.kind.client.Create(ctx, job)
	switch {
	case err == nil:
	case apierrors.IsAlreadyExists(err):
		// Created by this step before a crash (then it is adopted), or by someone else.
		live := &batchv1.Job{}
		if err := a.kind.reader.Get(ctx, st.Key(), live); err != nil {
			return steps.Waiting(retrySoon, "Job %s exists; reading it: %v", st.Ref(), err)
		}
		if !ours(live, in.Run, a.step, st.Attempt) {
			// Its labels are not shown: they may name another tenant's run.
			return steps.Fail(false, "a Job named %s already exists and was not created by attempt %d of this step; delete it to let the step run",
				st.Ref(), st.Attempt)
		}
		job = live
		msg = fmt.Sprintf("Job %s adopted (this step created it before the operator restarted); waiting for it to finish", st.Ref())
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return steps.Fail(false, "%s", terminatingMessage(job.Namespace, a.namespaced))
	case apierrors.IsNotFound(err):
		return steps.Fail(false, "namespace %s does not exist: %v", job.Namespace, err)
	case apierrors.IsInvalid(err):
		return steps.Fail(false, "the API server refused Job %s: %v", st.Ref(), err)
	case steps.Transient(err):
		return steps.Waiting(retrySoon, "creating Job %s: %v; trying again", st.Ref(), err)
	default:
		return steps.Fail(true, "creating Job %s: %v", st.Ref(), err)
	}
	st.UID = job.UID
	res := steps.Waiting(a.kind.recheck, "%s", msg)
	res.State = st.Encode(recordKeys)
	res.Outputs = outputs(st)
	return res
}

// terminatingMessage explains why no Job can run in a namespace being deleted.
func terminatingMessage(ns string, namespaced bool) string {
	msg := fmt.Sprintf("namespace %s is being deleted, and no Job can be created in a terminating namespace", ns)
	if namespaced {
		msg += "; a TeardownPolicy runs Jobs only in its own namespace: to run Jobs while a namespace is deleted, use a ClusterTeardownPolicy whose job.namespace names another namespace"
	}
	return msg
}

func (a *action) observe(ctx context.Context, in *steps.Input, st state) steps.Result {
	job, replaced, err := a.read(ctx, in, st)
	if err != nil {
		return steps.Waiting(retrySoon, "reading Job %s: %v", st.Ref(), err)
	}
	if job == nil {
		msg := fmt.Sprintf("Job %s was deleted before it finished", st.Ref())
		if replaced {
			msg = fmt.Sprintf("Job %s is not the one this step created (another Job of that name, or one without the step's labels), so it is not trusted", st.Ref())
		}
		if a.kind.terminating(ctx, st.Namespace) {
			return steps.Fail(false, "%s: %s", msg, terminatingMessage(st.Namespace, a.namespaced))
		}
		return steps.Fail(true, "%s", msg)
	}
	// On an outcome the step ends now; the Job (and its failed pod's log) is cleaned up only once
	// the outcome is written (Release, after the status write).
	if o := a.decide(ctx, in, st, job); o != nil {
		return *o
	}
	res := steps.Waiting(a.kind.recheck, "waiting for Job %s to finish (%s)", st.Ref(), summary(job))
	res.State = st.Encode(recordKeys)
	return res
}

// decide returns the step's result for the Job's outcome, with the step's state and outputs, or
// nil while the Job runs. A Failed Job fails the attempt whatever successCondition says.
func (a *action) decide(ctx context.Context, in *steps.Input, st state, job *batchv1.Job) *steps.Result {
	ref := job.Namespace + "/" + job.Name
	complete, failed := outcome(job)
	var res steps.Result
	switch {
	case failed != nil:
		res = steps.Fail(true, "%s", a.failureMessage(ctx, job, failed))
	case a.success != nil:
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
		if err != nil {
			res = steps.Fail(false, "Job %s: %v", ref, err)
			break
		}
		ok, err := a.success.EvalBool(ctx, in.Vars.With(VarJob, obj))
		// Only Complete is final: at SuccessCriteriaMet the succeeded pods may not be counted
		// yet (status.succeeded absent), so a false or failing condition waits for Complete.
		if complete != nil && complete.Type != batchv1.JobComplete {
			complete = nil
		}
		switch {
		case err == nil && ok:
			res = steps.Done("Job %s: successCondition holds (%s)", ref, summary(job))
		case complete != nil && err != nil:
			res = steps.Fail(false, "Job %s completed, but successCondition cannot be evaluated: %v", ref, err)
		case complete != nil:
			res = steps.Fail(true, "Job %s completed, but successCondition is false: %s (%s)", ref, a.success, summary(job))
		default:
			return nil
		}
	case complete != nil:
		res = steps.Done("Job %s completed (%s)", ref, summary(job))
	default:
		return nil
	}
	res.State, res.Outputs = st.Encode(recordKeys), outputs(st)
	return &res
}

// Settled implements steps.Settler: at the step's deadline, a Job that finished by then (while
// the operator was down, say) gives the step its outcome rather than a timeout.
func (a *action) Settled(ctx context.Context, in *steps.Input, deadline time.Time) (steps.Result, bool) {
	st := readState(in.Status.State)
	if st.UID == "" || st.Attempt != in.Status.Attempts {
		return steps.Result{}, false
	}
	job, _, err := a.read(ctx, in, st)
	if err != nil || job == nil {
		return steps.Result{}, false
	}
	finished := finishTime(job)
	if finished.IsZero() || finished.After(deadline) {
		return steps.Result{}, false
	}
	if o := a.decide(ctx, in, st, job); o != nil {
		return *o, true
	}
	return steps.Result{}, false
}

// outcome returns the condition that decides the step: complete or failed, at most one of them
// set, both nil while the Job runs. The Job controller sets Complete and Failed only once every
// pod has terminated, which takes a pod's termination grace period (30s unless set) after the
// Job's deadline, but SuccessCriteriaMet and FailureTarget as soon as it decides. While pods are
// still stopping, those decide the step: it ends at the Job's deadline, with the Job's reason,
// rather than a grace period later at its own. Once no pod is left, Complete or Failed follow at
// once, with the pods counted, and the step waits for them.
func outcome(job *batchv1.Job) (complete, failed *batchv1.JobCondition) {
	complete, failed = decision(job)
	final := (complete != nil && complete.Type == batchv1.JobComplete) || (failed != nil && failed.Type == batchv1.JobFailed)
	if !final && !stopping(job) {
		return nil, nil
	}
	return complete, failed
}

// decision returns the condition by which the Job controller decided the Job, final or not:
// complete or failed, both nil while it runs.
func decision(job *batchv1.Job) (complete, failed *batchv1.JobCondition) {
	if c := condition(job, batchv1.JobFailed); c != nil {
		return nil, c
	}
	if c := condition(job, batchv1.JobComplete); c != nil {
		return c, nil
	}
	if c := condition(job, batchv1.JobFailureTarget); c != nil {
		return nil, c
	}
	return condition(job, batchv1.JobSuccessCriteriaMet), nil
}

// stopping reports whether pods of the Job still run or are being stopped.
func stopping(job *batchv1.Job) bool {
	return job.Status.Active > 0 || (job.Status.Terminating != nil && *job.Status.Terminating > 0)
}

// finishTime is when the Job's outcome was decided (FailureTarget or SuccessCriteriaMet, which
// precede Failed and Complete by the pods' termination), zero while it runs. A Job decided is let
// go with its TTL, not deleted as running (let), even while its pods are still stopping.
func finishTime(job *batchv1.Job) time.Time {
	for _, t := range []batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed, batchv1.JobSuccessCriteriaMet} {
		if c := condition(job, t); c != nil {
			return c.LastTransitionTime.Time
		}
	}
	if c := condition(job, batchv1.JobComplete); c != nil {
		if job.Status.CompletionTime != nil {
			return job.Status.CompletionTime.Time
		}
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// Release implements steps.Releaser. Once an attempt has ended and its outcome is written, a
// finished Job may be cleaned up after its TTL, and a Job still running (the step timed out, was
// abandoned, or succeeded early by its successCondition) is deleted: no teardown work goes on
// behind the pipeline's back. ReleaseRun makes up for what fails here.
func (a *action) Release(ctx context.Context, in *steps.Input) {
	st := readState(in.Status.State)
	if st.UID == "" {
		return
	}
	job, _, err := a.read(ctx, in, st)
	if err == nil && job != nil {
		err = a.kind.let(ctx, job)
	}
	if err != nil {
		logf.FromContext(ctx).Error(err, "cannot yet let go of the step's Job; the run will when it ends", "job", st.Ref(), "step", a.step)
	}
}

// ReleaseRun implements steps.Owner: when a run has finished, every Job its steps made, found by
// label (so also one whose creation a crash kept out of the status), is let go: deleted while it
// runs, else given its TTL. Jobs already let go cost nothing but the lookup in the cache.
func (k *Kind) ReleaseRun(ctx context.Context, run *v1alpha1.TeardownRun) error {
	var jobs batchv1.JobList
	if err := k.client.List(ctx, &jobs, client.MatchingLabels{v1alpha1.LabelRunUID: string(run.UID)}); err != nil {
		return fmt.Errorf("listing the run's Jobs: %w", err)
	}
	var errs []error
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if err := k.let(ctx, job); err != nil {
			errs = append(errs, fmt.Errorf("job %s/%s: %w", job.Namespace, job.Name, err))
		}
	}
	return errors.Join(errs...)
}

// let lets go of a Job whose outcome the run no longer needs: a finished one gets the
// ttlSecondsAfterFinished its step gave it (annotationTTL; the Job controller deletes it after
// that), a running one is deleted with its pods. job may come from the cache: it is not modified.
func (k *Kind) let(ctx context.Context, job *batchv1.Job) error {
	var err error
	switch {
	case job.DeletionTimestamp != nil:
		return nil
	case finishTime(job).IsZero():
		err = k.client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID})
		if err == nil {
			logf.FromContext(ctx).Info("deleted a Job still running after its step ended", "job", job.Namespace+"/"+job.Name)
		}
	case job.Spec.TTLSecondsAfterFinished != nil:
		return nil
	default:
		// Not locked to the resourceVersion, which the Job controller changes often, but to the
		// UID: a patch that would change it is refused (Invalid), so a Job that replaced this one
		// under its name is left alone.
		patch := fmt.Sprintf(`{"metadata":{"uid":%q},"spec":{"ttlSecondsAfterFinished":%d}}`, job.UID, ttlOf(job))
		err = k.client.Patch(ctx, job.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
		return nil // gone, or replaced by another Job of the same name
	}
	return err
}

// ttlOf is the ttlSecondsAfterFinished a Job's step gave it, DefaultTTL when unreadable.
func ttlOf(job *batchv1.Job) int32 {
	if n, err := strconv.ParseInt(job.Annotations[annotationTTL], 10, 32); err == nil && n >= 0 {
		return int32(n)
	}
	return int32(DefaultTTL / time.Second)
}

// read returns the step's Job: from the cache when it holds the recorded UID, else from the API
// server (the cache may not have seen the Job yet). It returns nil when the Job is gone, with the
// UID of a Job that now has its name, if any.
// read returns the record's Job if it is still the one the step created: same UID, in a namespace
// the step may use, carrying the labels the step gave it for this run, step and attempt. It
// reports replaced when a Job of that name is there that is not the step's (its UID is never
// shown: it may be another tenant's).
func (a *action) read(ctx context.Context, in *steps.Input, st state) (job *batchv1.Job, replaced bool, err error) {
	if a.namespaced && st.Namespace != in.PolicyNamespace {
		return nil, true, nil // a TeardownPolicy's Jobs run in its own namespace only
	}
	job = &batchv1.Job{}
	err = a.kind.client.Get(ctx, st.Key(), job)
	if err == nil && job.UID == st.UID {
		return a.own(job, in, st)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	err = a.kind.reader.Get(ctx, st.Key(), job)
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case job.UID != st.UID:
		return nil, true, nil
	}
	return a.own(job, in, st)
}

// own checks that a Job read by the record's UID carries the step's labels.
func (a *action) own(job *batchv1.Job, in *steps.Input, st state) (*batchv1.Job, bool, error) {
	if !ours(job, in.Run, a.step, st.Attempt) {
		return nil, true, nil
	}
	return job, false, nil
}

func condition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// summary says how the Job's pods stand.
func summary(job *batchv1.Job) string {
	s := job.Status
	succeeded, failed := int(s.Succeeded), int(s.Failed)
	// Pods that ended but are not counted yet: the Job controller counts them a moment after it
	// has decided the Job's outcome, which the step may see first.
	if u := s.UncountedTerminatedPods; u != nil {
		succeeded, failed = succeeded+len(u.Succeeded), failed+len(u.Failed)
	}
	if s.Terminating != nil && *s.Terminating > 0 {
		return fmt.Sprintf("active %d, terminating %d, succeeded %d, failed %d", s.Active, *s.Terminating, succeeded, failed)
	}
	return fmt.Sprintf("active %d, succeeded %d, failed %d", s.Active, succeeded, failed)
}

// outputs are the step's outputs: where its Job is, for later steps.
func outputs(st state) map[string]apiextensionsv1.JSON {
	return map[string]apiextensionsv1.JSON{
		OutputJobName:      {Raw: jsonString(st.Name)},
		OutputJobNamespace: {Raw: jsonString(st.Namespace)},
	}
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
