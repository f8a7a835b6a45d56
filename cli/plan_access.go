package cli

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/teardown-dev/teardown-operator/steps"
)

// accessReport is the API server's answer to whether a step's identity may make one of the
// step's API calls (a SubjectAccessReview).
type accessReport struct {
	User     string `json:"user"`
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
	// Namespace is empty for a cluster-scoped resource.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Allowed   bool   `json:"allowed"`
	// Reason is the authorizer's reason, or why the question could not be asked.
	Reason string `json:"reason,omitempty"`
}

// reviewAccess asks the API server, for each call a step makes as a ServiceAccount, whether
// RBAC allows it; nothing is done on the ServiceAccount's behalf.
func (k *kube) reviewAccess(ctx context.Context, needs []steps.Access) []accessReport {
	var out []accessReport
	for _, n := range needs {
		rep := accessReport{User: n.User, Verb: n.Verb, Namespace: n.Namespace, Name: n.Name, Resource: n.GVK.Kind}
		m, err := k.mapper.RESTMapping(n.GVK.GroupKind(), n.GVK.Version)
		if err != nil {
			rep.Reason = fmt.Sprintf("kind %s is not served: %v", n.GVK, err)
			out = append(out, rep)
			continue
		}
		rep.Resource = m.Resource.GroupResource().String()
		if n.Subresource != "" {
			rep.Resource += "/" + n.Subresource
		}
		if n.User == "" {
			// The operator's own rights: whatever its ClusterRole grants, which plan cannot see.
			rep.Reason = operatorRights
			out = append(out, rep)
			continue
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: n.User, Groups: n.Groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: n.Namespace, Verb: n.Verb,
				Group: m.Resource.Group, Version: m.Resource.Version, Resource: m.Resource.Resource, Subresource: n.Subresource, Name: n.Name},
		}}
		if err := k.client.Create(ctx, sar); err != nil {
			rep.Reason = "cannot ask the API server (a SubjectAccessReview): " + oneLine(err.Error())
		} else {
			rep.Allowed, rep.Reason = sar.Status.Allowed, sar.Status.Reason
			if sar.Status.EvaluationError != "" {
				rep.Reason += " (" + sar.Status.EvaluationError + ")"
			}
		}
		out = append(out, rep)
	}
	return out
}

// operatorRights is the answer for a call a step makes with the operator's own rights.
const operatorRights = "not asked: the step acts with the operator's own rights, which its ClusterRole decides (the shipped one grants get, list, watch, patch, update and delete on every kind, not create)"

// String says the answer in a line of the plan.
func (a accessReport) String() string {
	where := ""
	if a.Namespace != "" {
		where = " in " + a.Namespace
	}
	if a.User == "" {
		return fmt.Sprintf("as the operator: %s %s%s: %s", a.Verb, a.Resource, where, a.Reason)
	}
	verdict := "allowed"
	if !a.Allowed {
		verdict = "NOT ALLOWED: the step would fail"
		if a.Reason != "" && a.Resource != "" {
			verdict += " (" + a.Reason + ")"
		}
	}
	return fmt.Sprintf("may %s %s %s%s? %s", a.User, a.Verb, a.Resource, where, verdict)
}
