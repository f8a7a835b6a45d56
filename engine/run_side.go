package engine

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// runSide is the run side as the target reconciler sees it, and all it sees of it: where a
// deletion's run goes and its start, the runs of an object, and what the run side has done that
// the caches may not show yet (a run recorded, a finalizer released).
type runSide interface {
	// plan decides where the run of policy p for the deletion of obj goes (planStart).
	plan(ctx context.Context, p *policy.Compiled, key TargetKey, obj *metav1.PartialObjectMetadata) startPlan
	start(ctx context.Context, s runStart) error
	// recordedHere reports a run this engine recorded that the run cache may not show yet.
	recordedHere(c *policy.Compiled, key TargetKey, uid types.UID) bool
	// resumeRecorded finds a run of that name in the API server and, if there is one, passes it
	// on (or finishes the release of a record whose creator stopped): found says so.
	resumeRecorded(ctx context.Context, namespace, name string) (found bool, err error)
	// runsOf returns the cached runs of the object of that UID; read only (see runWith).
	runsOf(ctx context.Context, uid types.UID) []v1alpha1.TeardownRun
	// wake has the run controller look at a run.
	wake(run *v1alpha1.TeardownRun)
	// releasedHere reports whether a run released finalizer from the object of that UID and
	// the target cache may not show it yet.
	releasedHere(key TargetKey, uid types.UID, finalizer string) bool
}

var _ runSide = (*runReconciler)(nil)

func (r *runReconciler) plan(ctx context.Context, p *policy.Compiled, key TargetKey, obj *metav1.PartialObjectMetadata) startPlan {
	return planStart(startFacts{ReadsTargetFirst: p.ReadsTargetFirst(), BreakGlass: obj.Annotations[v1alpha1.AnnotationAbandon] != "",
		TargetNamespace: key.Namespace, NamespaceTerminating: r.reads.namespaceTerminating(ctx, key.Namespace), RunNamespace: r.runNamespace,
		Inherited: r.lead.predates(obj.DeletionTimestamp)})
}

// resumeRecorded looks in the target's namespace and the run namespace, in the API server: a
// run recorded finished is not cached, and a two-phase request must not run the pipeline again
// because the cache misses it.
func (r *runReconciler) resumeRecorded(ctx context.Context, namespace, name string) (bool, error) {
	for _, ns := range slices.Compact([]string{namespace, r.runNamespace}) {
		if ns == "" {
			continue
		}
		key := client.ObjectKey{Namespace: ns, Name: name}
		run := &v1alpha1.TeardownRun{}
		err := r.reader.Get(ctx, key, run)
		switch {
		case err == nil && run.Status.Phase == "":
			// Created by a pass that stopped before its status write: not recorded. This
			// deletion's first pass, started over, adopts it (record).
			return false, nil
		case err == nil:
			return true, r.recorded(ctx, key)
		case !apierrors.IsNotFound(err):
			return false, fmt.Errorf("looking for run %s: %w", key, err)
		}
	}
	return false, nil
}

func (r *runReconciler) runsOf(ctx context.Context, uid types.UID) []v1alpha1.TeardownRun {
	return r.reads.runsOfTarget(ctx, uid)
}

// runWith returns the run among runs that holds finalizer, or nil.
func runWith(runs []v1alpha1.TeardownRun, finalizer string) *v1alpha1.TeardownRun {
	if i := slices.IndexFunc(runs, func(run v1alpha1.TeardownRun) bool { return run.Spec.Finalizer == finalizer }); i >= 0 {
		return &runs[i]
	}
	return nil
}

func (r *runReconciler) wake(run *v1alpha1.TeardownRun) {
	r.requeue.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(run)})
}

func (r *runReconciler) releasedHere(key TargetKey, uid types.UID, finalizer string) bool {
	return r.released.Holds(key, uid, finalizer)
}
