package lint

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/cli/manifest"
	cschema "github.com/teardown-dev/teardown-operator/cli/schema"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// compileLeniently compiles a policy that fails its schema, so that one lint reports the
// compiler's errors with the schema's and a policy is fixed in one round: the values the schema
// refuses are left out (pruning has dropped unknown fields already), and the policy is decoded as
// far as it goes. Compiler errors at or under a field the schema refused are left out: they
// repeat it.
func (l *Linter) compileLeniently(obj *unstructured.Unstructured, schemaErrs field.ErrorList) field.ErrorList {
	view, ok := l.decodeLeniently(obj, schemaErrs)
	if !ok {
		return nil // nothing to compile: the schema's errors say why
	}
	_, errs := l.compiler.Compile(view)
	errs = append(errs, l.kindErrors(view)...)
	return slices.DeleteFunc(errs, func(e *field.Error) bool {
		return slices.ContainsFunc(schemaErrs, func(s *field.Error) bool { return repeats(e, s) })
	})
}

// decodeLeniently decodes the policy as it is, or else with the values the schema refuses left
// out, or else as far as encoding/json goes.
func (l *Linter) decodeLeniently(obj *unstructured.Unstructured, schemaErrs field.ErrorList) (policy.View, bool) {
	if view, err := PolicyOf(obj, l.opts.Namespace); err == nil {
		return view, true
	}
	u := obj.DeepCopy()
	for _, e := range schemaErrs {
		dropScalar(u.Object, e.Field)
	}
	if view, err := PolicyOf(u, l.opts.Namespace); err == nil {
		return view, true
	}
	view, err := lenientPolicyOf(u, l.opts.Namespace)
	return view, err == nil
}

// repeats reports whether a compiler error e follows from the schema's error s: it is at or
// under the field s refuses, or, for an unknown field (dropped: a misspelt step kind, say), at
// the object that held it.
func repeats(e, s *field.Error) bool {
	if under(e.Field, s.Field) {
		return true
	}
	parent, _ := parentPath(s.Field)
	return cschema.IsUnknownField(s) && e.Field == parent
}

// under reports whether path is at or under parent.
func under(path, parent string) bool {
	return path == parent || strings.HasPrefix(path, parent+".") || strings.HasPrefix(path, parent+"[")
}

// parentPath is the path of the object or list that holds path's last field or item.
func parentPath(path string) (string, bool) {
	i := strings.LastIndexAny(path, ".[")
	if i <= 0 {
		return "", false
	}
	return path[:i], true
}

// lenientPolicyOf decodes a policy whose values may be of the wrong type: encoding/json leaves
// such a value out and goes on.
func lenientPolicyOf(u *unstructured.Unstructured, namespace string) (policy.View, error) {
	obj, err := manifest.Scheme.New(u.GroupVersionKind())
	if err != nil {
		return policy.View{}, err
	}
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return policy.View{}, err
	}
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, obj); err != nil && !errors.As(err, &typeErr) {
		return policy.View{}, err
	}
	return viewIn(obj, u.GetKind(), namespace)
}

// dropScalar removes the value at path (spec.steps[0].timeout) from obj when it is no object or
// list: a value the schema refuses, which decoding might not get past.
func dropScalar(obj map[string]any, path string) {
	segs, ok := splitPath(path)
	if !ok || len(segs) == 0 {
		return
	}
	var cur any = obj
	for _, s := range segs[:len(segs)-1] {
		cur = child(cur, s)
	}
	last := segs[len(segs)-1]
	switch c := cur.(type) {
	case map[string]any:
		if v, ok := c[last]; ok && isScalar(v) {
			delete(c, last)
		}
	case []any:
		// A list keeps its length: the value is blanked, not removed, so indexes stay right.
		if i, err := strconv.Atoi(last); err == nil && i >= 0 && i < len(c) && isScalar(c[i]) {
			c[i] = nil
		}
	}
}

func child(v any, seg string) any {
	switch c := v.(type) {
	case map[string]any:
		return c[seg]
	case []any:
		if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(c) {
			return c[i]
		}
	}
	return nil
}

func isScalar(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return false
	}
	return true
}

// splitPath splits a field path into fields, keys and indexes: spec.steps[0].http.headers[1]
// is spec, steps, 0, http, headers, 1.
func splitPath(path string) ([]string, bool) {
	var segs []string
	for path != "" {
		switch {
		case path[0] == '.':
			path = path[1:]
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return nil, false
			}
			segs = append(segs, path[1:end])
			path = path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			segs = append(segs, path[:end])
			path = path[end:]
		}
	}
	return segs, true
}
