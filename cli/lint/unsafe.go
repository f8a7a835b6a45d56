package lint

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
)

// unsafeReadConsequence says, per field, what an evaluation error does there
// (docs/expressions.md, What an evaluation error does).
var unsafeReadConsequence = map[string]string{
	"match": "the object is then neither protected nor let go (a MatchFailed event)",
	"when":  "the step then fails (when: <error>)",
	"deny":  "the guard then cannot be evaluated, and the object keeps its last verdict",
}

// unsafeReads flags the conditions that read fields of `object` an object may not have with no
// has() test, `in` test or `?` optional access guarding them: on such an object the condition is
// an evaluation error, not false. An expression that does not parse is the compiler's to report.
func unsafeReads(env *expr.Env, spec *v1alpha1.TeardownPolicySpec) []Risk {
	var present func([]string) bool
	if gv, err := schema.ParseGroupVersion(spec.TargetRef.APIVersion); err == nil {
		present = kindFields(gv.WithKind(spec.TargetRef.Kind))
	}
	var out []Risk
	check := func(path *field.Path, what, src string) {
		if src == "" {
			return
		}
		reads, err := env.UnsafeReads(src, present)
		if err != nil || len(reads) == 0 {
			return
		}
		out = append(out, Risk{Code: RiskUnsafeRead, Err: field.Invalid(path, field.OmitValueType{}, fmt.Sprintf(
			"%s reads %s, which an object may not have, with no has() or `in` test: on such an object it is an evaluation error, not false, and %s; test it first (has(...) && ...) or read it with ? (object.?data.?key.orValue(...), object.metadata.?labels[?'key'])",
			path, strings.Join(reads, ", "), unsafeReadConsequence[what]))})
	}
	check(field.NewPath("spec", "match"), "match", spec.Match)
	for _, ps := range stepsOf(&spec.Pipeline) {
		check(ps.path.Child("when"), "when", ps.step.When)
	}
	if g := spec.DeletionGuard; g != nil {
		check(field.NewPath("spec", "deletionGuard", "deny"), "deny", g.Deny)
	}
	return out
}
