package policy

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedEntry returns the entry of obj's managed fields that owns the field at path (for
// example "f:metadata", "f:annotations", "f:teardown.dev/abandon"): the field manager that set it
// (a name the client picks: never an identity) and when. Nil when no entry does.
func ManagedEntry(obj client.Object, path ...string) *metav1.ManagedFieldsEntry {
	entries := obj.GetManagedFields()
	for i := range entries {
		if entries[i].FieldsV1 == nil {
			continue
		}
		raw := entries[i].FieldsV1.GetRawString()
		if !slices.ContainsFunc(path, func(p string) bool { return !strings.Contains(raw, `"`+p+`"`) }) {
			return &entries[i]
		}
	}
	return nil
}
