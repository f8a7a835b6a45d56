package watch

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTrimMetadata(t *testing.T) {
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name:          "db",
		Labels:        map[string]string{"app": "db"},
		Finalizers:    []string{"teardownpolicy.teardown.dev/db"},
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: `{"kind":"ConfigMap","data":{"big":"..."}}`, "teardown.dev/abandon": "me"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	m := &Manager{shared: newInterner()}
	out, err := m.transform(obj)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*metav1.PartialObjectMetadata)
	if got.ManagedFields != nil {
		t.Error("managed fields kept")
	}
	if _, ok := got.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Error("kubectl's last applied configuration kept")
	}
	if got.Annotations["teardown.dev/abandon"] != "me" || got.Labels["app"] != "db" || len(got.Finalizers) != 1 {
		t.Errorf("trimmed what the engine reads: %+v", got.ObjectMeta)
	}
}
