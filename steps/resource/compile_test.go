package resource

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/internal/kindtypes"
	"github.com/teardown-dev/teardown-operator/steps"
)

// clusterScoped are the kinds the tests' discovery serves cluster-scoped; every other kind is
// namespaced, but Unknown, which is not served.
var clusterScoped = map[string]bool{"Namespace": true, "PersistentVolume": true}

func testScope(gvk schema.GroupVersionKind) (bool, error) {
	if gvk.Kind == "Unknown" {
		return false, fmt.Errorf("kind %s is not served", gvk)
	}
	return !clusterScoped[gvk.Kind], nil
}

// compileContext is a TeardownPolicy's in namespace shop (namespace ""  is a cluster policy's),
// protecting ConfigMaps (cluster policies: Namespaces), with discovery and typed built-in kinds.
func compileContext(t *testing.T, namespace string) steps.CompileContext {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	cc := steps.CompileContext{Env: env.Reserve(VarResource), Namespaced: namespace != "", Namespace: namespace,
		Target: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, TargetScope: steps.ScopeNamespaced,
		KindScope: testScope, KindType: kindtypes.Builtin}
	if namespace == "" {
		cc.Target, cc.TargetScope = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, steps.ScopeCluster
	}
	return cc
}

// compileStep compiles a resource step written as YAML (the step's resource field).
func compileStep(t *testing.T, cc steps.CompileContext, src string) (*action, field.ErrorList) {
	t.Helper()
	r := &v1alpha1.ResourceStep{}
	if err := yaml.UnmarshalStrict([]byte(src), r); err != nil {
		t.Fatalf("test step: %v", err)
	}
	act, errs := New(nil).Compile(cc, &v1alpha1.Step{Name: "backup", Resource: r}, field.NewPath("spec", "steps").Index(0))
	if act == nil {
		return nil, errs
	}
	return act.(*action), errs
}

const backupManifest = `
action: Create
serviceAccountName: backup
manifest:
  apiVersion: postgresql.cnpg.io/v1
  kind: Backup
  metadata: {name: "${object.metadata.name}-final"}
  spec: {cluster: {name: "${object.metadata.name}"}}
`

