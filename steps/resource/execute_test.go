package resource

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// world is a scripted API: objects by namespace/name (one kind per test), what each identity may
// not do, and every call made.
type world struct {
	objects map[string]*unstructured.Unstructured
	denied  map[string]bool // "verb" the ServiceAccount is refused
	calls   []string
	uids    int
}

func newWorld(objs ...*unstructured.Unstructured) *world {
	w := &world{objects: map[string]*unstructured.Unstructured{}, denied: map[string]bool{}}
	for _, o := range objs {
		w.put(o)
	}
	return w
}

func (w *world) put(o *unstructured.Unstructured) {
	if o.GetUID() == "" {
		w.uids++
		o.SetUID(types.UID(fmt.Sprintf("uid-%d", w.uids)))
	}
	w.objects[o.GetNamespace()+"/"+o.GetName()] = o
}

func (w *world) refuse(verb string, id Identity, ref Ref) error {
	w.calls = append(w.calls, verb+" "+ref.Namespace+"/"+ref.Name)
	if w.denied[verb] {
		return apierrors.NewForbidden(schema.GroupResource{Group: ref.GVK.Group, Resource: strings.ToLower(ref.GVK.Kind) + "s"}, ref.Name,
			fmt.Errorf("User %q cannot %s", id.Username(), verb))
	}
	return nil
}

func (w *world) Namespaced(gvk schema.GroupVersionKind) (bool, error) { return testScope(gvk) }

func (w *world) Get(_ context.Context, id Identity, ref Ref) (*unstructured.Unstructured, error) {
	if err := w.refuse("get", id, ref); err != nil {
		return nil, err
	}
	o, ok := w.objects[ref.Namespace+"/"+ref.Name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: ref.GVK.Kind}, ref.Name)
	}
	return o.DeepCopy(), nil
}

func (w *world) List(_ context.Context, id Identity, gvk schema.GroupVersionKind, ns string, sel labels.Selector, _ int64) ([]unstructured.Unstructured, error) {
	if err := w.refuse("list", id, Ref{GVK: gvk, Namespace: ns}); err != nil {
		return nil, err
	}
	var out []unstructured.Unstructured
	for _, o := range w.objects {
		if o.GetNamespace() == ns && sel.Matches(labels.Set(o.GetLabels())) {
			out = append(out, *o.DeepCopy())
		}
	}
	return out, nil
}

func (w *world) Create(_ context.Context, id Identity, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ref := Ref{GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if err := w.refuse("create", id, ref); err != nil {
		return nil, err
	}
	if _, ok := w.objects[ref.Namespace+"/"+ref.Name]; ok {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: ref.GVK.Kind}, ref.Name)
	}
	o := obj.DeepCopy()
	w.put(o)
	return o.DeepCopy(), nil
}

func (w *world) Apply(ctx context.Context, id Identity, obj *unstructured.Unstructured, _ string) (*unstructured.Unstructured, error) {
	ref := Ref{GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if err := w.refuse("patch", id, ref); err != nil {
		return nil, err
	}
	o := obj.DeepCopy()
	if old, ok := w.objects[ref.Namespace+"/"+ref.Name]; ok {
		o.SetUID(old.GetUID())
	}
	w.put(o)
	return o.DeepCopy(), nil
}

func (w *world) Patch(_ context.Context, id Identity, ref Ref, pt types.PatchType, data []byte, sub string) (*unstructured.Unstructured, error) {
	if err := w.refuse("patch", id, ref); err != nil {
		return nil, err
	}
	o, ok := w.objects[ref.Namespace+"/"+ref.Name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: ref.GVK.Kind}, ref.Name)
	}
	w.calls[len(w.calls)-1] += " " + sub + " " + string(data)
	return o.DeepCopy(), nil
}

func (w *world) Delete(_ context.Context, id Identity, ref Ref, _ metav1.DeletionPropagation, uid types.UID) error {
	if err := w.refuse("delete", id, ref); err != nil {
		return err
	}
	o, ok := w.objects[ref.Namespace+"/"+ref.Name]
	switch {
	case !ok:
		return apierrors.NewNotFound(schema.GroupResource{Resource: ref.GVK.Kind}, ref.Name)
	case uid != "" && o.GetUID() != uid:
		return apierrors.NewConflict(schema.GroupResource{Resource: ref.GVK.Kind}, ref.Name, fmt.Errorf("uid precondition"))
	case len(o.GetFinalizers()) > 0:
		o.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	default:
		delete(w.objects, ref.Namespace+"/"+ref.Name)
	}
	return nil
}

