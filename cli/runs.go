package cli

import (
	"context"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// findRuns resolves RUN or KIND/NAME to runs: a run by name in the namespace, or every run of
// the object (found by its UID label, in any namespace: a cluster-scoped object's runs, or those
// of an object whose namespace is going, live in the operator's namespace).
func (k *kube) findRuns(ctx context.Context, arg string) ([]v1alpha1.TeardownRun, error) {
	if !strings.Contains(arg, "/") || strings.HasPrefix(strings.ToLower(arg), "teardownrun/") || strings.HasPrefix(strings.ToLower(arg), "teardownruns/") {
		_, name, _ := strings.Cut(arg, "/")
		if !strings.Contains(arg, "/") {
			name = arg
		}
		var run v1alpha1.TeardownRun
		if err := k.client.Get(ctx, client.ObjectKey{Namespace: k.namespace(), Name: name}, &run); err != nil {
			return nil, apiError(err)
		}
		return []v1alpha1.TeardownRun{run}, nil
	}
	t, err := k.getTarget(ctx, arg)
	if err != nil {
		return nil, err
	}
	runs, err := k.runsOf(ctx, t.Object.GetUID(), t.Object.GetNamespace())
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, usageError("%s has no TeardownRun: runs start when a protected object is deleted (see kubectl teardown plan %s)", arg, arg)
	}
	return runs, nil
}

// runsOf lists the runs of the object with the given UID (in namespace ns), oldest first: in
// every namespace, or for a user who may not list them all, in the object's namespace and the
// operator's (where the runs of an object whose namespace is being deleted live).
func (k *kube) runsOf(ctx context.Context, uid types.UID, ns string) ([]v1alpha1.TeardownRun, error) {
	sel := client.MatchingLabels{v1alpha1.LabelTargetUID: string(uid)}
	var runs v1alpha1.TeardownRunList
	err := k.client.List(ctx, &runs, sel)
	if !apierrors.IsForbidden(err) {
		if err != nil {
			return nil, apiError(err)
		}
		sortRuns(runs.Items)
		return runs.Items, nil
	}
	var out []v1alpha1.TeardownRun
	for _, n := range slices.Compact([]string{ns, k.runNamespace}) {
		if n == "" {
			continue
		}
		var in v1alpha1.TeardownRunList
		if err := k.client.List(ctx, &in, sel, client.InNamespace(n)); err != nil {
			if n == ns {
				return nil, apiError(err)
			}
			continue // the operator's namespace may be out of the user's reach
		}
		out = append(out, in.Items...)
	}
	sortRuns(out)
	return out, nil
}

// sortRuns orders runs oldest first.
func sortRuns(runs []v1alpha1.TeardownRun) {
	sort.SliceStable(runs, func(i, j int) bool {
		return runs[i].CreationTimestamp.Before(&runs[j].CreationTimestamp)
	})
}
