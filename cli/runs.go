package cli

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// findRuns resolves RUN or KIND/NAME to runs: a run by name in the namespace, or every run of
// the object (found by its UID label, in any namespace: a cluster-scoped object's runs, or those
// of an object whose namespace is going, live in the operator's namespace).
func (k *kube) findRuns(ctx context.Context, arg string) ([]v1alpha1.TeardownRun, error) {
	if isRunArg(arg) {
		var run v1alpha1.TeardownRun
		if err := k.client.Get(ctx, client.ObjectKey{Namespace: k.namespace(), Name: runName(arg)}, &run); err != nil {
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
		if ts := t.Object.GetDeletionTimestamp(); ts != nil {
			return nil, usageError("%s is being deleted since %s and no TeardownRun has started for it yet (kubectl teardown status %s says why)",
				arg, ts.UTC().Format(time.RFC3339), withNamespace(arg, t.Object.GetNamespace()))
		}
		return nil, usageError("%s has no TeardownRun: runs start when a protected object is deleted (see kubectl teardown plan %s)", arg, withNamespace(arg, t.Object.GetNamespace()))
	}
	return runs, nil
}

// withNamespace is a KIND/NAME argument as a hint repeats it, with -n for a namespaced object, so
// that the hint works as printed whatever the user's current namespace.
func withNamespace(arg, namespace string) string {
	if namespace == "" {
		return arg
	}
	return arg + " -n " + namespace
}

// isRunArg tells a run's name (NAME, teardownrun/NAME) from an object's KIND/NAME.
func isRunArg(arg string) bool {
	kind, _, qualified := strings.Cut(strings.ToLower(arg), "/")
	switch strings.TrimSuffix(kind, "."+v1alpha1.Group) {
	case "teardownrun", "teardownruns", "tdr":
		return true
	}
	return !qualified
}

// runName is the name in a run argument.
func runName(arg string) string {
	if _, name, ok := strings.Cut(arg, "/"); ok {
		return name
	}
	return arg
}

// runsOf lists the runs of the object with the given UID (in namespace ns), oldest first: in
// every namespace, or for a user who may not list them all, in the object's namespace and the
// operator's (where the runs of an object whose namespace is being deleted live).
func (k *kube) runsOf(ctx context.Context, uid types.UID, ns string) ([]v1alpha1.TeardownRun, error) {
	runs, err := k.listRuns(ctx, client.MatchingLabels{v1alpha1.LabelTargetUID: string(uid)}, ns)
	sortRuns(runs)
	return runs, err
}

// runsNamed lists the kept runs of every object of kind gk named ns/name, whatever its UID: the
// object that exists now, or existed last, and earlier objects of that name. They are found by
// their labels, which outlive the object, and checked against their spec (label values of long
// names are shortened).
func (k *kube) runsNamed(ctx context.Context, gk schema.GroupKind, ns, name string) ([]v1alpha1.TeardownRun, error) {
	sel := client.MatchingLabels{
		v1alpha1.LabelTargetKind:      naming.LabelValue(gk.Kind),
		v1alpha1.LabelTargetName:      naming.LabelValue(name),
		v1alpha1.LabelTargetNamespace: ns,
	}
	runs, err := k.listRuns(ctx, sel, ns)
	runs = slices.DeleteFunc(runs, func(run v1alpha1.TeardownRun) bool {
		t := run.Spec.Target
		return t.GroupVersionKind().GroupKind() != gk || t.Namespace != ns || t.Name != name
	})
	sortRuns(runs)
	return runs, err
}

// runsOfPolicy lists the kept runs of a policy, finished ones included, newest first. A
// TeardownPolicy's runs live in its namespace or, for objects whose namespace is going, the
// operator's; a ClusterTeardownPolicy's anywhere.
func (k *kube) runsOfPolicy(ctx context.Context, key policy.Key) ([]v1alpha1.TeardownRun, error) {
	sel := client.MatchingLabels{v1alpha1.LabelPolicyKind: key.Kind, v1alpha1.LabelPolicy: naming.LabelValue(key.Name)}
	ns := key.Namespace
	if key.Namespaced() {
		sel[v1alpha1.LabelPolicyNamespace] = key.Namespace
	} else {
		ns = k.namespace()
	}
	runs, err := k.listRuns(ctx, sel, ns)
	runs = slices.DeleteFunc(runs, func(run v1alpha1.TeardownRun) bool {
		p := run.Spec.PolicyRef
		return p.Kind != key.Kind || p.Namespace != key.Namespace || p.Name != key.Name
	})
	sortRuns(runs)
	slices.Reverse(runs)
	return runs, err
}

// listRuns lists the runs sel selects in every namespace or, for a user who may not list them
// all, in namespace ns and the operator's. It never returns a nil slice: an empty list prints
// as [] in -o json.
func (k *kube) listRuns(ctx context.Context, sel client.MatchingLabels, ns string) ([]v1alpha1.TeardownRun, error) {
	out := []v1alpha1.TeardownRun{}
	var runs v1alpha1.TeardownRunList
	err := k.client.List(ctx, &runs, sel)
	if !apierrors.IsForbidden(err) {
		if err != nil {
			return out, apiError(err)
		}
		return append(out, runs.Items...), nil
	}
	for _, n := range slices.Compact([]string{ns, k.runNamespace}) {
		if n == "" {
			continue
		}
		var in v1alpha1.TeardownRunList
		if err := k.client.List(ctx, &in, sel, client.InNamespace(n)); err != nil {
			if n == ns {
				return out, apiError(err)
			}
			continue // the operator's namespace may be out of the user's reach
		}
		out = append(out, in.Items...)
	}
	return out, nil
}

// sortRuns orders runs oldest first.
func sortRuns(runs []v1alpha1.TeardownRun) {
	sort.SliceStable(runs, func(i, j int) bool {
		return runs[i].CreationTimestamp.Before(&runs[j].CreationTimestamp)
	})
}