func object(apiVersion, kind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
	for k, v := range fields {
		o.Object[k] = v
	}
	o.SetNamespace(ns)
	o.SetName(name)
	return o
}

// stepRun executes a compiled step pass by pass, keeping its state as the engine does.
type stepRun struct {
	act    *action
	in     *steps.Input
	status v1alpha1.StepStatus
}

func newStepRun(t *testing.T, w *world, policyNamespace, src string) *stepRun {
	t.Helper()
	r := &v1alpha1.ResourceStep{}
	if err := yaml.UnmarshalStrict([]byte(src), r); err != nil {
		t.Fatal(err)
	}
	act, errs := New(w).Compile(compileContext(t, policyNamespace), &v1alpha1.Step{Name: "backup", Resource: r}, field.NewPath("spec", "steps").Index(0))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return stepRunOf(act.(*action), policyNamespace)
}

// stepRunOf runs a compiled step for the deletion of the Cluster shop/orders.
func stepRunOf(act *action, policyNamespace string) *stepRun {
	target := map[string]any{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
		"metadata": map[string]any{"name": "orders", "namespace": "shop", "uid": "c-1", "labels": map[string]any{"ns": "other"}}}
	run := &v1alpha1.TeardownRun{Spec: v1alpha1.TeardownRunSpec{
		PolicyRef: v1alpha1.PolicyReference{Kind: "TeardownPolicy", Namespace: policyNamespace, Name: "final"},
		Target:    v1alpha1.TargetObjectReference{Namespace: "shop", Name: "orders", UID: "c-1"}}}
	s := &stepRun{act: act, status: v1alpha1.StepStatus{Name: "backup", Attempts: 1}}
	s.in = &steps.Input{Run: run, Vars: expr.Vars{expr.VarObject: target, expr.VarSteps: map[string]any{},
		expr.VarRun: map[string]any{"name": "r", "attempt": int64(1)}}, PolicyNamespace: policyNamespace, Now: time.Now()}
	return s
}

func (s *stepRun) pass() steps.Result {
	s.in.Status = s.status.DeepCopy()
	res := s.act.Execute(context.Background(), s.in)
	if res.State != nil {
		s.status.State = res.State
	}
	return res
}

func expectResult(t *testing.T, res steps.Result, outcome steps.Outcome, msg string) {
	t.Helper()
	if res.Outcome != outcome || !strings.Contains(res.Message, msg) {
		t.Fatalf("got outcome %d %q; want %d with %q", res.Outcome, res.Message, outcome, msg)
	}
}

const waitedBackup = backupManifest + `
successCondition: "resource.?status.?phase.orValue('') == 'completed'"
failureCondition: "resource.?status.?phase.orValue('') == 'failed'"
outputs: {backupID: "resource.status.backupId"}
interval: 30s
`

// A Create makes the object, labelled for the deletion and step, waits for its condition
// (watching its kind in its namespace) and succeeds with its outputs; the object is made once.
func TestCreateWaitsForCondition(t *testing.T) {
	w := newWorld()
	s := newStepRun(t, w, "shop", waitedBackup)
	res := s.pass()
	expectResult(t, res, steps.InProgress, "Backup shop/orders-final created; waiting until resource.?status.?phase")
	if res.CheckAfter != 30*time.Second || len(res.Watch) != 1 || res.Watch[0].Namespace != "shop" || res.Watch[0].GVK.Kind != "Backup" {
		t.Fatalf("checks again after %s, watching %v", res.CheckAfter, res.Watch)
	}
	b := w.objects["shop/orders-final"]
	if b == nil || b.GetLabels()[LabelDeletion] == "" || b.GetLabels()[v1alpha1.LabelStep] != "backup" {
		t.Fatalf("created %v", b)
	}
	if name, _, _ := unstructured.NestedString(b.Object, "spec", "cluster", "name"); name != "orders" {
		t.Fatalf("rendered spec.cluster.name %q", name)
	}
	_ = unstructured.SetNestedField(b.Object, "running", "status", "phase")
	expectResult(t, s.pass(), steps.InProgress, "(phase running)")
	_ = unstructured.SetNestedField(b.Object, "completed", "status", "phase")
	_ = unstructured.SetNestedField(b.Object, "b-42", "status", "backupId")
	res = s.pass()
	expectResult(t, res, steps.Succeeded, "Backup shop/orders-final: successCondition holds (phase completed)")
	got := map[string]string{}
	for k, v := range res.Outputs {
		var x string
		_ = json.Unmarshal(v.Raw, &x)
		got[k] = x
	}
	if got["backupID"] != "b-42" || got["name"] != "orders-final" || got["namespace"] != "shop" {
		t.Fatalf("outputs %v", got)
	}
	if creates := strings.Count(strings.Join(w.calls, ";"), "create"); creates != 1 {
		t.Fatalf("%d creates: %v", creates, w.calls)
	}
}

