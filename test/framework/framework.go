// Package framework holds what the integration, e2e and benchmark programs share: builders for
// policies and targets, and probes that read the state of the cluster for Gomega's Eventually.
package framework

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	enginepolicy "github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// ConfigMap returns a small ConfigMap with data k=v.
func ConfigMap(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"k": "v"}}
}

// Dur wraps a duration for the API.
func Dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// WaitStep is a wait step of a fixed duration.
func WaitStep(name string, d time.Duration) v1alpha1.Step {
	return v1alpha1.Step{Name: name, Wait: &v1alpha1.WaitStep{Duration: Dur(d)}}
}

// NamespacedPolicy returns a TeardownPolicy on the ConfigMaps labelled app=<name>.
func NamespacedPolicy(ns, name string, steps ...v1alpha1.Step) *v1alpha1.TeardownPolicy {
	return &v1alpha1.TeardownPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.TeardownPolicySpec{
			TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: "ConfigMap"},
			Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Pipeline:  v1alpha1.Pipeline{Steps: steps},
		},
	}
}

// ClusterPolicy returns a ClusterTeardownPolicy on the ConfigMaps labelled app=<app> in the one
// namespace ns.
func ClusterPolicy(name, app, ns string, steps ...v1alpha1.Step) *v1alpha1.ClusterTeardownPolicy {
	return &v1alpha1.ClusterTeardownPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterTeardownPolicySpec{
			TeardownPolicySpec: v1alpha1.TeardownPolicySpec{
				TargetRef: v1alpha1.TargetReference{APIVersion: "v1", Kind: "ConfigMap"},
				Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				Pipeline:  v1alpha1.Pipeline{Steps: steps},
			},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		},
	}
}

// Probe reads the cluster through one client.
type Probe struct {
	Client client.Client
}

// Finalizers returns a function reading an object's finalizers fresh from the API server.
func (p Probe) Finalizers(ctx context.Context, obj client.Object) func() []string {
	return func() []string {
		o := obj.DeepCopyObject().(client.Object)
		if err := p.Client.Get(ctx, client.ObjectKeyFromObject(obj), o); err != nil {
			return []string{"<" + err.Error() + ">"}
		}
		return o.GetFinalizers()
	}
}

// Gone returns a function reporting whether the object no longer exists.
func (p Probe) Gone(ctx context.Context, obj client.Object) func() bool {
	return func() bool {
		o := obj.DeepCopyObject().(client.Object)
		err := p.Client.Get(ctx, client.ObjectKeyFromObject(obj), o)
		return err != nil && client.IgnoreNotFound(err) == nil
	}
}

// RunFor returns a function finding the run of a target by its UID label, in any namespace.
func (p Probe) RunFor(ctx context.Context, target client.Object) func() *v1alpha1.TeardownRun {
	return func() *v1alpha1.TeardownRun {
		var list v1alpha1.TeardownRunList
		if err := p.Client.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelTargetUID: string(target.GetUID())}); err != nil || len(list.Items) == 0 {
			return nil
		}
		return &list.Items[0]
	}
}

// TeardownOf returns a function reading the line of policy's status.recentTeardowns that records
// the teardown of target, or nil: where a teardown that leaves no run (runHistory
// SkipImmediateSuccess) is recorded.
func (p Probe) TeardownOf(ctx context.Context, policy, target client.Object) func() *v1alpha1.RecentTeardown {
	return func() *v1alpha1.RecentTeardown {
		got := policy.DeepCopyObject().(client.Object)
		if p.Client.Get(ctx, client.ObjectKeyFromObject(policy), got) != nil {
			return nil
		}
		v, err := enginepolicy.ViewOf(got)
		if err != nil {
			return nil
		}
		recent := v.Status.RecentTeardowns
		for i := range recent {
			if recent[i].Target.UID == target.GetUID() {
				return &recent[i]
			}
		}
		return nil
	}
}

// RunPhase returns a function reading the phase of a target's run.
func (p Probe) RunPhase(ctx context.Context, target client.Object) func() v1alpha1.RunPhase {
	return func() v1alpha1.RunPhase {
		if r := p.RunFor(ctx, target)(); r != nil {
			return r.Status.Phase
		}
		return ""
	}
}

// StepPhase returns a function reading the phase of one step of a target's run.
func (p Probe) StepPhase(ctx context.Context, target client.Object, step string) func() v1alpha1.StepPhase {
	return func() v1alpha1.StepPhase {
		if r := p.RunFor(ctx, target)(); r != nil {
			if s := r.Status.Step(step); s != nil {
				return s.Phase
			}
		}
		return ""
	}
}

// EventNotes returns a function listing "<reason>: <note>" for the events recorded about an object.
func (p Probe) EventNotes(ctx context.Context, obj client.Object) func() []string {
	return func() []string {
		var out []string
		for _, e := range p.events(ctx, obj) {
			out = append(out, e.Reason+": "+e.Message)
		}
		return out
	}
}

// EventReasons returns a function listing the reasons of the events recorded about an object.
func (p Probe) EventReasons(ctx context.Context, obj client.Object) func() []string {
	return func() []string {
		var out []string
		for _, e := range p.events(ctx, obj) {
			out = append(out, e.Reason)
		}
		return out
	}
}

// events lists the events recorded about an object (nil if they cannot be read).
func (p Probe) events(ctx context.Context, obj client.Object) []corev1.Event {
	var list corev1.EventList
	if err := p.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	return slices.DeleteFunc(list.Items, func(e corev1.Event) bool { return e.InvolvedObject.UID != obj.GetUID() })
}

// JobStep is a job step running one container; spec fields may be added to the returned step's
// template (see JobSpec).
func JobStep(name string, spec map[string]any) v1alpha1.Step {
	return v1alpha1.Step{Name: name, Job: &v1alpha1.JobStep{Template: v1alpha1.JobTemplate{Spec: JobSpec(spec)}}}
}

// JobSpec encodes a JobSpec written as a map (so that it may hold ${...} anywhere) for a job
// step's template.
func JobSpec(spec map[string]any) runtime.RawExtension {
	raw, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return runtime.RawExtension{Raw: raw}
}

// Container is a JobSpec map with one container running command, backoffLimit 0 and the given
// pod annotations (kwok stages read them).
func Container(image string, podAnnotations map[string]string, command ...string) map[string]any {
	cmd := make([]any, len(command))
	for i, c := range command {
		cmd[i] = c
	}
	return map[string]any{
		"backoffLimit": 0,
		"template": map[string]any{
			"metadata": map[string]any{"annotations": podAnnotations},
			"spec": map[string]any{
				"containers": []any{map[string]any{"name": "main", "image": image, "command": cmd}},
			},
		},
	}
}

// JobOf returns a function reading the Job a job step of a TeardownPolicy creates for a target
// and attempt (nil until it exists).
func (p Probe) JobOf(ctx context.Context, policy *v1alpha1.TeardownPolicy, target client.Object, step string, attempt int32) func() *batchv1.Job {
	run := naming.RunName("TeardownPolicy", policy.Namespace, policy.Name, target.GetName(), target.GetUID())
	return func() *batchv1.Job {
		job := &batchv1.Job{}
		if err := p.Client.Get(ctx, client.ObjectKey{Namespace: policy.Namespace, Name: naming.JobName(run, step, attempt)}, job); err != nil {
			return nil
		}
		return job
	}
}
