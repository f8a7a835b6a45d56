// Package lint checks TeardownPolicies and ClusterTeardownPolicies without a cluster, exactly as
// the API server and the operator would: the CRD schema and its rules, then the operator's own
// compiler. It also flags what compiles but is risky in production (risks.go).
package lint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli/discovery"
	"github.com/teardown-dev/teardown-operator/cli/manifest"
	cschema "github.com/teardown-dev/teardown-operator/cli/schema"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/kindtypes"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/builtin"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
)

// AnnotationIgnore on a policy lists risk codes its authors accepted (comma-separated), so lint
// stops flagging them for that policy. Errors cannot be ignored.
const AnnotationIgnore = "lint.teardown.dev/ignore"

// Severity of a problem.
type Severity string

const (
	// Error: the API server refuses the policy, or the operator marks it not Ready.
	Error Severity = "error"
	// Warning: the policy runs, but risks holding objects forever or leaking a secret.
	Warning Severity = "warning"
)

// Problem is one finding, at a field of one policy of one document.
type Problem struct {
	File string `json:"file"`
	// Document counts from 1; Item is the object's position in a List document (0: none).
	Document int      `json:"document"`
	Item     int      `json:"item,omitempty"`
	Line     int      `json:"line,omitempty"`
	Policy   string   `json:"policy,omitempty"`
	Field    string   `json:"field"`
	Severity Severity `json:"severity"`
	// Code is "schema" (the API server refuses it), "compile" (the operator refuses it), or the
	// code of a risk.
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	loc := fmt.Sprintf("%s:%d (document %d", p.File, p.Line, p.Document)
	if p.Item > 0 {
		loc += fmt.Sprintf(", item %d", p.Item)
	}
	pol := ""
	if p.Policy != "" {
		pol = p.Policy + ": "
	}
	return fmt.Sprintf("%s): %s: %s%s: %s [%s]", loc, p.Severity, pol, p.Field, oneLine(p.Message), p.Code)
}

// maxTextMessage bounds a message in text output (a CEL error quotes the whole expression);
// -o json has it whole.
const maxTextMessage = 400

// oneLine is a message on one line: a CEL error's caret lines dropped (its column is in the first
// line), and long messages cut.
func oneLine(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	msg = strings.TrimSpace(msg)
	if len(msg) > maxTextMessage {
		msg = strings.ToValidUTF8(msg[:maxTextMessage], "") + "..."
	}
	return msg
}

// Result is what a lint found.
type Result struct {
	Documents int       `json:"documents"`
	Policies  int       `json:"policies"`
	Errors    int       `json:"errors"`
	Warnings  int       `json:"warnings"`
	Problems  []Problem `json:"problems"`
}

// Options configure a Linter.
type Options struct {
	// Kinds, when set, is the cluster's discovery: target, lookup and job kinds are checked
	// against it. Nil checks what needs no cluster.
	Kinds *discovery.Kinds
	// Namespace is the namespace of TeardownPolicies whose metadata names none (kubectl's -n).
	Namespace string
	// AllowedDestinations are the operator's --http-allowed-destinations.
	AllowedDestinations []httpstep.Destination
}

// Linter checks policies. It is not safe for concurrent use.
type Linter struct {
	opts     Options
	schema   *cschema.Validator
	compiler *policy.Compiler
	seen     map[policy.Key]string
}

// New returns a Linter that compiles with the built-in step kinds.
func New(opts Options) (*Linter, error) {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	v, err := cschema.New()
	if err != nil {
		return nil, fmt.Errorf("loading the CRD schemas: %w", err)
	}
	env, err := expr.NewEnv()
	if err != nil {
		return nil, err
	}
	kinds := steps.Build(builtin.Kinds(builtin.Options{HTTP: httpstep.Options{AllowedDestinations: opts.AllowedDestinations}}), steps.Deps{})
	// Kinds' scopes as the cluster's discovery gives them: the dump's, or else the built-in
	// kinds' (a custom kind's scope is then unknown, and what depends on it is left to run time).
	scope := discovery.BuiltinKinds().Namespaced
	if opts.Kinds != nil {
		scope = opts.Kinds.Namespaced
	}
	// The objects resource steps act on are typed when client-go knows their kind (Pods,
	// StatefulSets, ...); others are dyn offline.
	compiler := policy.NewCompiler(env, kinds, scope).WithKindTypes(kindtypes.Builtin)
	return &Linter{opts: opts, schema: v, compiler: compiler, seen: map[policy.Key]string{}}, nil
}

// IsPolicy reports whether an object is a TeardownPolicy or ClusterTeardownPolicy, of any version.
func IsPolicy(u *unstructured.Unstructured) bool {
	gvk := u.GroupVersionKind()
	return gvk.Group == v1alpha1.Group && (gvk.Kind == policy.KindNamespaced || gvk.Kind == policy.KindCluster)
}