// A pass repeated with no record of the create (a crash between the create and the status
// write) adopts the object the step made; a namesake made by anyone else fails the step.
func TestCreateAdoptsOnlyItsOwn(t *testing.T) {
	w := newWorld()
	s := newStepRun(t, w, "shop", waitedBackup)
	s.pass()
	s.status.State = nil // the record lost
	expectResult(t, s.pass(), steps.InProgress, "Backup shop/orders-final (adopted: this step created it for this deletion before); waiting until")
	if len(w.objects) != 1 {
		t.Fatalf("%d objects", len(w.objects))
	}

	w = newWorld(object("postgresql.cnpg.io/v1", "Backup", "shop", "orders-final", nil))
	s = newStepRun(t, w, "shop", waitedBackup)
	res := s.pass()
	expectResult(t, res, steps.Failed, `Backup shop/orders-final already exists and was not created by step backup for this deletion (its labels teardown.dev/deletion="", teardown.dev/step=""); delete it, or give the manifest another name`)
	if res.Retryable {
		t.Fatal("an object that is not ours is not retried")
	}
}

// failureCondition fails the attempt, retryably.
func TestFailureCondition(t *testing.T) {
	w := newWorld()
	s := newStepRun(t, w, "shop", waitedBackup)
	s.pass()
	_ = unstructured.SetNestedField(w.objects["shop/orders-final"].Object, "failed", "status", "phase")
	res := s.pass()
	expectResult(t, res, steps.Failed, "Backup shop/orders-final: failureCondition holds: resource.?status.?phase.orValue('') == 'failed' (phase failed)")
	if !res.Retryable {
		t.Fatal("failureCondition is retried by the step's retry policy")
	}
}

// A refusal by RBAC names the ServiceAccount, the verb, the resource and the namespace.
func TestForbidden(t *testing.T) {
	w := newWorld()
	w.denied["create"] = true
	s := newStepRun(t, w, "shop", waitedBackup)
	expectResult(t, s.pass(), steps.Failed, `ServiceAccount shop/backup may not create backups.postgresql.cnpg.io in namespace shop: `)
	if len(w.objects) != 0 {
		t.Fatal("created")
	}
}

// A namespace known only once rendered is refused at run time when it is not the policy's.
func TestRenderedNamespaceRefused(t *testing.T) {
	w := newWorld()
	s := newStepRun(t, w, "shop", `
action: Create
serviceAccountName: backup
manifest: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: "${object.metadata.labels.ns}"}}`)
	expectResult(t, s.pass(), steps.Failed, `namespace "other": a TeardownPolicy acts only in its own namespace "shop"`)
	if len(w.calls) != 0 {
		t.Fatalf("called %v", w.calls)
	}
}

// A whole ${...} renders with its type: a Patch of the scale subresource sends an integer.
func TestPatchScaleTyped(t *testing.T) {
	w := newWorld(object("apps/v1", "StatefulSet", "shop", "orders-db", nil))
	s := newStepRun(t, w, "shop", `
action: Patch
serviceAccountName: backup
target: {apiVersion: apps/v1, kind: StatefulSet, name: "${object.metadata.name}-db", subresource: scale}
patch: {spec: {replicas: "${size(object.metadata.name) - 6}"}}`)
	expectResult(t, s.pass(), steps.Succeeded, "StatefulSet shop/orders-db patched")
	if want := `patch shop/orders-db scale {"spec":{"replicas":0}}`; w.calls[0] != want {
		t.Fatalf("called %q, want %q", w.calls[0], want)
	}
}

// A Delete by name waits while finalizers hold the object, and succeeds once it is gone; a
// Delete of an object that does not exist succeeds at once.
func TestDeleteNamed(t *testing.T) {
	held := object("v1", "ConfigMap", "shop", "orders-config", nil)
	held.SetFinalizers([]string{"example.com/hold"})
	w := newWorld(held)
	s := newStepRun(t, w, "shop", `
action: Delete
serviceAccountName: backup
target: {apiVersion: v1, kind: ConfigMap, name: "${object.metadata.name}-config"}`)
	expectResult(t, s.pass(), steps.InProgress, "ConfigMap shop/orders-config deleted; waiting for it to go (finalizers: example.com/hold)")
	expectResult(t, s.pass(), steps.InProgress, "waiting for it to go")
	delete(w.objects, "shop/orders-config")
	expectResult(t, s.pass(), steps.Succeeded, "ConfigMap shop/orders-config deleted and gone")

	s = newStepRun(t, newWorld(), "shop", `
action: Delete
serviceAccountName: backup
target: {apiVersion: v1, kind: ConfigMap, name: gone}`)
	expectResult(t, s.pass(), steps.Succeeded, "ConfigMap shop/gone does not exist: nothing to delete")
}

