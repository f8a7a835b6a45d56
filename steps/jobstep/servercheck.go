package jobstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// dryRunName names the run a server check's Job stands for, and starts the name the API server
// generates for the Job (a dry run stores nothing, so no name is taken).
const dryRunName = "teardown-dry-run"

// CheckWithServer implements steps.ServerChecker: the API server is asked for a dry-run create of
// the Job the step's first attempt would create, with every ${...} replaced by a placeholder, in
// the namespace it would go to (a TeardownPolicy's own; a cluster policy's literal job.namespace,
// or else runNamespace). What it refuses on fields of the template that hold no ${...} is
// returned at their paths in the policy.
func (a *action) CheckWithServer(ctx context.Context, runNamespace string) (field.ErrorList, error) {
	if a.kind.client == nil {
		return nil, nil // compiled without a cluster (lint, test)
	}
	job, err := a.placeholderJob(ctx, runNamespace)
	if err != nil {
		return nil, err
	}
	err = a.kind.client.Create(ctx, job, client.DryRunAll)
	switch {
	case err == nil:
		return nil, nil
	case apierrors.IsInvalid(err):
		return a.refusals(err), nil
	}
	return nil, fmt.Errorf("dry-run create of step %s's Job in namespace %s: %w", a.step, job.Namespace, err)
}

// placeholderJob is the Job of the step's first attempt with placeholders for ${...}.
func (a *action) placeholderJob(ctx context.Context, runNamespace string) (*batchv1.Job, error) {
	ns := runNamespace
	switch {
	case a.namespaced:
		ns = a.policyNamespace
	case a.namespace != nil && a.namespace.Literal():
		ns = literal(ctx, a.namespace)
	}
	raw, err := json.Marshal(a.spec.Placeholder(placeholder))
	if err != nil {
		return nil, err
	}
	var spec batchv1.JobSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("step %s: template.spec: %w", a.step, err)
	}
	in := &steps.Input{
		Run:    &v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Name: dryRunName, UID: dryRunName}},
		Status: &v1alpha1.StepStatus{Name: a.step, Attempts: 1},
	}
	job := a.assemble(in, ns, spec, placeholderMeta(ctx, a.labels), placeholderMeta(ctx, a.annotations))
	job.Name, job.GenerateName = "", dryRunName+"-"
	return job, nil
}

// placeholderMeta is labels or annotations with placeholders for ${...}.
func placeholderMeta(ctx context.Context, m map[string]*expr.Template) map[string]string {
	out := make(map[string]string, len(m))
	for k, t := range m {
		out[k] = placeholder
		if t.Literal() {
			out[k] = literal(ctx, t)
		}
	}
	return out
}

// literal is a template without ${...} as it renders ($${ unescaped).
func literal(ctx context.Context, t *expr.Template) string {
	s, _ := t.Render(ctx, nil)
	return s
}

// refusals are the API server's causes for refusing the Job, at their paths in the policy, but
// those on values the placeholders stand for.
func (a *action) refusals(err error) field.ErrorList {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return nil
	}
	st := status.Status()
	if st.Details == nil || len(st.Details.Causes) == 0 {
		return field.ErrorList{field.Invalid(a.path.Child("template"), field.OmitValueType{}, "the API server refuses the step's Job (dry run): "+st.Message)}
	}
	var out field.ErrorList
	for _, c := range st.Details.Causes {
		path, rendered := a.policyPath(c.Field)
		if rendered {
			continue
		}
		out = append(out, causeError(path, c))
	}
	return out
}

// policyPath is where a field of the Job comes from in the policy, and whether its value (or one
// under it) is known only at run time.
func (a *action) policyPath(jobField string) (string, bool) {
	tmpl := a.path.Child("template")
	switch {
	case jobField == "spec" || strings.HasPrefix(jobField, "spec."):
		p := tmpl.Child("spec").String() + strings.TrimPrefix(jobField, "spec")
		return p, slices.ContainsFunc(a.judgedWith(p), func(q string) bool { return a.spec.RenderedAt(q) || a.spec.RenderedAt(treePath(q)) })
	case strings.HasPrefix(jobField, "metadata.labels"):
		return tmpl.Child("metadata").String() + strings.TrimPrefix(jobField, "metadata"), !allLiteral(a.labels)
	case strings.HasPrefix(jobField, "metadata.annotations"):
		return tmpl.Child("metadata").String() + strings.TrimPrefix(jobField, "metadata"), !allLiteral(a.annotations)
	}
	return a.path.String(), false // the operator's own fields: said at the step
}

// judgedWith are the template's paths the API server judges a field at path with: itself, and
// the siblings it is compared with (a request with its limit, under resources; a mount's volume
// with the pod's volumes).
func (a *action) judgedWith(path string) []string {
	out := []string{path}
	if i := strings.LastIndex(path, ".resources."); i >= 0 {
		out = append(out, path[:i+len(".resources")])
	}
	if strings.Contains(path, ".volumeMounts[") {
		out = append(out, a.path.Child("template", "spec", "template", "spec", "volumes").String())
	}
	return out
}

// treePath writes map keys as fields (spec.nodeSelector.disk), as expr.Tree names them; the API
// server writes them as keys (spec.nodeSelector[disk]). List indexes stay.
func treePath(p string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(p, '[')
		if open < 0 {
			return b.String() + p
		}
		end := strings.IndexByte(p[open:], ']')
		if end < 0 {
			return b.String() + p
		}
		key := p[open+1 : open+end]
		b.WriteString(p[:open])
		if strings.Trim(key, "0123456789") == "" {
			b.WriteString("[" + key + "]")
		} else {
			b.WriteString("." + key)
		}
		p = p[open+end+1:]
	}
}

func allLiteral(m map[string]*expr.Template) bool {
	for _, t := range m {
		if !t.Literal() {
			return false
		}
	}
	return true
}

// causeError is an API server's cause at path, in its words: the cause's message is its error
// body ("Required value", `Invalid value: "x": ...`).
func causeError(path string, c metav1.StatusCause) *field.Error {
	typ := field.ErrorType(c.Type)
	switch typ {
	case field.ErrorTypeNotFound, field.ErrorTypeRequired, field.ErrorTypeDuplicate, field.ErrorTypeInvalid,
		field.ErrorTypeNotSupported, field.ErrorTypeForbidden, field.ErrorTypeTooLong, field.ErrorTypeTooMany,
		field.ErrorTypeTypeInvalid, field.ErrorTypeTooShort, field.ErrorTypeTooFew:
	default:
		typ = field.ErrorTypeInvalid
	}
	detail := strings.TrimPrefix(strings.TrimPrefix(c.Message, typ.String()), ": ")
	if detail != "" {
		detail += " "
	}
	return &field.Error{Type: typ, Field: path, BadValue: field.OmitValueType{},
		Detail: detail + "(the API server's answer to a dry-run create of the step's Job)"}
}
