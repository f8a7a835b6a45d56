package jobstep

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps"
)

// Environment variables every container of a step's Job gets, naming the target and the run.
const (
	EnvTargetAPIVersion = "TEARDOWN_TARGET_API_VERSION"
	EnvTargetKind       = "TEARDOWN_TARGET_KIND"
	EnvTargetNamespace  = "TEARDOWN_TARGET_NAMESPACE"
	EnvTargetName       = "TEARDOWN_TARGET_NAME"
	EnvTargetUID        = "TEARDOWN_TARGET_UID"
	EnvRunName          = "TEARDOWN_RUN_NAME"
	EnvRunNamespace     = "TEARDOWN_RUN_NAMESPACE"
	EnvRunUID           = "TEARDOWN_RUN_UID"
	EnvStep             = "TEARDOWN_STEP"
	EnvAttempt          = "TEARDOWN_ATTEMPT"
)

// annotationTTL on a Job is the ttlSecondsAfterFinished its step gives it once the outcome is
// recorded, for the sweep when the run ends (Kind.ReleaseRun), which has no step at hand.
const annotationTTL = naming.Domain + "/ttl-seconds-after-finished"

// jobNamespace is where the step's Job runs.
func (a *action) jobNamespace(ctx context.Context, in *steps.Input) (string, error) {
	switch {
	case a.namespace != nil:
		ns, err := a.namespace.Render(ctx, in.Vars)
		if err != nil {
			return "", fmt.Errorf("namespace: %w", err)
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return "", fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; "))
		}
		if a.namespaced && ns != in.PolicyNamespace {
			return "", fmt.Errorf("namespace %q: a TeardownPolicy runs Jobs only in its own namespace %q", ns, in.PolicyNamespace)
		}
		return ns, nil
	case a.namespaced:
		return in.PolicyNamespace, nil
	case in.Run.Spec.Target.Namespace == "":
		return "", fmt.Errorf("the target is cluster-scoped: set job.namespace to say where the Job runs")
	}
	return in.Run.Spec.Target.Namespace, nil
}

// build renders the Job of the current attempt.
func (a *action) build(ctx context.Context, in *steps.Input) (*batchv1.Job, error) {
	ns, err := a.jobNamespace(ctx, in)
	if err != nil {
		return nil, err
	}
	rendered, err := a.spec.Render(ctx, in.Vars)
	if err != nil {
		return nil, err // names the string's path
	}
	raw, err := json.Marshal(rendered)
	if err != nil {
		return nil, fmt.Errorf("template.spec: %w", err)
	}
	var spec batchv1.JobSpec
	// A rendered value can still be wrong for its field (a quantity such as "lots").
	if _, err := sigsjson.UnmarshalStrict(raw, &spec); err != nil {
		return nil, fmt.Errorf("template.spec after interpolation: %w", err)
	}
	labels, err := renderMeta(ctx, a.labels, in, "template.metadata.labels")
	if err != nil {
		return nil, err
	}
	annotations, err := renderMeta(ctx, a.annotations, in, "template.metadata.annotations")
	if err != nil {
		return nil, err
	}
	return a.assemble(in, ns, spec, labels, annotations), nil
}

// assemble makes the Job of the current attempt from its rendered parts: the run's name, labels
// and environment, the deadline, the owner.
func (a *action) assemble(in *steps.Input, ns string, spec batchv1.JobSpec, labels, annotations map[string]string) *batchv1.Job {
	attempt := in.Status.Attempts
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ns,
			Name:        naming.JobName(in.Run.Name, a.step, attempt),
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: spec,
	}
	job.Annotations[annotationTTL] = strconv.Itoa(int(a.ttl))
	stamp(job, ownLabels(in.Run, a.step, attempt), runEnv(in.Run, a.step, attempt))
	// The Job ends before its step: the Job controller fails it (DeadlineExceeded) a little
	// before the step's deadline, so the step still records why, with the pod's log, instead of
	// timing out blind.
	if d := in.Status.Deadline; d != nil {
		if limit := jobDeadline(d.Sub(in.Now)); job.Spec.ActiveDeadlineSeconds == nil || *job.Spec.ActiveDeadlineSeconds > limit {
			job.Spec.ActiveDeadlineSeconds = ptr.To(limit)
		}
	}
	// Kept until the step has recorded the outcome; set by conclude.
	job.Spec.TTLSecondsAfterFinished = nil
	if ns == in.Run.Namespace {
		// Deleted with its run (after the run retention) when TTL has not removed it before.
		job.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "TeardownRun", Name: in.Run.Name, UID: in.Run.UID,
		}}
	}
	return job
}

