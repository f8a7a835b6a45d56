package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// Drain releases finalizers that nothing puts back while the operator is stopped, and that a
// running operator puts back within a second: two guards stand before it. On a terminal it shows
// what --all would release and asks; elsewhere (a script, a pipe, CI) it cannot ask and refuses
// without --yes. And while a replica holds the operator's lease it refuses, unless the drain
// stops the operator first or the user says it knows.

// confirmAll asks on a terminal whether to drain what the dry run d printed. It reports false
// when the user declines.
func (r *root) confirmAll(d *drainer) (bool, error) {
	if d.objects == 0 {
		return false, nil // nothing to drain: said already
	}
	fmt.Fprintf(r.streams.Out, "Release %d %s from %d %s? Type yes to confirm: ", d.finalizers, plural(d.finalizers, "finalizer", "finalizers"),
		d.objects, plural(d.objects, "object", "objects"))
	answer, err := bufio.NewReader(r.streams.In).ReadString('\n')
	if err != nil && err != io.EOF {
		return false, err
	}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "yes" && a != "y" {
		fmt.Fprintln(r.streams.Out, "nothing released")
		return false, nil
	}
	return true, nil
}

// checkOperatorStopped refuses a drain that a running operator would undo: one of --all, or of a
// policy that still protects its objects (not suspended, not being deleted). view is the policy
// --policy names (nil with --all, or when it is gone). A dry run only warns.
func (r *root) checkOperatorStopped(ctx context.Context, o *drainOptions, view *policy.View) error {
	if o.stopOperator != nil || o.ignoreRunningOperator {
		return nil
	}
	if !o.all && (view == nil || view.Spec.Suspend || view.Object.GetDeletionTimestamp() != nil) {
		return nil // the operator lets this policy's objects go itself
	}
	st := r.kube.operator(ctx)
	if !st.Held {
		return nil
	}
	msg := fmt.Sprintf("the operator is running (replica %s holds lease %s, renewed %s ago): it puts teardown finalizers back on the objects its policies select within a second",
		st.Holder, st.Lease, age(time.Since(st.Renewed)))
	if o.dryRun {
		fmt.Fprintln(r.streams.ErrOut, "warning: "+msg)
		return nil
	}
	return usageError("%s. Stop it first (--stop-operator NAMESPACE/NAME scales its Deployment to 0 and waits for its pods), or, to stop protecting objects while it runs, suspend or delete the policy; --ignore-running-operator drains anyway", msg)
}

// policyResource is the resource of a policy's kind.
func policyResource(kind string) schema.GroupVersionResource {
	if kind == policy.KindCluster {
		return v1alpha1.GroupVersion.WithResource("clusterteardownpolicies")
	}
	return v1alpha1.GroupVersion.WithResource("teardownpolicies")
}
