package engine

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// CacheOptions returns opts with what the engine asks of the manager's cache: runs that are only
// records (labelled v1alpha1.LabelReleased) are not cached at all, and the others are cached
// trimmed (see trimRun). Without it the engine works the same, in more memory. (The admission
// objects the engine keeps are cached whole, others' too: a cluster has few, and a ByObject entry
// for them would stop the manager from starting on a cluster that does not serve them.)
func CacheOptions(opts cache.Options) cache.Options {
	by := make(map[client.Object]cache.ByObject, len(opts.ByObject)+1)
	for obj, o := range opts.ByObject {
		by[obj] = o
	}
	notReleased, err := labels.NewRequirement(v1alpha1.LabelReleased, selection.DoesNotExist, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	by[&v1alpha1.TeardownRun{}] = cache.ByObject{Label: labels.NewSelector().Add(*notReleased), Transform: trimRun}
	opts.ByObject = by
	return opts
}

// trimmedInCache marks a cached run whose pipeline, snapshot and step details were dropped. It
// exists only in the cache: such a copy is never written back (writes are patches of what
// changed), and nothing the engine does with a finished run that released its target reads them.
const trimmedInCache = "teardown.dev/trimmed-in-cache"

// trimRun drops from a cached run what nothing reads from the cache. Managed fields go, unless
// the run asks for a retry (when the request was made is read from them). A finished run that released its target keeps only what cleanup and the
// policy counts read, until it is labelled released and leaves the cache (longer when what its
// steps made is still to be let go).
func trimRun(obj any) (any, error) {
	run, ok := obj.(*v1alpha1.TeardownRun)
	if !ok {
		return obj, nil
	}
	retry := run.Annotations[v1alpha1.AnnotationRetry] != ""
	if !retry {
		run.ManagedFields = nil
	}
	phase := run.Status.Phase
	if retry || !phase.Finished() || !phase.Releases(run.Spec.Pipeline.FailurePolicy) {
		return run, nil
	}
	run.Spec.Object = runtime.RawExtension{}
	run.Spec.Pipeline.Steps, run.Spec.Pipeline.Finally = nil, nil
	run.Status.Steps, run.Status.Finally = nil, nil
	run.Status.Conditions = nil
	run.Status.LastRetry = nil
	if run.Annotations == nil {
		run.Annotations = map[string]string{}
	}
	run.Annotations[trimmedInCache] = "true"
	return run, nil
}