// otherKinds are the kinds of the teardown.dev group that are not policies, and CLI files that
// share manifests with them: skipped. Any other kind in the group is a typo.
var otherKinds = map[string]bool{"TeardownRun": true, "TeardownTest": true}

// Lint checks every policy among docs; other documents are skipped.
func (l *Linter) Lint(ctx context.Context, docs []*manifest.Document) Result {
	var res Result
	for _, d := range docs {
		res.Documents++
		var problems []Problem
		switch gvk := d.Object.GroupVersionKind(); {
		case IsPolicy(d.Object):
			res.Policies++
			problems = l.lintDoc(ctx, d)
		case gvk.Group == v1alpha1.Group && !otherKinds[gvk.Kind]:
			problems = []Problem{{File: d.Source, Document: d.Index, Item: d.Item, Line: d.LineOf("kind"), Field: "kind",
				Severity: Error, Code: "schema", Message: fmt.Sprintf("%q is no kind of %s: TeardownPolicy or ClusterTeardownPolicy?", gvk.Kind, v1alpha1.Group)}}
		}
		for _, p := range problems {
			if p.Severity == Error {
				res.Errors++
			} else {
				res.Warnings++
			}
			res.Problems = append(res.Problems, p)
		}
	}
	return res
}

// lintDoc checks one policy document.
func (l *Linter) lintDoc(ctx context.Context, d *manifest.Document) []Problem {
	out := l.checkDoc(ctx, d)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// checkDoc checks one policy document: schema, then compiler, then risks.
func (l *Linter) checkDoc(ctx context.Context, d *manifest.Document) []Problem {
	obj := d.Object.DeepCopy()
	gvk := obj.GroupVersionKind()
	if obj.GetKind() == policy.KindNamespaced && obj.GetNamespace() == "" {
		obj.SetNamespace(l.opts.Namespace) // where kubectl apply -n puts it
	}
	key := policy.Key{Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
	name := key.String()
	at := func(sev Severity, code string, errs field.ErrorList) []Problem {
		var out []Problem
		for _, e := range errs {
			out = append(out, Problem{File: d.Source, Document: d.Index, Item: d.Item, Line: d.LineOf(e.Field), Policy: name,
				Field: e.Field, Severity: sev, Code: code, Message: cschema.Message(e)})
		}
		return out
	}
	if !l.schema.Knows(gvk) {
		return at(Error, "schema", field.ErrorList{field.NotSupported(field.NewPath("apiVersion"), obj.GetAPIVersion(),
			[]string{v1alpha1.GroupVersion.String()})})
	}
	if errs := l.schema.Validate(ctx, gvk, obj.Object); len(errs) > 0 {
		// The compiler's errors too, for one round of fixes; risks wait for a policy that applies.
		return append(at(Error, "schema", errs), at(Error, "compile", l.compileLeniently(obj, errs))...)
	}
	view, errs := l.decode(obj)
	if len(errs) > 0 {
		return at(Error, "schema", errs)
	}
	var out []Problem
	if prev, dup := l.seen[view.Key]; dup {
		out = append(out, at(Error, "duplicate", field.ErrorList{field.Duplicate(field.NewPath("metadata", "name"),
			view.Key.Name+" (also defined at "+prev+")")})...)
	}
	l.seen[view.Key] = d.Where(0)
	compiled, cerrs := l.compiler.Compile(view)
	cerrs = append(cerrs, l.kindErrors(view)...)
	out = append(out, at(Error, "compile", cerrs)...)
	ignored, unknown := ignoredRisks(obj.GetAnnotations())
	out = append(out, at(Warning, RiskUnknownIgnore, unknown)...)
	risks := append(Risks(view.Spec), l.lookupRisks(view)...)
	if compiled != nil && compiled.MatchNotAdmissible != nil {
		risks = append(risks, Risk{Code: RiskMatchNotAdmissible, Err: field.Invalid(field.NewPath("spec", "match"), field.OmitValueType{},
			fmt.Sprintf("%v: no admission policy arms objects at creation, so an object created while the operator is down, and deleted before it is back, skips its teardown; write it with what the API server has", errors.Unwrap(compiled.MatchNotAdmissible)))})
	}
	for _, r := range append(risks, unsafeReads(l.compiler.Env(), view.Spec)...) {
		if !ignored[r.Code] {
			out = append(out, at(Warning, r.Code, field.ErrorList{r.Err})...)
		}
	}
	return out
}

// decode turns the defaulted object into the typed policy the compiler reads.
func (l *Linter) decode(obj *unstructured.Unstructured) (policy.View, field.ErrorList) {
	view, err := PolicyOf(obj, l.opts.Namespace)
	if err != nil {
		return policy.View{}, field.ErrorList{field.Invalid(field.NewPath("spec"), nil, err.Error())}
	}
	if view.Key.Name == "" {
		return view, field.ErrorList{field.Required(field.NewPath("metadata", "name"), "")}
	}
	return view, nil
}

// PolicyOf converts a TeardownPolicy or ClusterTeardownPolicy document into the typed policy
// the compiler reads; a TeardownPolicy that names no namespace gets namespace (where kubectl
// apply -n would put it).
func PolicyOf(u *unstructured.Unstructured, namespace string) (policy.View, error) {
	obj, err := manifest.Scheme.New(u.GroupVersionKind())
	if err != nil {
		return policy.View{}, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return policy.View{}, err
	}
	return viewIn(obj, u.GetKind(), namespace)
}

// viewIn is the view of a decoded policy of kind; a TeardownPolicy that names no namespace is
// in namespace, where kubectl apply -n would put it.
func viewIn(obj runtime.Object, kind, namespace string) (policy.View, error) {
	p, ok := obj.(client.Object)
	if !ok {
		return policy.View{}, fmt.Errorf("%s is not a teardown policy", kind)
	}
	if kind == policy.KindNamespaced && p.GetNamespace() == "" {
		p.SetNamespace(namespace)
	}
	return policy.ViewOf(p)
}

// kindErrors checks the target kind as the operator does against discovery: against the dump
// when there is one (a kind not served is an error), else against the built-in kinds (a custom
// kind is unknown, and not reported). A TeardownPolicy on a cluster-scoped kind is refused in
// the operator's words.
func (l *Linter) kindErrors(v policy.View) field.ErrorList {
	gv, err := schema.ParseGroupVersion(v.Spec.TargetRef.APIVersion)
	if err != nil {
		return nil // reported by the compiler
	}
	kinds := l.opts.Kinds
	if kinds == nil {
		kinds = discovery.BuiltinKinds()
	}
	namespaced, err := kinds.Namespaced(gv.WithKind(v.Spec.TargetRef.Kind))
	switch {
	case err != nil && l.opts.Kinds != nil:
		return field.ErrorList{field.Invalid(field.NewPath("spec", "targetRef", "kind"), v.Spec.TargetRef.Kind, err.Error())}
	case err == nil && !namespaced && v.Key.Namespaced():
		return field.ErrorList{field.Invalid(field.NewPath("spec", "targetRef"), field.OmitValueType{},
			policy.ClusterScopedTarget(v.Spec.TargetRef.Kind)+"; the operator reports the policy not Ready, reason "+v1alpha1.ReasonInvalidTarget)}
	}
	return nil
}

// lookupRisks flags lookups, and objects of resource steps, of kinds the discovery dump does not
// have: the operator leaves them to run time (a CRD may be installed later), when the step fails
// if it still is not.
func (l *Linter) lookupRisks(v policy.View) []Risk {
	if l.opts.Kinds == nil {
		return nil
	}
	var out []Risk
	check := func(apiVersion, kind string, p *field.Path) {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil || kind == "" {
			return
		}
		if _, err := l.opts.Kinds.Namespaced(gv.WithKind(kind)); err != nil {
			out = append(out, Risk{Code: RiskKindNotServed, Err: field.Invalid(p, kind,
				err.Error()+": the step fails when it runs unless the kind is served by then")})
		}
	}
	for _, ps := range stepsOf(&v.Spec.Pipeline) {
		s, sp := ps.step, ps.path
		switch {
		case s.Wait != nil:
			for j, lk := range s.Wait.Lookups {
				check(lk.APIVersion, lk.Kind, sp.Child("wait", "lookups").Index(j).Child("kind"))
			}
		case s.Resource != nil && s.Resource.Target != nil:
			check(s.Resource.Target.APIVersion, s.Resource.Target.Kind, sp.Child("resource", "target", "kind"))
		case s.Resource != nil && s.Resource.Manifest != nil:
			var m struct{ APIVersion, Kind string }
			if json.Unmarshal(s.Resource.Manifest.Raw, &m) == nil {
				check(m.APIVersion, m.Kind, sp.Child("resource", "manifest", "kind"))
			}
		}
	}
	return out
}

// ignoredRisks reads the risk codes a policy accepts, and reports codes that are no risk's.
func ignoredRisks(ann map[string]string) (map[string]bool, field.ErrorList) {
	out := map[string]bool{}
	var unknown field.ErrorList
	for _, c := range strings.Split(ann[AnnotationIgnore], ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		out[c] = true
		if !slices.Contains(RiskCodes, c) {
			unknown = append(unknown, field.NotSupported(field.NewPath("metadata", "annotations").Key(AnnotationIgnore), c, RiskCodes))
		}
	}
	return out, unknown
}
