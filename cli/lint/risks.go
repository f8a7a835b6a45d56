package lint

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// Codes of the risks lint flags.
const (
	// RiskUnboundedWait: a step waits on something (a condition, a poll, a Job, an approval, a
	// resource step's successCondition or deletion) with no timeout
	// on it or on the pipeline; if the thing never happens, the object is held forever.
	RiskUnboundedWait = "unbounded-wait"
	// RiskRetainWithoutTimeout: failurePolicy Retain and no timeout anywhere.
	RiskRetainWithoutTimeout = "retain-without-timeout"
	// RiskJobWithoutDeadline: a Job with neither a step timeout nor activeDeadlineSeconds.
	RiskJobWithoutDeadline = "job-without-deadline"
	// RiskSecretOverPlainHTTP: a Secret sent as a header over plain http://.
	RiskSecretOverPlainHTTP = "secret-over-plain-http"
	// RiskKindNotServed: a lookup, or a resource step, of a kind the discovery dump (--kinds) does
	// not have.
	RiskKindNotServed = "kind-not-served"
	// RiskUnsafeRead: match, a step's when or a deletion guard's deny reads a field of the object
	// that may be absent, unguarded (an evaluation error, not false, where it is absent).
	RiskUnsafeRead = "unsafe-read"
	// RiskMatchNotAdmissible: the match cannot run as a match condition of a
	// MutatingAdmissionPolicy (a function or variable the API server lacks), so objects are armed
	// only once the operator sees them, not at creation.
	RiskMatchNotAdmissible = "match-not-admissible"
	// RiskObjectChosenTarget: a resource step deletes or patches objects named or selected by
	// values interpolated from what whoever creates the target chooses (its name, labels,
	// annotations, data): another owner's objects with those values are acted on too.
	RiskObjectChosenTarget = "object-chosen-target"
	// RiskUnknownIgnore: the ignore annotation names a code that is no risk's (a typo ignores
	// nothing).
	RiskUnknownIgnore = "unknown-ignore"
)

// RiskCodes are the codes a policy may accept with the ignore annotation.
var RiskCodes = []string{RiskUnboundedWait, RiskRetainWithoutTimeout, RiskJobWithoutDeadline, RiskSecretOverPlainHTTP, RiskKindNotServed, RiskUnsafeRead, RiskMatchNotAdmissible,
	RiskObjectChosenTarget}

// Risk is what compiles but is risky, at the field to change.
type Risk struct {
	Code string
	Err  *field.Error
}

// Risks returns the risks of a policy's spec.
func Risks(spec *v1alpha1.TeardownPolicySpec) []Risk {
	var out []Risk
	add := func(code string, path *field.Path, format string, args ...any) {
		out = append(out, Risk{Code: code, Err: field.Invalid(path, field.OmitValueType{}, fmt.Sprintf(format, args...))})
	}
	bounded := spec.Timeout != nil
	anyTimeout := bounded
	for _, ps := range stepsOf(&spec.Pipeline) {
		s, p := ps.step, ps.path
		anyTimeout = anyTimeout || s.Timeout != nil && !ps.bounded
		if what := waitsOn(s); what != "" && s.Timeout == nil && !bounded && !ps.bounded {
			add(RiskUnboundedWait, p, "step %q waits for %s with no timeout on the step or the pipeline: if that never happens, the object is held forever; set timeout", s.Name, what)
		}
		if s.Job != nil && s.Timeout == nil && !ps.bounded && !hasActiveDeadline(s.Job) {
			add(RiskJobWithoutDeadline, p.Child("timeout"), "step %q runs a Job with no timeout and no activeDeadlineSeconds: a hung Job runs (and holds the object) forever; the step's timeout also caps the Job's activeDeadlineSeconds", s.Name)
		}
		if s.HTTP != nil && strings.HasPrefix(strings.ToLower(strings.TrimSpace(s.HTTP.URL)), "http://") {
			for _, h := range s.HTTP.Headers {
				if h.ValueFrom != nil && h.ValueFrom.SecretKeyRef != nil {
					add(RiskSecretOverPlainHTTP, p.Child("http", "url"), "step %q sends header %s from Secret %s over plain http://, readable on the network; use https://", s.Name, h.Name, h.ValueFrom.SecretKeyRef.Name)
					break
				}
			}
		}
	}
	for _, ps := range stepsOf(&spec.Pipeline) {
		if field, what := objectChosenTarget(spec, ps.step); what != "" {
			add(RiskObjectChosenTarget, ps.path.Child("resource", "target", field),
				"step %q %s objects picked by %s, which whoever creates the object chooses: objects of another owner with the same values are acted on too; pick them by what their owning controller sets (its spec.selector, owner references)",
				ps.step.Name, map[v1alpha1.ResourceAction]string{v1alpha1.ResourceDelete: "deletes", v1alpha1.ResourcePatch: "patches"}[ps.step.Resource.Action], what)
		}
	}
	if !anyTimeout && (spec.FailurePolicy == "" || spec.FailurePolicy == v1alpha1.FailurePolicyRetain) {
		add(RiskRetainWithoutTimeout, field.NewPath("spec", "failurePolicy"), "failurePolicy is Retain and no timeout bounds the pipeline or any step: a teardown that never ends holds the object until someone breaks glass; set spec.timeout")
	}
	return out
}

