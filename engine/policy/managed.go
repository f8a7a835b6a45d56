package policy

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedEntry returns the entry of obj's managed fields that owns the field at path (for
// example "f:metadata", "f:annotations", "f:teardown.dev/abandon"): who set it, and when. Nil
// when no entry does.
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

// ManagerOf returns the field manager that owns the field at path, for recording who broke glass;
// empty when unknown.
func ManagerOf(obj client.Object, path ...string) string {
	if mf := ManagedEntry(obj, path...); mf != nil {
		return mf.Manager
	}
	return ""
}
