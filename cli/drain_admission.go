package cli

import (
	"context"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/admission"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// removeAdmission deletes the MutatingAdmissionPolicies and bindings that arm objects at
// creation, before drain releases anything: left in place, they would arm new objects that no
// operator releases. With --all every one the operator made goes; with --policy, that policy's.
// It says how many it removed (or would), and nothing on a cluster that serves none.
func (d *drainer) removeAdmission(ctx context.Context, key *policy.Key) error {
	names, err := d.admissionNames(ctx, key)
	if err != nil || len(names) == 0 {
		return err
	}
	if !d.dryRun {
		defer d.settle(ctx)
		for _, name := range names {
			for _, obj := range admission.Objects(name) {
				if err := d.kube.client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
					return fmt.Errorf("deleting %T %s: %w", obj, name, apiError(err))
				}
			}
		}
	}
	verb := "removed"
	if d.dryRun {
		verb = "would remove"
	}
	fmt.Fprintf(d.out, "%s %d %s that %s objects at creation\n", verb, len(names),
		plural(len(names), "MutatingAdmissionPolicy (and its binding)", "MutatingAdmissionPolicies (and their bindings)"),
		plural(len(names), "arms", "arm"))
	return nil
}

// settle waits admission.Settle, for the API server to stop applying the admission policies just
// deleted, before anything is released.
func (d *drainer) settle(ctx context.Context) {
	select {
	case <-time.After(admission.Settle):
	case <-ctx.Done():
	}
}

// admissionNames lists the names of the admission policies in the drain's scope (key nil: all the
// operator made).
func (d *drainer) admissionNames(ctx context.Context, key *policy.Key) ([]string, error) {
	var list admissionv1.MutatingAdmissionPolicyList
	err := d.kube.client.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedBy})
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nil, nil // the cluster serves none
	case err != nil:
		return nil, fmt.Errorf("listing MutatingAdmissionPolicies: %w", apiError(err))
	}
	var names []string
	want := ""
	if key != nil {
		want = naming.ArmingPolicyName(key.Namespace, key.Name)
	}
	for _, p := range list.Items {
		if want == "" || p.Name == want {
			names = append(names, p.Name)
		}
	}
	return names, nil
}
