package resource

import (
	"context"
	"encoding/json"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/internal/secretdata"
	"github.com/teardown-dev/teardown-operator/steps"
)

// The step's state in the run status: the object acted on (namespace/name) and its UID once the
// action is done (no other object is trusted).
var recordKeys = steps.RecordKeys{Object: "object", UID: "uid"}

// stateAdopted marks an object the step adopted: made by an earlier pass whose record was lost.
const stateAdopted = "adopted"

// state is what the step keeps in its status between passes.
type state struct {
	steps.ObjectRecord
	adopted bool
}

func readState(m map[string]string) state {
	return state{ObjectRecord: steps.ReadRecord(m, recordKeys), adopted: m[stateAdopted] == "true"}
}

func (s state) encode() map[string]string {
	m := s.Encode(recordKeys)
	if s.adopted {
		m[stateAdopted] = "true"
	}
	return m
}

// Execute implements steps.Action. Each pass does one thing: the action (a create, an apply, a
// patch, a delete), or a look at its object. A new attempt acts again: a create then adopts the
// object it made, an apply or patch is sent again (both are idempotent).
func (a *action) Execute(ctx context.Context, in *steps.Input) steps.Result {
	st := readState(in.Status.State)
	if st.Attempt != in.Status.Attempts {
		st = state{ObjectRecord: steps.ObjectRecord{Attempt: in.Status.Attempts}}
	}
	switch {
	case a.verb == v1alpha1.ResourceDelete && a.selector != nil:
		return a.deleteSelected(ctx, in, st)
	case a.verb == v1alpha1.ResourceDelete:
		return a.deleteNamed(ctx, in, st)
	case st.UID == "":
		return a.act(ctx, in, st)
	}
	return a.observe(ctx, in, st)
}

// act makes the step's create, apply or patch, and judges the object it returns.
func (a *action) act(ctx context.Context, in *steps.Input, st state) steps.Result {
	var obj *unstructured.Unstructured
	var ref Ref
	var res *steps.Result
	done := pastTense(a.verb)
	switch a.verb {
	case v1alpha1.ResourceCreate:
		if obj, ref, st.adopted, res = a.create(ctx, in); st.adopted {
			done = ""
		}
	case v1alpha1.ResourceApply:
		obj, ref, res = a.apply(ctx, in)
	default:
		obj, ref, res = a.patchTarget(ctx, in)
	}
	if res != nil {
		return *res
	}
	st.Namespace, st.Name, st.UID = ref.Namespace, ref.Name, obj.GetUID()
	if a.subresource != "" && (a.success != nil || a.failure != nil || len(a.outputs) > 0) {
		// The answer is the subresource (a Scale); the conditions read the object itself, which
		// the patch has just changed: its watch event comes at once.
		r := steps.Waiting(a.interval, "%s patched (%s); checking its conditions", ref, a.subresource)
		r.CheckAfter = min(a.interval, retrySoon)
		return a.finish(r, st, ref)
	}
	return a.judge(ctx, in, st, ref, obj, done)
}

// observe reads the object again and judges it.
func (a *action) observe(ctx context.Context, in *steps.Input, st state) steps.Result {
	ref := Ref{GVK: a.gvk, Namespace: st.Namespace, Name: st.Name}
	obj, err := a.api.Get(ctx, a.id, ref)
	switch {
	case apierrors.IsNotFound(err):
		return steps.Fail(true, "%s was deleted before successCondition held", ref)
	case err != nil:
		return a.apiFailure(err, "get", ref)
	case obj.GetUID() != st.UID:
		// Its UID is not shown: the object may be someone else's.
		return steps.Fail(true, "%s was replaced by another object of that name, which is not trusted", ref)
	}
	return a.judge(ctx, in, st, ref, obj, "")
}

// judge decides the step's outcome from the object as the API server has it: failureCondition
// first, then successCondition (none: done). done says what the action did, for the message.
func (a *action) judge(ctx context.Context, in *steps.Input, st state, ref Ref, obj *unstructured.Unstructured, done string) steps.Result {
	vars := in.Vars.With(VarResource, secretdata.Without(obj.Object)) // a Secret's data never reaches a run
	prefix := ref.String()
	switch {
	case st.adopted:
		prefix += " (adopted: this step created it for this deletion before)"
	case done != "":
		prefix += " " + done
	}
	if a.failure != nil {
		bad, err := a.failure.EvalBool(ctx, vars)
		switch {
		case err != nil:
			// Not a success either: the object is looked at again, as for successCondition.
			return a.finish(steps.Waiting(a.interval, "%s; failureCondition: %v%s", prefix, err, summary(obj)), st, ref)
		case bad:
			return a.finish(steps.Fail(true, "%s: failureCondition holds: %s%s", prefix, a.failure, summary(obj)), st, ref)
		}
	}
	if a.success == nil {
		return a.succeed(ctx, in, st, ref, obj, prefix)
	}
	ok, err := a.success.EvalBool(ctx, vars)
	switch {
	case err != nil:
		// A field the condition reads may not be set yet (a status filled in later): checked
		// again, bounded by the step's timeout, as a wait step's condition is.
		return a.finish(steps.Waiting(a.interval, "%s; successCondition: %v%s", prefix, err, summary(obj)), st, ref)
	case ok:
		return a.succeed(ctx, in, st, ref, obj, prefix)
	}
	return a.finish(steps.Waiting(a.interval, "%s; waiting until %s%s", prefix, a.success, summary(obj)), st, ref)
}