// A Delete by selector deletes what the selector picks, and only that, and waits until none is
// left.
func TestDeleteSelected(t *testing.T) {
	pvc := func(name, app string) *unstructured.Unstructured {
		o := object("v1", "PersistentVolumeClaim", "shop", name, nil)
		o.SetLabels(map[string]string{"app": app})
		o.SetFinalizers([]string{"kubernetes.io/pvc-protection"})
		return o
	}
	w := newWorld(pvc("data-orders-0", "orders"), pvc("data-orders-1", "orders"), pvc("data-other-0", "other"))
	s := newStepRun(t, w, "shop", `
action: Delete
serviceAccountName: backup
target: {apiVersion: v1, kind: PersistentVolumeClaim, selector: {matchLabels: {app: "${object.metadata.name}"}}}`)
	expectResult(t, s.pass(), steps.InProgress, `deleted PersistentVolumeClaim objects matching "app=orders" in namespace shop; waiting for 2 to go: data-orders-0, data-orders-1`)
	if w.objects["shop/data-other-0"].GetDeletionTimestamp() != nil {
		t.Fatal("deleted an object the selector does not pick")
	}
	delete(w.objects, "shop/data-orders-0")
	delete(w.objects, "shop/data-orders-1")
	expectResult(t, s.pass(), steps.Succeeded, `no PersistentVolumeClaim objects matching "app=orders" in namespace shop are left`)
}

// A step may not delete the object being torn down: it fails, saying why, instead of waiting for an
// object the operator holds; a Delete by selector leaves it out.
func TestDeleteSparesTheTarget(t *testing.T) {
	target := object("postgresql.cnpg.io/v1", "Cluster", "shop", "orders", nil)
	target.SetUID("c-1")
	target.SetLabels(map[string]string{"app": "orders"})
	w := newWorld(target)
	s := newStepRun(t, w, "shop", `
action: Delete
serviceAccountName: backup
target: {apiVersion: postgresql.cnpg.io/v1, kind: Cluster, name: "${object.metadata.name}"}`)
	res := s.pass()
	expectResult(t, res, steps.Failed, "Cluster shop/orders is the object being torn down, which the operator holds until the pipeline ends")
	if res.Retryable || w.objects["shop/orders"].GetDeletionTimestamp() != nil {
		t.Fatalf("retryable %v, deleted %v", res.Retryable, w.objects["shop/orders"].GetDeletionTimestamp())
	}
	s = newStepRun(t, w, "shop", `
action: Delete
serviceAccountName: backup
target: {apiVersion: postgresql.cnpg.io/v1, kind: Cluster, selector: {matchLabels: {app: orders}}}`)
	expectResult(t, s.pass(), steps.Succeeded, "no Cluster objects matching \"app=orders\" in namespace shop are left")
	if _, ok := w.objects["shop/orders"]; !ok {
		t.Fatal("the selector deleted the target")
	}
}

// A failureCondition that cannot be evaluated keeps the step waiting, saying why: it is no success.
func TestFailureConditionError(t *testing.T) {
	w := newWorld()
	s := newStepRun(t, w, "shop", backupManifest+`
successCondition: "true"
failureCondition: "resource.status.phase == 'failed'"`)
	expectResult(t, s.pass(), steps.InProgress, "created; failureCondition: evaluating \"resource.status.phase == 'failed'\": no such key: status")
}

// A retry meeting its object of an earlier attempt being deleted waits until it is gone, then
// creates it again.
func TestCreateWaitsForItsObjectToGo(t *testing.T) {
	w := newWorld()
	s := newStepRun(t, w, "shop", waitedBackup)
	s.pass()
	b := w.objects["shop/orders-final"]
	b.SetFinalizers([]string{"example.com/hold"})
	b.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	s.status.Attempts, s.status.State = 2, nil
	expectResult(t, s.pass(), steps.InProgress, "Backup shop/orders-final, made by this step for this deletion, is being deleted; creating it again once it is gone (finalizers: example.com/hold)")
	delete(w.objects, "shop/orders-final")
	expectResult(t, s.pass(), steps.InProgress, "Backup shop/orders-final created")
	if w.objects["shop/orders-final"] == nil || w.objects["shop/orders-final"].GetDeletionTimestamp() != nil {
		t.Fatal("not created again")
	}
}
