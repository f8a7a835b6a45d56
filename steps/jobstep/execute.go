package jobstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/teardown-dev/teardown-operator/steps"
)

// Keys of the step's state in the run status.
const (
	stateJob       = "job"    // namespace/name of the attempt's Job
	stateUID       = "jobUID" // the UID of the Job the step created or adopted; no other is trusted
	stateAttempt   = "attempt"
	stateOutcome   = "outcome" // Succeeded or Failed, once the Job's outcome is recorded
	stateRetryable = "retryable"
	stateMessage   = "outcomeMessage"
)

const (
	outcomeSucceeded = "Succeeded"
	outcomeFailed    = "Failed"
	// retrySoon is the wait after a transient API error, which is not an attempt.
	retrySoon = 2 * time.Second
)

// state is what the step keeps in its status between reconciles.
type state struct {
	attempt   int32
	namespace string
	name      string
	uid       types.UID
	outcome   string
	retryable bool
	message   string
}

func readState(m map[string]string) state {
	var s state
	a, _ := strconv.Atoi(m[stateAttempt])
	s.attempt = int32(a)
	s.namespace, s.name, _ = strings.Cut(m[stateJob], "/")
	s.uid = types.UID(m[stateUID])
	s.outcome = m[stateOutcome]
	s.retryable = m[stateRetryable] == "true"
	s.message = m[stateMessage]
	return s
}

func (s state) encode() map[string]string {
	m := map[string]string{stateAttempt: strconv.Itoa(int(s.attempt))}
	if s.name != "" {
		m[stateJob] = s.namespace + "/" + s.name
	}
	if s.uid != "" {
		m[stateUID] = string(s.uid)
	}
	if s.outcome != "" {
		m[stateOutcome] = s.outcome
		m[stateRetryable] = strconv.FormatBool(s.retryable)
		m[stateMessage] = s.message
	}
	return m
}

func (s state) ref() string { return s.namespace + "/" + s.name }

func (s state) key() client.ObjectKey { return client.ObjectKey{Namespace: s.namespace, Name: s.name} }

// Execute implements steps.Action. Each call does one thing: create (or adopt) the attempt's Job,
// look at it, or, once its outcome is recorded, let the Job controller clean it up and finish.
func (a *action) Execute(ctx context.Context, in *steps.Input) steps.Result {
	st := readState(in.Status.State)
	if st.attempt != in.Status.Attempts {
		st = state{attempt: in.Status.Attempts} // a new attempt gets a new Job
	}
	switch {
	case st.outcome != "":
		return a.conclude(ctx, st)
	case st.uid == "":
		return a.create(ctx, in, st)
	}
	return a.observe(ctx, in, st)
}

func (a *action) create(ctx context.Context, in *steps.Input, st state) steps.Result {
	job, err := a.build(ctx, in)
	if err != nil {
		return steps.Fail(false, "%v", err)
	}
	st.namespace, st.name = job.Namespace, job.Name
	msg := fmt.Sprintf("Job %s created; waiting for it to finish", st.ref())
	err = a.kind.client.Create(ctx, job)
	switch {
	case err == nil:
	case apierrors.IsAlreadyExists(err):
		// Created by this step before a crash (then it is adopted), or by someone else.
		live := &batchv1.Job{}
		if err := a.kind.reader.Get(ctx, st.key(), live); err != nil {
			return steps.Waiting(retrySoon, "Job %s exists; reading it: %v", st.ref(), err)
		}
		if !ours(live, in.Run, a.step, st.attempt) {
			return steps.Fail(false, "a Job named %s already exists and was not created by attempt %d of this step (its labels %s=%q, %s=%q); delete it to let the step run",
				st.ref(), st.attempt, steps.LabelRunUID, live.Labels[steps.LabelRunUID], steps.LabelAttempt, live.Labels[steps.LabelAttempt])
		}
		job = live
		msg = fmt.Sprintf("Job %s adopted (this step created it before the operator restarted); waiting for it to finish", st.ref())
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return steps.Fail(false, "%s", terminatingMessage(job.Namespace, a.namespaced))
	case apierrors.IsNotFound(err):
		return steps.Fail(false, "namespace %s does not exist: %v", job.Namespace, err)
	case apierrors.IsInvalid(err):
		return steps.Fail(false, "the API server refused Job %s: %v", st.ref(), err)
	case transient(err):
		return steps.Waiting(retrySoon, "creating Job %s: %v; trying again", st.ref(), err)
	default:
		return steps.Fail(true, "creating Job %s: %v", st.ref(), err)
	}
	st.uid = job.UID
	res := steps.Waiting(a.kind.recheck, "%s", msg)
	res.State = st.encode()
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
	job, other, err := a.read(ctx, st)
	if err != nil {
		return steps.Waiting(retrySoon, "reading Job %s: %v", st.ref(), err)
	}
	if job == nil {
		msg := fmt.Sprintf("Job %s (uid %s) was deleted before it finished", st.ref(), st.uid)
		if other != "" {
			msg = fmt.Sprintf("Job %s (uid %s) was replaced by another Job of the same name (uid %s), which is not trusted", st.ref(), st.uid, other)
		}
		if a.terminating(ctx, st.namespace) {
			return steps.Fail(false, "%s: %s", msg, terminatingMessage(st.namespace, a.namespaced))
		}
		return steps.Fail(true, "%s", msg)
	}
	o := a.decide(ctx, in, job)
	if o == nil {
		res := steps.Waiting(a.kind.recheck, "waiting for Job %s to finish (%s)", st.ref(), summary(job))
		res.State = st.encode()
		return res
	}
	// The outcome is written to the run's status before the Job may be cleaned up (conclude),
	// so the Job (and its failed pod's log) is never deleted while the run still needs it.
	st.outcome, st.retryable, st.message = o.phase, o.retryable, o.message
	res := steps.Waiting(time.Millisecond, "%s", o.message)
	res.State = st.encode()
	return res
}

