package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/eventsink"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/engine/watch"
	"github.com/teardown-dev/teardown-operator/internal/lookup"
	"github.com/teardown-dev/teardown-operator/steps"
)

// verdict is what the deletion guards and two-phase policies protecting an object say: the
// value of its teardown.dev/deletion-guard label ("" when nothing refuses its deletion) and the
// message. holding names the finalizers of the policies whose deletion guard holds.
type verdict struct {
	value, message string
	holding        map[string]bool
}

// deny adds one policy's refusal to the verdict.
func (v *verdict) deny(always bool, message string, messages *[]string) {
	*messages = append(*messages, message)
	if v.value != v1alpha1.GuardDenyAlways {
		v.value = v1alpha1.GuardDeny
		if always {
			v.value = v1alpha1.GuardDenyAlways
		}
	}
}

// guards evaluates the deletion guards of the policies that protect the object (want) and
// returns their verdict and what they looked up. A guard that cannot be evaluated keeps the
// object's current verdict, so that a transient error neither lifts a veto nor invents one.
func (r *targetReconciler) guards(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, look *lazyObject, want map[string]bool) (verdict, []steps.WatchTarget, error) {
	current := verdict{obj.Labels[v1alpha1.LabelDeletionGuard], obj.Annotations[v1alpha1.AnnotationDeletionGuardMessage], nil}
	out := verdict{holding: map[string]bool{}}
	var messages []string
	var watch []steps.WatchTarget
	for _, p := range r.registry.ForGVK(key.GVK()) {
		if armed(p, obj, want) {
			_, requested := obj.Annotations[v1alpha1.AnnotationDeleteRequested]
			out.deny(true, armingMessage(p.Key, key, requested), &messages)
		}
		if p.Guard == nil || !p.InScope(key.Namespace) || !want[p.Finalizer] {
			continue
		}
		full, err := look.object(ctx)
		if err != nil {
			return current, watch, err
		}
		deny, msg, wt, err := r.guard.evaluate(ctx, p, key, full)
		watch = append(watch, wt...)
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("deletion guard cannot be evaluated; keeping the object's verdict",
				"policy", p.Key.String(), "object", key.String(), "error", err.Error())
			current.holding = map[string]bool{p.Finalizer: true} // and no request starts on it
			return current, watch, nil
		}
		if deny {
			out.holding[p.Finalizer] = true
			out.deny(p.Guard.Always, msg, &messages)
		}
	}
	slices.Sort(messages)
	out.message = strings.Join(messages, "; ")
	return out, watch, nil
}

// deletionGuards evaluates the policies' deletion guards, publishes their verdict on the object,
// and keeps watched what they look up.
type deletionGuards struct {
	// lister reads what guards look up; interest records it, to be woken (guardEvents).
	lister   lookup.Lister
	interest *interest[TargetKey]
	watches  *watch.Manager
	// client publishes verdicts.
	client client.Client
}

// evaluate evaluates one policy's guard on the full object.
func (g *deletionGuards) evaluate(ctx context.Context, p *policy.Compiled, key TargetKey, full map[string]any) (bool, string, []steps.WatchTarget, error) {
	policyNS := ""
	if p.Key.Namespaced() {
		policyNS = p.Key.Namespace
	}
	v, err := p.Guard.Evaluate(ctx, g.lister, full, key.Namespace, policyNS)
	watch := make([]steps.WatchTarget, 0, len(v.Watch))
	for _, t := range v.Watch {
		watch = append(watch, steps.WatchTarget{GVK: t.GVK, Namespace: t.Namespace})
	}
	if err != nil || !v.Deny {
		return false, "", watch, err
	}
	return true, fmt.Sprintf("%s: %s", p.Key, eventsink.Truncate(v.Message, maxGuardMessage)), watch, nil
}

// maxGuardMessage bounds one guard's rendered message (an interpolation may render a long list),
// so that the annotation, and the refusal a user reads, stay readable.
const maxGuardMessage = 1024

// publish writes the verdict onto the object when it differs from the one it carries.
func (g *deletionGuards) publish(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, v verdict) error {
	if obj.Labels[v1alpha1.LabelDeletionGuard] == v.value && obj.Annotations[v1alpha1.AnnotationDeletionGuardMessage] == v.message {
		return nil
	}
	var label, message any // nil removes the key
	if v.value != "" {
		label, message = v.value, v.message
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{v1alpha1.LabelDeletionGuard: label},
		"annotations": map[string]any{v1alpha1.AnnotationDeletionGuardMessage: message},
	}})
	if err != nil {
		return err
	}
	if err := g.client.Patch(ctx, metaRef(key.GVK(), key.Namespace, key.Name), client.RawPatch(types.MergePatchType, body)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("publishing the deletion guard's verdict on %s: %w", key, err))
	}
	return nil
}

// track makes the kinds an object's guards look up watched while they do.
func (g *deletionGuards) track(key TargetKey, targets []steps.WatchTarget) {
	g.interest.track(g.watches, key, "guard:"+key.String(), targets)
}

// guardEvents is the deletion guards' handler: a change to an object a guard looks up evaluates
// that guard again soon, the changes of a busy kind folded into one evaluation per guardDebounce;
// a protected object that is gone stops watching what its guards looked up.
type guardEvents struct {
	guards  *interest[TargetKey]
	watches *watch.Manager
	targets queue[TargetKey]
}

// guardDebounce folds the changes to objects a deletion guard looks up. It bounds how stale a
// verdict is after such a change, so it is short: a veto must lift, or start, within a second.
const guardDebounce = 200 * time.Millisecond

func (h guardEvents) handle(ev watch.Event) {
	for _, t := range h.guards.interested(ev.GVK, ev.Object.Namespace) {
		h.targets.AddAfter(t, guardDebounce)
	}
	if ev.Deleted {
		key := NewTargetKey(ev.GVK, ev.Object.Namespace, ev.Object.Name)
		h.guards.track(h.watches, key, "guard:"+key.String(), nil)
	}
}
