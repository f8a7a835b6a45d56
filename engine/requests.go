package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/pipeline"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/admissiontrust"
)

// Requests are the annotations by which a person asks the operator to act: delete-requested and
// abandon on a target, retry on a run. Whoever may patch an object may write any annotation, so a
// request is acted on only as the admission policy teardown.dev-requests (config/admission) admitted
// it: set by a user RBAC lets delete the object (for a delete request or an abandon), its value
// "<user>: <why>" naming the user the API server authenticated. Nothing is acted on while that
// policy is missing, does not fail closed or does not deny, nor a request set before it was in
// force.

// requestsPolicy is the admission policy that checks requests.
var requestsPolicy = admissiontrust.Policy{Name: v1alpha1.RequestsPolicyName, Checks: "requests", Noun: "request"}

// request is a request annotation as the operator reads it.
type request struct {
	// user is who asked, as the admission policy authenticated them.
	user string
	// who says who asked and why, as runs record it: `<user> (annotation <key>="<why>")`.
	who string
	// at is when the annotation was set, from the object's managed fields; nil when they do not say.
	at *metav1.Time
	// untrusted says why the request is not acted on; "" when it is.
	untrusted string
}

// readRequest reads the request annotation key of obj, if it is set. obj must carry its managed
// fields (read from the API server): they say when the annotation was set.
func (c clusterReads) readRequest(ctx context.Context, obj client.Object, key string) (request, bool) {
	value, ok := obj.GetAnnotations()[key]
	if !ok {
		return request{}, false
	}
	req := parseRequest(key, value)
	req.at = annotationSetAt(obj, key)
	if c.admission == nil {
		req.untrusted = fmt.Sprintf("the admission policy %s that checks requests cannot be read", v1alpha1.RequestsPolicyName)
		return req, true
	}
	since, err := admissiontrust.Since(ctx, c.admission, requestsPolicy)
	req.untrusted = requestUntrusted(key, req.at, since, err)
	return req, true
}

// parseRequest reads who asked and why from a request's value "<user>: <why>". A user name may
// hold ":" (system:serviceaccount:<namespace>:<name>): the separator is ": ".
func parseRequest(key, value string) request {
	user, why, _ := strings.Cut(value, ": ")
	user = strings.TrimSpace(user)
	return request{user: user, who: fmt.Sprintf("%s (annotation %s=%q)", user, key, strings.TrimSpace(why))}
}

// annotationSetAt is when annotation key of obj was set, from its managed fields; nil when they do
// not say.
func annotationSetAt(obj client.Object, key string) *metav1.Time {
	if mf := policy.ManagedEntry(obj, "f:metadata", "f:annotations", "f:"+key); mf != nil {
		return mf.Time
	}
	return nil
}

// requestUntrusted says why the request key, set at (from the object's managed fields; nil when
// they do not say), is not acted on, given since when requests are trusted (or why none is), or "".
func requestUntrusted(key string, at *metav1.Time, since time.Time, enforcedErr error) string {
	switch {
	case enforcedErr != nil:
		return enforcedErr.Error()
	case at == nil:
		return fmt.Sprintf("when annotation %s was set is unknown (the object's managed fields do not say), so the admission policy %s may not have checked it: set it again",
			key, v1alpha1.RequestsPolicyName)
	case at.Add(clockSkewAllowance).Before(since):
		return fmt.Sprintf("annotation %s was set at %s, before the admission policy %s that checks requests was in force (%s): set it again",
			key, at.UTC().Format(time.RFC3339), v1alpha1.RequestsPolicyName, since.UTC().Format(time.RFC3339))
	}
	return ""
}

// requestIgnored is the event that says why a request (what: "Delete request", "Break glass") is
// not acted on.
func requestIgnored(what, why string) pipeline.Event {
	return pipeline.Eventf(true, v1alpha1.ReasonRequestIgnored, "%s not acted on: %s", what, why)
}

// clockSkewAllowance is how far before the trusted moment a request may be stamped (managed
// fields count whole seconds).
const clockSkewAllowance = time.Second

// breakGlass returns who asked to abandon the run, or "": the abandon annotation on the target,
// as the admission policy teardown.dev-requests admitted it (a request it did not check is not
// acted on, and an event on the target says why), or the policy's spec.suspend.
func (r *runReconciler) breakGlass(ctx context.Context, run *v1alpha1.TeardownRun, target *metav1.PartialObjectMetadata) string {
	if target != nil {
		if req, ok := r.reads.readRequest(ctx, target, v1alpha1.AnnotationAbandon); ok && target.Annotations[v1alpha1.AnnotationAbandon] != "" {
			if req.untrusted == "" {
				return req.who
			}
			r.events.Emit(ctx, targetRef(targetKeyOf(run.Spec.Target), target), nil, target.Namespace, requestIgnored("Break glass", req.untrusted))
		}
	}
	ref := run.Spec.PolicyRef
	if c := r.policies.Get(policy.KeyOf(ref)); c != nil && c.Suspended && c.UID == ref.UID {
		// Whoever may update the policy may suspend it: RBAC checked them, the audit log names
		// them. A field manager name is any client's choice, so none is recorded as who.
		return fmt.Sprintf("spec.suspend on %s %s", ref.Kind, ref.Name)
	}
	return ""
}
