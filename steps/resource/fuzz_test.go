package resource

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
)

// FuzzResourceStep compiles a resource step read from arbitrary bytes (YAML or JSON), for a
// TeardownPolicy or a ClusterTeardownPolicy, and runs what compiles for a few passes against the
// scripted world. Nothing may panic; a TeardownPolicy's step may touch no other namespace than its
// own, and a failed attempt always says why.
func FuzzResourceStep(f *testing.F) {
	seeds := []string{
		backupManifest,
		waitedBackup,
		`{action: Delete, serviceAccountName: backup, target: {apiVersion: v1, kind: ConfigMap, name: x}}`,
		`{action: Delete, serviceAccountName: backup, target: {apiVersion: v1, kind: ConfigMap, selector: {matchLabels: {a: "${object.metadata.name}"}}}}`,
		`{action: Patch, serviceAccountName: backup, target: {apiVersion: apps/v1, kind: StatefulSet, name: db, subresource: scale}, patch: {spec: {replicas: "${0}"}}}`,
		`{action: Patch, serviceAccountName: backup, patchType: JSON, target: {apiVersion: apps/v1, kind: StatefulSet, name: db}, patch: [{op: replace, path: /spec/replicas, value: 0}]}`,
		`{action: Apply, serviceAccountName: backup, manifest: {apiVersion: v1, kind: ConfigMap, metadata: {name: x, namespace: "${object.metadata.labels.ns}"}, data: "${object.metadata.labels}"}}`,
		`{action: Create, manifest: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${object.metadata.name}"}, data: {a: "${[1, 2]}", b: "${null}"}}}`,
		`{action: Create, serviceAccountName: backup, manifest: [1, 2]}`,
		`{action: Create, serviceAccountName: backup, manifest: {kind: X}}`,
		`{action: Delete, serviceAccountName: backup, target: {apiVersion: v1, kind: PersistentVolume, name: x}}`,
		`{action: Create, serviceAccountName: backup, manifest: {apiVersion: "${x}", kind: Backup, metadata: {name: x}}, successCondition: "resource.status.phase"}`,
	}
	for _, s := range seeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, src string, namespaced bool) {
		r := &v1alpha1.ResourceStep{}
		if yaml.Unmarshal([]byte(src), r) != nil {
			return
		}
		ns := ""
		if namespaced {
			ns = "shop"
		}
		w := newWorld()
		act, errs := New(w).Compile(compileContext(t, ns), &v1alpha1.Step{Name: "backup", Resource: r}, field.NewPath("spec", "steps").Index(0))
		if len(errs) > 0 || act == nil {
			return
		}
		s := stepRunOf(act.(*action), ns)
		for range 3 {
			res := s.pass()
			if res.Outcome == steps.Failed && res.Message == "" {
				t.Fatalf("a failed attempt with no message: %+v", res)
			}
			if res.Outcome != steps.InProgress {
				break
			}
		}
		if namespaced {
			for _, call := range w.calls {
				if f := strings.Fields(call); len(f) > 1 && !strings.HasPrefix(f[1], "shop/") {
					t.Fatalf("a TeardownPolicy's step called %q, outside its namespace", call)
				}
			}
		}
	})
}
