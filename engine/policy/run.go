package policy

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/internal/secretdata"
)

// NewRun is the run of policy p for the deletion of an object of kind gvk, with the object's
// snapshot (Snapshot). The operator builds it when the object's deletion begins and runs its first
// pass before recording it (a run that goes on gets v1alpha1.FinalizerRun then); the CLI builds
// the same run to plan and test a pipeline, so both run it alike.
func (c *Compiled) NewRun(gvk schema.GroupVersionKind, obj metav1.Object, snapshot []byte) *v1alpha1.TeardownRun {
	ns, name, uid := obj.GetNamespace(), obj.GetName(), obj.GetUID()
	run := &v1alpha1.TeardownRun{
		ObjectMeta: metav1.ObjectMeta{
			Name:      naming.RunName(c.Key.Kind, c.Key.Namespace, c.Key.Name, name, uid),
			Namespace: ns,
			Labels: map[string]string{
				v1alpha1.LabelPolicyKind:      c.Key.Kind,
				v1alpha1.LabelPolicy:          naming.LabelValue(c.Key.Name),
				v1alpha1.LabelTargetUID:       string(uid),
				v1alpha1.LabelTargetKind:      naming.LabelValue(gvk.Kind),
				v1alpha1.LabelTargetName:      naming.LabelValue(name),
				v1alpha1.LabelTargetNamespace: ns,
			},
		},
		Spec: v1alpha1.TeardownRunSpec{
			PolicyRef: v1alpha1.PolicyReference{Kind: c.Key.Kind, Namespace: c.Key.Namespace, Name: c.Key.Name, UID: c.UID, Generation: c.Generation},
			Target: v1alpha1.TargetObjectReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
				Namespace: ns, Name: name, UID: uid},
			Finalizer: c.Finalizer,
			Pipeline:  *c.Spec.Pipeline.DeepCopy(),
			Object:    runtime.RawExtension{Raw: snapshot},
		},
	}
	if c.Key.Namespaced() {
		run.Labels[v1alpha1.LabelPolicyNamespace] = c.Key.Namespace
	}
	if c.TwoPhase() {
		run.Spec.Trigger = v1alpha1.TriggerDeleteRequest
	}
	return run
}

// Snapshot encodes an object for its run, without managed fields and without a Secret's data.
func Snapshot(obj map[string]any) ([]byte, error) {
	u := &unstructured.Unstructured{Object: secretdata.Without(obj)}
	u.SetManagedFields(nil)
	return json.Marshal(u.Object)
}
