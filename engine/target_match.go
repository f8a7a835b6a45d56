package engine

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// lazyObject reads what the policies of an object need of it (its namespace's labels, the whole
// object for a CEL match) once, on first use.
type lazyObject struct {
	r        *targetReconciler
	key      TargetKey
	nsLabels map[string]string
	full     map[string]any
	// rejected are the policies whose labels and namespace select the object and whose match
	// does not.
	rejected map[policy.Key]bool
}

// errGone is returned when the object went while it was being looked at.
var errGone = errors.New("the object is gone")

// matchError is a CEL match that failed to evaluate on the object.
type matchError struct{ err error }

func (e *matchError) Error() string { return e.err.Error() }
func (e *matchError) Unwrap() error { return e.err }

// selectedBy reports whether policy p selects the object: labels, namespace labels, then match.
func (l *lazyObject) selectedBy(ctx context.Context, p *policy.Compiled, obj *metav1.PartialObjectMetadata) (bool, error) {
	if p.NamespaceSelector != nil && l.key.Namespace != "" && l.nsLabels == nil {
		ns, err := l.r.reads.namespace(ctx, l.key.Namespace)
		if err != nil {
			return false, fmt.Errorf("reading namespace %s: %w", l.key.Namespace, err)
		}
		l.nsLabels = ns.Labels
		if l.nsLabels == nil {
			l.nsLabels = map[string]string{}
		}
	}
	if !p.Selects(obj.Labels, l.nsLabels, l.key.Namespace != "") {
		return false, nil
	}
	if p.Match == nil {
		return true, nil
	}
	full, err := l.object(ctx)
	if err != nil {
		return false, err
	}
	ok, err := p.MatchObject(ctx, full)
	if err != nil {
		return false, &matchError{err}
	}
	if !ok {
		if l.rejected == nil {
			l.rejected = map[policy.Key]bool{}
		}
		l.rejected[p.Key] = true
	}
	return ok, nil
}

// object reads the whole object once, from the API server; errGone when it went.
func (l *lazyObject) object(ctx context.Context) (map[string]any, error) {
	if l.full != nil {
		return l.full, nil
	}
	full, err := readObject(ctx, l.r.reader, l.key)
	switch {
	case err != nil:
		return nil, err
	case full == nil:
		return nil, errGone
	}
	l.full = full
	return full, nil
}

// recordMatchErrors keeps the policies' match-error counts in line with this look at the object,
// and tells on the object when its match starts failing: an object a policy should protect but
// cannot evaluate must not go unnoticed.
func (r *targetReconciler) recordMatchErrors(ctx context.Context, key TargetKey, obj *metav1.PartialObjectMetadata, policies []*policy.Compiled, failed map[policy.Key]error) {
	for _, p := range policies {
		err := failed[p.Key]
		if !r.matches.set(p.Key, key, err != nil) {
			continue
		}
		if o, ok := r.watches.Get(key.GVK(), key.Namespace, key.Name); err != nil && (!ok || o.UID != obj.UID) {
			// Deleted while its match was evaluated: its delete event has already forgotten it.
			r.matches.set(p.Key, key, false)
			continue
		}
		r.matches.recount(p.Key)
		if err == nil {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("match cannot be evaluated on the object; leaving its finalizers as they are",
			"policy", p.Key.String(), "object", key.String(), "error", err.Error())
		r.events.Emit(ctx, targetRef(key, obj), nil, key.Namespace, pipeline.Eventf(true, v1alpha1.ReasonMatchFailed,
			"%s: spec.match cannot be evaluated on this object, so it is left as it is (a finalizer already on it stays, none is added): %v", p.Key, err))
	}
}
