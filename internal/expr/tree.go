package expr

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Tree is a JSON value (as decoded by encoding/json: maps, slices, strings, numbers, booleans,
// nil) in which every string is a Template. It renders to a new value of the same shape, so a
// whole object (a Job's spec) can be written with ${...} anywhere a string goes.
type Tree struct {
	root treeNode
	// templated counts the strings that hold an expression.
	templated int
	// runTime are the paths of the strings known only when rendered: those holding an
	// expression, and those that did not compile.
	runTime []string
}

// Templated returns how many strings of the tree hold an expression.
func (t *Tree) Templated() int { return t.templated }

type treeNode struct {
	path  string
	obj   map[string]*treeNode
	arr   []*treeNode
	tmpl  *Template // a string holding an expression
	value any       // any other leaf: literal strings (with $${ already unescaped), numbers, ...
	// broken marks a string that did not compile; it stands for a string in Placeholder, so
	// that the rest of the tree can still be checked.
	broken bool
}

// CompileTree compiles every string in v. Errors name the string's path under path, such as
// spec.steps[0].job.template.spec.template.spec.containers[0].image.
func (e *Env) CompileTree(v any, path *field.Path) (*Tree, field.ErrorList) {
	t := &Tree{}
	n, errs := e.compileNode(v, path, &t.templated)
	t.root = *n
	t.root.walk(func(n *treeNode) {
		if n.tmpl != nil || n.broken {
			t.runTime = append(t.runTime, n.path)
		}
	})
	return t, errs
}

// RenderedAt reports whether the value at path (a path CompileTree reported under, such as
// spec.steps[0].job.template.spec.template.spec.containers[0]) holds a string known only when
// rendered, itself or anywhere under it: checks of what the API server will be sent skip it.
func (t *Tree) RenderedAt(path string) bool {
	for _, p := range t.runTime {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			return true
		}
	}
	return false
}

func (n *treeNode) walk(visit func(*treeNode)) {
	visit(n)
	for _, c := range n.obj {
		c.walk(visit)
	}
	for _, c := range n.arr {
		c.walk(visit)
	}
}

func (e *Env) compileNode(v any, path *field.Path, templated *int) (*treeNode, field.ErrorList) {
	n := &treeNode{path: path.String()}
	var errs field.ErrorList
	switch x := v.(type) {
	case map[string]any:
		n.obj = make(map[string]*treeNode, len(x))
		for _, k := range sortedKeys(x) {
			child, cerrs := e.compileNode(x[k], path.Child(k), templated)
			n.obj[k] = child
			errs = append(errs, cerrs...)
		}
	case []any:
		n.arr = make([]*treeNode, len(x))
		for i := range x {
			child, cerrs := e.compileNode(x[i], path.Index(i), templated)
			n.arr[i] = child
			errs = append(errs, cerrs...)
		}
	case string:
		t, err := e.CompileTemplate(x)
		switch {
		case err != nil:
			n.broken = true
			errs = append(errs, field.Invalid(path, x, err.Error()+" (write $${ for a literal ${)"))
		case t.Literal():
			n.value, _ = t.Render(context.Background(), nil) // no expression: only unescapes $${
		default:
			n.tmpl = t
			*templated++
		}
	default:
		n.value = x
	}
	return n, errs
}

// Render evaluates every template and returns the resulting value. An error names the path of
// the string that failed.
func (t *Tree) Render(ctx context.Context, vars Vars) (any, error) {
	return t.root.render(ctx, vars)
}

func (n *treeNode) render(ctx context.Context, vars Vars) (any, error) {
	switch {
	case n.obj != nil:
		out := make(map[string]any, len(n.obj))
		for k, c := range n.obj {
			v, err := c.render(ctx, vars)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	case n.arr != nil:
		out := make([]any, len(n.arr))
		for i, c := range n.arr {
			v, err := c.render(ctx, vars)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case n.tmpl != nil:
		s, err := n.tmpl.Render(ctx, vars)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.path, err)
		}
		return s, nil
	}
	return n.value, nil
}

// Placeholder returns the value with every templated string replaced by s, for checking the
// shape of a tree before anything can be rendered.
func (t *Tree) Placeholder(s string) any {
	return t.root.placeholder(s)
}

func (n *treeNode) placeholder(s string) any {
	switch {
	case n.obj != nil:
		out := make(map[string]any, len(n.obj))
		for k, c := range n.obj {
			out[k] = c.placeholder(s)
		}
		return out
	case n.arr != nil:
		out := make([]any, len(n.arr))
		for i, c := range n.arr {
			out[i] = c.placeholder(s)
		}
		return out
	case n.tmpl != nil || n.broken:
		return s
	}
	return n.value
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