// waitsOn says what a step waits for, or "" when it does not wait.
func waitsOn(s *v1alpha1.Step) string {
	switch {
	case s.Wait != nil && s.Wait.Until != "":
		return "its until condition"
	case s.HTTP != nil && s.HTTP.Poll != nil:
		return "its successCondition (it polls)"
	case s.Job != nil:
		return "its Job to finish"
	case s.Approval != nil:
		return "people to approve"
	case s.Resource != nil && s.Resource.SuccessCondition != "":
		return "its successCondition on the object"
	case s.Resource != nil && s.Resource.Action == v1alpha1.ResourceDelete && (s.Resource.WaitForDeletion == nil || *s.Resource.WaitForDeletion):
		return "the objects it deletes to be gone"
	}
	return ""
}

func hasActiveDeadline(j *v1alpha1.JobStep) bool {
	var spec struct {
		ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds"`
	}
	return json.Unmarshal(j.Template.Spec.Raw, &spec) == nil && spec.ActiveDeadlineSeconds != nil
}

// pathStep is a step of a pipeline with its path: spec.steps[i], spec.finally[i] or
// spec.onStuck[i].
type pathStep struct {
	path *field.Path
	step *v1alpha1.Step
	// bounded: a finally or onStuck step, which the operator bounds (5m) when it sets no timeout.
	bounded bool
}

// stepsOf lists every step of a pipeline with its path.
func stepsOf(p *v1alpha1.Pipeline) []pathStep {
	var out []pathStep
	for _, list := range []struct {
		name  string
		steps []v1alpha1.Step
	}{{"steps", p.Steps}, {"finally", p.Finally}, {"onStuck", p.OnStuck}} {
		for i := range list.steps {
			out = append(out, pathStep{field.NewPath("spec", list.name).Index(i), &list.steps[i], list.name != "steps"})
		}
	}
	return out
}

// objectChosen are the parts of the object whoever creates it chooses freely.
var objectChosen = regexp.MustCompile(`\bobject\.(metadata\.(name|generateName|labels|annotations)|data|stringData)\b`)

// objectChosenTarget says, for a resource step that deletes or patches, which field of its target
// (name or selector) and which value interpolate what the object's creator chooses; "" when none
// does. The object itself, named by ${object.metadata.name} with its own kind, is not flagged.
func objectChosenTarget(spec *v1alpha1.TeardownPolicySpec, s *v1alpha1.Step) (string, string) {
	r := s.Resource
	if r == nil || r.Target == nil || (r.Action != v1alpha1.ResourceDelete && r.Action != v1alpha1.ResourcePatch) {
		return "", ""
	}
	t := r.Target
	chosen := func(v string) bool { return strings.Contains(v, "${") && objectChosen.MatchString(v) }
	self := strings.TrimSpace(t.Name) == "${object.metadata.name}" && t.Kind == spec.TargetRef.Kind && t.APIVersion == spec.TargetRef.APIVersion
	if chosen(t.Name) && !self {
		return "name", fmt.Sprintf("name %q", t.Name)
	}
	if sel := t.Selector; sel != nil {
		for k, v := range sel.MatchLabels {
			if chosen(v) {
				return "selector", fmt.Sprintf("label %s=%q", k, v)
			}
		}
		for _, e := range sel.MatchExpressions {
			for _, v := range e.Values {
				if chosen(v) {
					return "selector", fmt.Sprintf("label %s %s %q", e.Key, e.Operator, v)
				}
			}
		}
	}
	return "", ""
}
