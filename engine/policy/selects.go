package policy

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/secretdata"
)

// InScope reports whether an object in namespace ns may be a target at all: a TeardownPolicy
// only sees its own namespace.
func (c *Compiled) InScope(ns string) bool {
	return !c.Key.Namespaced() || c.Key.Namespace == ns
}

// Selects reports whether labels (and the namespace's labels, for cluster policies) select an
// object. CEL match is separate because it needs the full object. Objects that steps made for a
// run (a job step's Jobs and their pods) are never targets: a policy on Jobs or Pods would
// otherwise hold its own teardown work, and start teardowns of it.
func (c *Compiled) Selects(objLabels, nsLabels map[string]string, namespaced bool) bool {
	if _, made := objLabels[v1alpha1.LabelRunUID]; made {
		return false
	}
	if !c.Selector.Matches(labels.Set(objLabels)) {
		return false
	}
	if c.NamespaceSelector != nil && namespaced {
		return c.NamespaceSelector.Matches(labels.Set(nsLabels))
	}
	return true
}

// MatchObject evaluates the policy's CEL match against a full object.
func (c *Compiled) MatchObject(ctx context.Context, obj map[string]any) (bool, error) {
	if c.Match == nil {
		return true, nil
	}
	return c.Match.EvalBool(ctx, ObjectVars(obj))
}

// ObjectVars are the variables of an expression evaluated before any run exists (a match, a
// deletion guard): the object (a Secret without its data, as in a run's snapshot), and no steps
// or run.
func ObjectVars(obj map[string]any) expr.Vars {
	return expr.Vars{expr.VarObject: secretdata.Without(obj), expr.VarSteps: map[string]any{}, expr.VarRun: map[string]any{}}
}

func selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}
