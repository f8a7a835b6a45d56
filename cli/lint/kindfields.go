package lint

import (
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// serverDefaults are fields of built-in kinds that their Go types may leave out but the API
// server always sets (its defaulting), read by policies often enough to list.
var serverDefaults = map[schema.GroupKind][]string{
	{Kind: "Secret"}:                     {"type"},
	{Kind: "Service"}:                    {"spec.type"},
	{Kind: "PersistentVolumeClaim"}:      {"spec.volumeMode"},
	{Group: "apps", Kind: "Deployment"}:  {"spec.replicas"},
	{Group: "apps", Kind: "StatefulSet"}: {"spec.replicas"},
	{Group: "apps", Kind: "ReplicaSet"}:  {"spec.replicas"},
}

// kindFields tells, for a built-in kind, which fields (by their names under the object) its
// objects always have: those its Go type always writes (a struct, not a pointer: a Deployment's
// spec, spec.template, status; a field without omitempty: a pod's containers) and
// serverDefaults. Nil for other kinds: only the fields every
// object has are known.
func kindFields(gvk schema.GroupVersionKind) func(names []string) bool {
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil
	}
	t := reflect.TypeOf(obj)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	defaults := serverDefaults[gvk.GroupKind()]
	return func(names []string) bool {
		return slices.Contains(defaults, strings.Join(names, ".")) || alwaysWritten(t, names)
	}
}

// alwaysWritten reports whether every field along names is one encoding/json always writes: a
// struct, or a field without omitempty (a required one, such as a pod's containers).
func alwaysWritten(t reflect.Type, names []string) bool {
	for _, n := range names {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem() // an element of a list read by index: the list is what was checked
		}
		if t.Kind() != reflect.Struct {
			return false
		}
		f, ok := jsonField(t, n)
		if !ok {
			return false
		}
		_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() != reflect.Struct && strings.Contains(opts, "omitempty") {
			return false
		}
		t = f.Type
	}
	return true
}

// jsonField is t's field whose JSON name is name, looking into inlined structs.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == name:
			return f, true
		case tag == "" && f.Anonymous && f.Type.Kind() == reflect.Struct:
			if inner, ok := jsonField(f.Type, name); ok {
				return inner, true
			}
		}
	}
	return reflect.StructField{}, false
}
