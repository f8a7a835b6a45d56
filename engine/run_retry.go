package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// clearRetryAnnotation removes the retry annotation once the pass that handled it is written, if
// it still holds the value handled (a newer request stays for the next pass).
func (r *runReconciler) clearRetryAnnotation(ctx context.Context, run *v1alpha1.TeardownRun, value string) error {
	if run.Annotations[v1alpha1.AnnotationRetry] != value {
		return nil
	}
	path := "/metadata/annotations/" + jsonPointerEscape(v1alpha1.AnnotationRetry)
	ops := []map[string]any{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	out := run.DeepCopy()
	if err := r.client.Patch(ctx, out, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("removing annotation %s: %w", v1alpha1.AnnotationRetry, err)
	}
	r.written.Set(client.ObjectKeyFromObject(run), out.ResourceVersion)
	return nil
}
