package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Bounds of --stop-operator.
const (
	// stopPoll is how often drain looks for the operator's pods while they go.
	stopPoll = time.Second
	// stopNamed is how many of the pods that remain a timeout names.
	stopNamed = 5
)

// operatorRef is the Deployment --stop-operator names.
type operatorRef struct{ Namespace, Name string }

func (d operatorRef) String() string { return d.Namespace + "/" + d.Name }

// parseOperatorRef reads --stop-operator's NAMESPACE/NAME.
func parseOperatorRef(arg string) (operatorRef, error) {
	ns, name, _ := strings.Cut(arg, "/")
	if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return operatorRef{}, usageError("--stop-operator %q: name the operator's Deployment as NAMESPACE/NAME, for example teardown-system/teardown-operator", arg)
	}
	return operatorRef{Namespace: ns, Name: name}, nil
}

// stopOperator scales the operator's Deployment to 0 replicas and waits until its pods are gone,
// so that no operator puts finalizers back while drain releases them. With dryRun it only says
// what it would stop.
func (r *root) stopOperator(ctx context.Context, ref operatorRef, dryRun bool, timeout time.Duration) error {
	dep := &appsv1.Deployment{}
	if err := r.kube.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return usageError("--stop-operator: deployment %s not found", ref)
		}
		return apiError(fmt.Errorf("--stop-operator: reading deployment %s: %w", ref, err))
	}
	was := int(ptr.Deref(dep.Spec.Replicas, 1))
	switch {
	case dryRun && was == 0:
		fmt.Fprintf(r.streams.Out, "nothing to stop: deployment %s is already at 0 replicas\n", ref)
		return nil
	case dryRun:
		fmt.Fprintf(r.streams.Out, "would stop deployment %s (%d %s)\n", ref, was, plural(was, "replica", "replicas"))
		return nil
	case was > 0:
		if err := r.kube.scaleToZero(ctx, dep); err != nil {
			return apiError(fmt.Errorf("--stop-operator: scaling deployment %s to 0 replicas: %w", ref, err))
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return fmt.Errorf("--stop-operator: deployment %s: %w", ref, err)
	}
	if err := r.kube.waitPodsGone(ctx, ref, sel, timeout); err != nil {
		return err
	}
	if was == 0 {
		fmt.Fprintf(r.streams.Out, "nothing to stop: deployment %s is already at 0 replicas\n", ref)
	} else {
		fmt.Fprintf(r.streams.Out, "stopped deployment %s (was %d %s)\n", ref, was, plural(was, "replica", "replicas"))
	}
	return nil
}

// scaleToZero sets the Deployment's replicas to 0 through its scale subresource, which RBAC grants
// apart from the Deployment (patch deployments/scale).
func (k *kube) scaleToZero(ctx context.Context, dep *appsv1.Deployment) error {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
	return k.client.SubResource("scale").Patch(ctx, dep, patch,
		client.WithSubResourceBody(&autoscalingv1.Scale{}), client.FieldOwner("kubectl-teardown"))
}

// waitPodsGone polls until no pod of the Deployment remains in its namespace, terminating ones
// included (their operator may still run), for up to timeout.
func (k *kube) waitPodsGone(ctx context.Context, ref operatorRef, sel labels.Selector, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var pods corev1.PodList
		if err := k.client.List(ctx, &pods, client.InNamespace(ref.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return apiError(fmt.Errorf("--stop-operator: listing the pods of deployment %s: %w", ref, err))
		}
		var left []string
		for i := range pods.Items {
			if operatorPod(&pods.Items[i]) {
				left = append(left, pods.Items[i].Name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		wait := min(stopPoll, time.Until(deadline))
		if wait <= 0 {
			return stopTimeout(ref, left, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// operatorPod says whether a pod the Deployment's selector matches is the operator's: one of a
// ReplicaSet's, or a bare one. A Job's pod is not, such as the uninstall hook's own that may carry
// the same labels.
func operatorPod(p *corev1.Pod) bool {
	owner := metav1.GetControllerOf(p)
	return owner == nil || owner.Kind == "ReplicaSet"
}

func stopTimeout(ref operatorRef, left []string, timeout time.Duration) error {
	n := len(left)
	names := strings.Join(left[:min(n, stopNamed)], ", ")
	if n > stopNamed {
		names += ", ..."
	}
	// Exit 1, not 2: the Deployment was scaled to 0, so something was done.
	return &ExitError{Code: ExitFindings, Err: fmt.Errorf("--stop-operator: %d %s of deployment %s still %s after %s (%s); the deployment is at 0 replicas, and nothing was drained",
		n, plural(n, "pod", "pods"), ref, plural(n, "remains", "remain"), timeout, names)}
}