// TestCompileErrors: bad input is refused when the policy is compiled, naming the field.
func TestCompileErrors(t *testing.T) {
	const p = "spec.steps[0].resource."
	tests := map[string]struct {
		cluster bool
		src     string
		want    []string // each error's text starts with one of these, in order
	}{
		"a valid Create": {src: backupManifest},
		"a manifest without kind": {src: `
action: Create
serviceAccountName: backup
manifest: {apiVersion: v1, metadata: {name: x}}`,
			want: []string{p + `manifest.kind: Required value`}},
		"a manifest without a name": {src: `
action: Create
serviceAccountName: backup
manifest: {apiVersion: v1, kind: ConfigMap, metadata: {generateName: x-}}`,
			want: []string{p + `manifest.metadata.name: Required value: the object's name, which may use ${...}: a Create that is repeated adopts the object it made by its name; generateName would make another object on every repeat`}},
		"an interpolated kind": {src: `
action: Apply
serviceAccountName: backup
manifest: {apiVersion: v1, kind: "${object.kind}", metadata: {name: x}}`,
			want: []string{p + `manifest.kind: Invalid value: "${object.kind}": is written out, not interpolated`}},
		"a namespace other than the policy's": {src: `
action: Create
serviceAccountName: backup
manifest: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: other}}`,
			want: []string{p + `manifest.metadata.namespace: Forbidden: a TeardownPolicy acts only in its own namespace "shop"`}},
		"a cluster-scoped kind in a TeardownPolicy": {src: `
action: Delete
serviceAccountName: backup
target: {apiVersion: v1, kind: PersistentVolume, name: x}`,
			want: []string{p + `target.kind: Forbidden: PersistentVolume is cluster-scoped; a TeardownPolicy acts only on objects in its own namespace "shop" (use a ClusterTeardownPolicy)`}},
		"no ServiceAccount in a TeardownPolicy": {src: `
action: Delete
target: {apiVersion: v1, kind: ConfigMap, name: x}`,
			want: []string{p + `serviceAccountName: Required value: a TeardownPolicy's resource steps act as a ServiceAccount of its namespace "shop"`}},
		"a ServiceAccount name that is not a name": {src: `
action: Delete
serviceAccountName: Backup_SA
target: {apiVersion: v1, kind: ConfigMap, name: x}`,
			want: []string{p + `serviceAccountName: Invalid value: "Backup_SA": not a ServiceAccount name: a lowercase RFC 1123 subdomain`}},
		"a ServiceAccount of another namespace in a TeardownPolicy": {src: `
action: Delete
serviceAccountName: backup
serviceAccountNamespace: kube-system
target: {apiVersion: v1, kind: ConfigMap, name: x}`,
			want: []string{p + `serviceAccountNamespace: Forbidden: a TeardownPolicy acts only as a ServiceAccount of its own namespace "shop"`}},
		"a cluster policy's ServiceAccount without its namespace": {cluster: true, src: `
action: Delete
serviceAccountName: backup
target: {apiVersion: v1, kind: PersistentVolume, name: x}`,
			want: []string{p + `serviceAccountNamespace: Required value`}},
		"a namespaced kind for a cluster-scoped target, no namespace": {cluster: true, src: `
action: Create
manifest: {apiVersion: velero.io/v1, kind: Backup, metadata: {name: x}}`,
			want: []string{p + `manifest.metadata.namespace: Required value: Namespace is cluster-scoped, so there is no target namespace to put the Backup in: name one`}},
		"a condition that is not a bool": {src: backupManifest + `successCondition: "'completed'"`,
			want: []string{p + `successCondition: Invalid value: "'completed'": must evaluate to bool, not string`}},
		"a misspelt field of a typed kind": {src: `
action: Patch
serviceAccountName: backup
target: {apiVersion: apps/v1, kind: StatefulSet, name: db, subresource: scale}
patch: {spec: {replicas: 0}}
successCondition: "resource.status.replicaz == 0"`,
			want: []string{p + `successCondition: Invalid value: "resource.status.replicaz == 0": ERROR: <input>:1:16: undefined field 'replicaz'`}},
		"conditions on a Delete": {src: `
action: Delete
serviceAccountName: backup
target: {apiVersion: v1, kind: ConfigMap, name: x}
successCondition: "true"`,
			want: []string{p + `successCondition: Forbidden: a Delete succeeds when its objects are gone`}},
		"a Patch without a patch": {src: `
action: Patch
serviceAccountName: backup
target: {apiVersion: apps/v1, kind: StatefulSet, name: db}`,
			want: []string{p + `patch: Required value`}},
		"a Patch by selector": {src: `
action: Patch
serviceAccountName: backup
target: {apiVersion: apps/v1, kind: StatefulSet, selector: {matchLabels: {app: db}}}
patch: {spec: {replicas: 0}}`,
			want: []string{p + `target.selector: Forbidden: is for Delete only`}},
		"a JSON patch that is not a list": {src: `
action: Patch
serviceAccountName: backup
patchType: JSON
target: {apiVersion: apps/v1, kind: StatefulSet, name: db}
patch: {spec: {replicas: 0}}`,
			want: []string{p + `patch: Invalid value: a JSON patch is a list of operations`}},
		"a JSON patch operation without a path": {src: `
action: Patch
serviceAccountName: backup
patchType: JSON
target: {apiVersion: apps/v1, kind: StatefulSet, name: db}
patch: [{op: replace, value: 0}]`,
			want: []string{p + `patch[0].path: Required value`}},
		"an output named like a built-in one": {src: backupManifest + `outputs: {name: "resource.metadata.name"}`,
			want: []string{p + `outputs[name]: Invalid value: "name": is set by the step itself`}},
		"an operator label": {src: `
action: Create
serviceAccountName: backup
manifest: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, labels: {teardown.dev/step: x}}}`,
			want: []string{p + `manifest.metadata.labels[teardown.dev/step]: Forbidden: the teardown.dev/ prefix is the operator's`}},
		"a broken interpolation": {src: `
action: Create
serviceAccountName: backup
manifest: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${object.metadata.name"}}`,
			want: []string{p + `manifest.metadata.name: Invalid value:`}},
		"an empty selector": {src: `
action: Delete
serviceAccountName: backup
target: {apiVersion: v1, kind: ConfigMap, selector: {}}`,
			want: []string{p + `target.selector: Required value: an empty selector picks every object of the kind`}},
		"propagationPolicy on a Create": {src: backupManifest + `propagationPolicy: Foreground`,
			want: []string{p + `propagationPolicy: Forbidden: is for action Delete only`}},
		"teardown.dev objects": {cluster: true, src: `
action: Delete
target: {apiVersion: teardown.dev/v1alpha1, kind: TeardownRun, name: x, namespace: y}`,
			want: []string{p + `target.kind: Forbidden: a step may not act on teardown.dev objects`}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ns := "shop"
			if tt.cluster {
				ns = ""
			}
			_, errs := compileStep(t, compileContext(t, ns), tt.src)
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d: %v", len(errs), len(tt.want), errs)
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tt.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s...", i, e.Error(), tt.want[i])
				}
			}
		})
	}
}

// TestCompileTypesResource: `resource` is typed from the kind's schema when it is known, so a
// field the kind has compiles and a field it lacks does not; an unknown kind's is dyn.
func TestCompileTypesResource(t *testing.T) {
	cc := compileContext(t, "shop")
	ok := `
action: Patch
serviceAccountName: backup
target: {apiVersion: apps/v1, kind: StatefulSet, name: db}
patch: {spec: {replicas: 0}}
successCondition: "resource.?status.?replicas.orValue(0) == 0"
outputs: {generation: "resource.metadata.generation"}`
	if _, errs := compileStep(t, cc, ok); len(errs) > 0 {
		t.Fatalf("a condition over the StatefulSet's fields: %v", errs)
	}
	untyped := backupManifest + `successCondition: "resource.status.phse == 'completed'"`
	if _, errs := compileStep(t, cc, untyped); len(errs) > 0 {
		t.Fatalf("a kind without a known schema is dyn: %v", errs)
	}
	cc.KindType = func(schema.GroupVersionKind) (expr.Type, error) {
		return expr.ObjectType("resource.backup", map[string]expr.Type{
			"status": expr.ObjectType("resource.backup.status", map[string]expr.Type{"phase": expr.String}),
		}), nil
	}
	_, errs := compileStep(t, cc, untyped)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "undefined field 'phse'") {
		t.Fatalf("a misspelt field of a kind whose schema is known: %v", errs)
	}
}
