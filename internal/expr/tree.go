package expr

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
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
	whole *Program  // with TreeOptions.TypedWhole, a string that is one ${...} and nothing else
	value any       // any other leaf: literal strings (with $${ already unescaped), numbers, ...
	// broken marks a string that did not compile; it stands for a string in Placeholder, so
	// that the rest of the tree can still be checked.
	broken bool
}

// TreeOptions change how CompileTreeWith reads strings.
type TreeOptions struct {
	// TypedWhole renders a string that is one ${...} and nothing else as the expression's value,
	// with its type (a number, a bool, a list, a map, null), where a manifest field needs more
	// than text. A string with text around the expression, or several, still renders as text.
	TypedWhole bool
}

// CompileTree compiles every string in v. Errors name the string's path under path, such as
// spec.steps[0].job.template.spec.template.spec.containers[0].image.
func (e *Env) CompileTree(v any, path *field.Path) (*Tree, field.ErrorList) {
	return e.CompileTreeWith(v, path, TreeOptions{})
}

// CompileTreeWith is CompileTree with options.
func (e *Env) CompileTreeWith(v any, path *field.Path, opts TreeOptions) (*Tree, field.ErrorList) {
	t := &Tree{}
	c := treeCompiler{env: e, opts: opts, templated: &t.templated}
	n, errs := c.node(v, path)
	t.root = *n
	t.root.walk(func(n *treeNode) {
		if n.tmpl != nil || n.whole != nil || n.broken {
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

// treeCompiler compiles the nodes of one tree.
type treeCompiler struct {
	env       *Env
	opts      TreeOptions
	templated *int
}

func (c treeCompiler) node(v any, path *field.Path) (*treeNode, field.ErrorList) {
	n := &treeNode{path: path.String()}
	var errs field.ErrorList
	switch x := v.(type) {
	case map[string]any:
		n.obj = make(map[string]*treeNode, len(x))
		for _, k := range sortedKeys(x) {
			child, cerrs := c.node(x[k], path.Child(k))
			n.obj[k] = child
			errs = append(errs, cerrs...)
		}
	case []any:
		n.arr = make([]*treeNode, len(x))
		for i := range x {
			child, cerrs := c.node(x[i], path.Index(i))
			n.arr[i] = child
			errs = append(errs, cerrs...)
		}
	case string:
		t, err := c.env.CompileTemplate(x)
		switch {
		case err != nil:
			n.broken = true
			errs = append(errs, field.Invalid(path, x, err.Error()+" (write $${ for a literal ${)"))
		case t.Literal():
			n.value, _ = t.Render(context.Background(), nil) // no expression: only unescapes $${
		case c.opts.TypedWhole && t.Whole() != nil:
			n.whole = t.Whole()
			*c.templated++
		default:
			n.tmpl = t
			*c.templated++
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
	case n.whole != nil:
		v, err := n.whole.Eval(ctx, vars)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.path, err)
		}
		out, err := jsonValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s: ${%s}: %w", n.path, n.whole.src, err)
		}
		return out, nil
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
	case n.tmpl != nil || n.whole != nil || n.broken:
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

// jsonValue converts a CEL value to the JSON value a manifest holds: maps, slices, strings, bools,
// nil, int64 for CEL integers (exact, where JSON through float64 would round above 2^53) and
// float64 for doubles. Timestamps, durations and bytes take their JSON text forms.
func jsonValue(v ref.Val) (any, error) {
	switch x := v.(type) {
	case types.Int:
		return int64(x), nil
	case types.Uint:
		if uint64(x) > math.MaxInt64 {
			return nil, fmt.Errorf("%d does not fit a manifest's int64", uint64(x))
		}
		return int64(x), nil
	case types.Double:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("%v is not a JSON number", float64(x))
		}
		return float64(x), nil
	case types.String:
		return string(x), nil
	case types.Bool:
		return bool(x), nil
	case types.Null:
		return nil, nil
	case *types.Optional:
		// An optional renders as its value, and as null when it has none.
		if !x.HasValue() {
			return nil, nil
		}
		return jsonValue(x.GetValue())
	case traits.Mapper:
		return jsonMap(x)
	case traits.Lister:
		return jsonList(x)
	}
	b, err := ToJSON(v)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(b, &out)
}

func jsonList(l traits.Lister) (any, error) {
	n, ok := l.Size().(types.Int)
	if !ok {
		return nil, fmt.Errorf("a list of unknown size")
	}
	out := make([]any, 0, int(n))
	for i := range int64(n) {
		e, err := jsonValue(l.Get(types.Int(i)))
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func jsonMap(m traits.Mapper) (any, error) {
	out := map[string]any{}
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		key, ok := k.(types.String)
		if !ok {
			return nil, fmt.Errorf("a map key of type %s: a manifest's keys are strings", k.Type().TypeName())
		}
		e, err := jsonValue(m.Get(k))
		if err != nil {
			return nil, fmt.Errorf("[%q]: %w", string(key), err)
		}
		out[string(key)] = e
	}
	return out, nil
}
