package lint

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// Codes of the risks lint flags.
const (
	// RiskUnboundedWait: a step waits on something (a condition, a poll, a Job) with no timeout
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
	// RiskUnknownIgnore: the ignore annotation names a code that is no risk's (a typo ignores
	// nothing).
	RiskUnknownIgnore = "unknown-ignore"
)

// RiskCodes are the codes a policy may accept with the ignore annotation.
var RiskCodes = []string{RiskUnboundedWait, RiskRetainWithoutTimeout, RiskJobWithoutDeadline, RiskSecretOverPlainHTTP, RiskKindNotServed, RiskUnsafeRead, RiskMatchNotAdmissible}

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