// succeed ends the step with its outputs.
func (a *action) succeed(ctx context.Context, in *steps.Input, st state, ref Ref, obj *unstructured.Unstructured, prefix string) steps.Result {
	out := map[string]apiextensionsv1.JSON{OutputName: jsonOf(ref.Name), OutputNamespace: jsonOf(ref.Namespace)}
	vars := in.Vars.With(VarResource, secretdata.Without(obj.Object)) // a Secret's data never reaches a run
	for name, prog := range a.outputs {
		raw, err := prog.EvalJSON(ctx, vars)
		if err != nil {
			return a.finish(steps.Fail(false, "%s, but output %s cannot be evaluated: %v", prefix, name, err), st, ref)
		}
		out[name] = apiextensionsv1.JSON{Raw: raw}
	}
	msg := prefix
	if a.success != nil {
		msg += ": successCondition holds"
	}
	res := a.finish(steps.Done("%s%s", msg, summary(obj)), st, ref)
	res.Outputs = out
	return res
}

// finish adds the step's state, and the watch that wakes it when the object changes.
func (a *action) finish(r steps.Result, st state, ref Ref) steps.Result {
	r.State = st.encode()
	if r.Outcome == steps.InProgress {
		r.Watch = []steps.WatchTarget{{GVK: a.gvk, Namespace: ref.Namespace}}
	}
	return r
}

// create creates the manifest's object, or adopts the one this step made for the same deletion
// (a repeat after a crash, or a retry).
func (a *action) create(ctx context.Context, in *steps.Input) (*unstructured.Unstructured, Ref, bool, *steps.Result) {
	obj, ref, res := a.render(ctx, in)
	if res != nil {
		return nil, ref, false, res
	}
	a.label(obj, in)
	created, err := a.api.Create(ctx, a.id, obj)
	if err == nil {
		return created, ref, false, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, ref, false, ptr(a.apiFailure(err, "create", ref))
	}
	live, err := a.api.Get(ctx, a.id, ref)
	if err != nil {
		return nil, ref, false, ptr(a.apiFailure(err, "get", ref))
	}
	ours := a.ours(live, in)
	if ours && live.GetDeletionTimestamp() != nil {
		// This step's object from an earlier attempt, going: make it again once it is gone.
		r := steps.Waiting(a.interval, "%s, made by this step for this deletion, is being deleted; creating it again once it is gone%s", ref, finalizers(live))
		r.Watch = []steps.WatchTarget{{GVK: a.gvk, Namespace: ref.Namespace}}
		return nil, ref, false, &r
	}
	if !ours {
		l := live.GetLabels()
		r := steps.Fail(false, "%s already exists and was not created by step %s for this deletion (its labels %s=%q, %s=%q); delete it, or give the manifest another name",
			ref, a.step, LabelDeletion, l[LabelDeletion], v1alpha1.LabelStep, l[v1alpha1.LabelStep])
		return nil, ref, false, &r
	}
	return live, ref, true, nil
}

// label puts on obj the labels that make a Create's object known as this deletion's and step's.
func (a *action) label(obj *unstructured.Unstructured, in *steps.Input) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelDeletion], labels[v1alpha1.LabelStep] = naming.LabelValue(in.DeletionID()), a.step
	obj.SetLabels(labels)
}

// ours reports whether obj carries the labels label gives this deletion's object of this step.
func (a *action) ours(obj *unstructured.Unstructured, in *steps.Input) bool {
	l := obj.GetLabels()
	return l[LabelDeletion] == naming.LabelValue(in.DeletionID()) && l[v1alpha1.LabelStep] == a.step
}

// apply applies the manifest's object.
func (a *action) apply(ctx context.Context, in *steps.Input) (*unstructured.Unstructured, Ref, *steps.Result) {
	obj, ref, res := a.render(ctx, in)
	if res != nil {
		return nil, ref, res
	}
	pr := in.Run.Spec.PolicyRef
	applied, err := a.api.Apply(ctx, a.id, obj, ApplyManager(pr.Kind, pr.Namespace, pr.Name, a.step))
	if err != nil {
		return nil, ref, ptr(a.apiFailure(err, "patch", ref))
	}
	return applied, ref, nil
}

// patchTarget sends the patch to the target object (or its subresource).
func (a *action) patchTarget(ctx context.Context, in *steps.Input) (*unstructured.Unstructured, Ref, *steps.Result) {
	ref, res := a.targetRef(ctx, in)
	if res != nil {
		return nil, ref, res
	}
	body, err := a.patch.Render(ctx, in.Vars)
	if err != nil {
		return nil, ref, ptr(steps.Fail(false, "patch: %v", err))
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, ref, ptr(steps.Fail(false, "patch: %v", err))
	}
	obj, err := a.api.Patch(ctx, a.id, ref, a.patchType, data, a.subresource)
	if err != nil {
		return nil, ref, ptr(a.apiFailure(err, "patch", ref))
	}
	return obj, ref, nil
}

func ptr(r steps.Result) *steps.Result { return &r }

func jsonOf(s string) apiextensionsv1.JSON {
	b, _ := json.Marshal(s)
	return apiextensionsv1.JSON{Raw: b}
}

func pastTense(v v1alpha1.ResourceAction) string {
	switch v {
	case v1alpha1.ResourceCreate:
		return "created"
	case v1alpha1.ResourceApply:
		return "applied"
	case v1alpha1.ResourcePatch:
		return "patched"
	}
	return "deleted"
}
