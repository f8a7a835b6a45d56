// Package secretdata keeps a Secret's data out of everything the operator evaluates or records:
// run snapshots, lookups, the objects matches and deletion guards are evaluated over. What an
// expression never sees, no message, event, status or log can quote, whatever fails.
package secretdata

import corev1 "k8s.io/api/core/v1"

// Without returns obj (an object as JSON decodes it) without a Secret's data: data and
// stringData are dropped, and so is the annotation in which kubectl apply keeps the whole
// applied object. Any other object is returned as it is. obj itself is not changed, so that it
// may be a cache's.
func Without(obj map[string]any) map[string]any {
	if !isSecret(obj) {
		return obj
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "data" && k != "stringData" {
			out[k] = v
		}
	}
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return out
	}
	ann, ok := md["annotations"].(map[string]any)
	if _, applied := ann[corev1.LastAppliedConfigAnnotation]; !ok || !applied {
		return out
	}
	meta := make(map[string]any, len(md))
	for k, v := range md {
		meta[k] = v
	}
	kept := make(map[string]any, len(ann))
	for k, v := range ann {
		if k != corev1.LastAppliedConfigAnnotation {
			kept[k] = v
		}
	}
	meta["annotations"] = kept
	out["metadata"] = meta
	return out
}

// isSecret reports whether obj is a core Secret, of any version of the core group.
func isSecret(obj map[string]any) bool {
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	return kind == "Secret" && (apiVersion == "v1" || apiVersion == "")
}