// stamp puts the run's labels on the Job and its pods, and the run's variables in every
// container's environment; pods default to restartPolicy Never, so a failed pod is the Job's to retry.
func stamp(job *batchv1.Job, own map[string]string, env []corev1.EnvVar) {
	for k, v := range own {
		job.Labels[k] = v
	}
	pod := &job.Spec.Template
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range own {
		pod.Labels[k] = v
	}
	if pod.Spec.RestartPolicy == "" {
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Env = withEnv(pod.Spec.InitContainers[i].Env, env)
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = withEnv(pod.Spec.Containers[i].Env, env)
	}
}

// jobDeadline is the activeDeadlineSeconds for a Job whose step has left time before its
// deadline: that time less a margin (a tenth, at most 30s) for the Job controller to fail the Job
// and the step to see it; at least 1s.
func jobDeadline(left time.Duration) int64 {
	margin := min(left/10, 30*time.Second)
	return max(int64((left-margin)/time.Second), 1)
}

func renderMeta(ctx context.Context, m map[string]*expr.Template, in *steps.Input, path string) (map[string]string, error) {
	out := make(map[string]string, len(m))
	for k, t := range m {
		v, err := t.Render(ctx, in.Vars)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %w", path, k, err)
		}
		out[k] = v
	}
	return out, nil
}

// ownLabels tie a Job to its run, step and attempt (the engine routes the Job's changes by
// them) and, copied from the run, to its policy and target.
func ownLabels(run *v1alpha1.TeardownRun, step string, attempt int32) map[string]string {
	out := map[string]string{}
	for k, v := range run.Labels {
		if strings.HasPrefix(k, naming.Domain+"/") {
			out[k] = v
		}
	}
	out[v1alpha1.LabelRun] = run.Name
	out[v1alpha1.LabelRunNamespace] = run.Namespace
	out[v1alpha1.LabelRunUID] = string(run.UID)
	out[v1alpha1.LabelStep] = step
	out[v1alpha1.LabelAttempt] = strconv.Itoa(int(attempt))
	return out
}

// runEnv names the target and the run to the Job's containers.
func runEnv(run *v1alpha1.TeardownRun, step string, attempt int32) []corev1.EnvVar {
	t := run.Spec.Target
	return []corev1.EnvVar{
		{Name: EnvTargetAPIVersion, Value: t.APIVersion},
		{Name: EnvTargetKind, Value: t.Kind},
		{Name: EnvTargetNamespace, Value: t.Namespace},
		{Name: EnvTargetName, Value: t.Name},
		{Name: EnvTargetUID, Value: string(t.UID)},
		{Name: EnvRunName, Value: run.Name},
		{Name: EnvRunNamespace, Value: run.Namespace},
		{Name: EnvRunUID, Value: string(run.UID)},
		{Name: EnvStep, Value: step},
		{Name: EnvAttempt, Value: strconv.Itoa(int(attempt))},
	}
}

// withEnv puts ours before the container's own variables, so that theirs can refer to ours as
// $(TEARDOWN_TARGET_NAME); a variable the template sets itself is left to the template.
func withEnv(own, ours []corev1.EnvVar) []corev1.EnvVar {
	set := map[string]bool{}
	for _, e := range own {
		set[e.Name] = true
	}
	out := make([]corev1.EnvVar, 0, len(own)+len(ours))
	for _, e := range ours {
		if !set[e.Name] {
			out = append(out, e)
		}
	}
	return append(out, own...)
}

// ours reports whether job was created by this run for this step and attempt.
func ours(job *batchv1.Job, run *v1alpha1.TeardownRun, step string, attempt int32) bool {
	l := job.Labels
	return l[v1alpha1.LabelRunUID] == string(run.UID) && l[v1alpha1.LabelStep] == step && l[v1alpha1.LabelAttempt] == strconv.Itoa(int(attempt))
}