// outcome is a finished Job's result for the step.
type outcome struct {
	phase     string
	retryable bool
	message   string
}

// decide returns the Job's outcome, or nil while it runs.
func (a *action) decide(ctx context.Context, in *steps.Input, job *batchv1.Job) *outcome {
	ref := job.Namespace + "/" + job.Name
	complete, failed := condition(job, batchv1.JobComplete), condition(job, batchv1.JobFailed)
	if a.success != nil {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
		if err != nil {
			return &outcome{outcomeFailed, false, fmt.Sprintf("Job %s: %v", ref, err)}
		}
		ok, err := a.success.EvalBool(ctx, in.Vars.With(VarJob, obj))
		switch {
		case err == nil && ok:
			return &outcome{outcomeSucceeded, false, fmt.Sprintf("Job %s: successCondition holds (%s)", ref, summary(job))}
		case complete != nil && err != nil:
			return &outcome{outcomeFailed, false, fmt.Sprintf("Job %s completed, but successCondition cannot be evaluated: %v", ref, err)}
		case complete != nil:
			return &outcome{outcomeFailed, true, fmt.Sprintf("Job %s completed, but successCondition is false: %s (%s)", ref, a.success, summary(job))}
		}
	} else if complete != nil {
		return &outcome{outcomeSucceeded, false, fmt.Sprintf("Job %s completed (%s)", ref, summary(job))}
	}
	if failed != nil {
		return &outcome{outcomeFailed, true, a.failureMessage(ctx, job, failed)}
	}
	return nil
}

// conclude lets the Job controller delete the Job after its TTL, now that the outcome is in the
// run's status, and ends the step with that outcome.
func (a *action) conclude(ctx context.Context, st state) steps.Result {
	if err := a.setTTL(ctx, st); err != nil {
		res := steps.Waiting(retrySoon, "%s (setting the Job's ttlSecondsAfterFinished: %v; trying again)", st.message, err)
		return res
	}
	var res steps.Result
	if st.outcome == outcomeSucceeded {
		res = steps.Done("%s", st.message)
	} else {
		res = steps.Fail(st.retryable, "%s", st.message)
	}
	res.Outputs = outputs(st)
	return res
}

// setTTL sets the Job's ttlSecondsAfterFinished. A Job that is gone or was replaced needs none.
func (a *action) setTTL(ctx context.Context, st state) error {
	job, _, err := a.read(ctx, st)
	if err != nil || job == nil {
		return err
	}
	if job.Spec.TTLSecondsAfterFinished != nil && *job.Spec.TTLSecondsAfterFinished == a.ttl {
		return nil
	}
	patched := job.DeepCopy()
	patched.Spec.TTLSecondsAfterFinished = ptr.To(a.ttl)
	err = a.kind.client.Patch(ctx, patched, client.MergeFromWithOptions(job, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Release implements steps.Releaser: a step that ended without the Job's outcome deletes a Job
// still running, and lets a finished one be cleaned up after its TTL.
func (a *action) Release(ctx context.Context, in *steps.Input) {
	st := readState(in.Status.State)
	if st.uid == "" {
		return
	}
	log := logf.FromContext(ctx).WithValues("job", st.ref(), "step", a.step)
	job, _, err := a.read(ctx, st)
	switch {
	case err != nil:
		log.Error(err, "cannot read the Job of an interrupted step; it is left as it is")
		return
	case job == nil:
		return
	case condition(job, batchv1.JobComplete) != nil || condition(job, batchv1.JobFailed) != nil:
		if err := a.setTTL(ctx, st); err != nil {
			log.Error(err, "cannot set ttlSecondsAfterFinished on the Job of an interrupted step")
		}
		return
	}
	err = a.kind.client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &st.uid})
	if client.IgnoreNotFound(err) != nil {
		log.Error(err, "cannot delete the running Job of an interrupted step")
		return
	}
	log.Info("deleted the running Job of an interrupted step")
}

// read returns the step's Job: from the cache when it holds the recorded UID, else from the API
// server (the cache may not have seen the Job yet). It returns nil when the Job is gone, with the
// UID of a Job that now has its name, if any.
func (a *action) read(ctx context.Context, st state) (*batchv1.Job, types.UID, error) {
	job := &batchv1.Job{}
	err := a.kind.client.Get(ctx, st.key(), job)
	if err == nil && job.UID == st.uid {
		return job, "", nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, "", err
	}
	err = a.kind.reader.Get(ctx, st.key(), job)
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", nil
	case err != nil:
		return nil, "", err
	case job.UID != st.uid:
		return nil, job.UID, nil
	}
	return job, "", nil
}

// terminating reports whether ns is being deleted, from the engine's namespace cache.
func (a *action) terminating(ctx context.Context, ns string) bool {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	err := a.kind.client.Get(ctx, client.ObjectKey{Name: ns}, m)
	return err == nil && m.DeletionTimestamp != nil
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
	return fmt.Sprintf("active %d, succeeded %d, failed %d", s.Active, s.Succeeded, s.Failed)
}

// outputs are the step's outputs: where its Job is, for later steps.
func outputs(st state) map[string]apiextensionsv1.JSON {
	return map[string]apiextensionsv1.JSON{
		"jobName":      {Raw: jsonString(st.name)},
		"jobNamespace": {Raw: jsonString(st.namespace)},
	}
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// transient reports whether an API error is likely to go away by itself.
func transient(err error) bool {
	var ne net.Error
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) ||
		apierrors.IsConflict(err) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}
