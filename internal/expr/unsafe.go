package expr

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
)

// AlwaysPresent are the fields of `object` every object has, which need no test before a read:
// apiVersion, kind, metadata and these fields of it. (A cluster-scoped object has no namespace:
// it reads as absent, and a policy reading it targets namespaced kinds.)
var AlwaysPresent = []string{"apiVersion", "kind", "metadata", "metadata.name", "metadata.namespace",
	"metadata.uid", "metadata.creationTimestamp"}

// UnsafeReads returns the fields of `object` that src reads with no has() test, `in` test or
// optional access (`.?`, `[?]`) guarding them, shortest first, each once: on an object without
// such a field the expression is an evaluation error rather than false (docs/expressions.md,
// Safe forms). A test guards a read in the same expression when it must hold for the read to be
// evaluated, or to decide the result: on the other side of && (or of ||, negated), or in a
// condition's test. Reads of fields in AlwaysPresent, and reads through optional values, are
// safe. Each read is written as CEL writes it (object.data.tier, object.metadata.labels['app']).
// present, when not nil, tells of more fields (by their names under object) that the kind of
// object always has.
func (e *Env) UnsafeReads(src string, present func(names []string) bool) ([]string, error) {
	parsed, iss := e.cel.Parse(src)
	if iss.Err() != nil {
		return nil, errors.New(strings.TrimSpace(iss.Err().Error()))
	}
	w := &readWalker{seen: map[string]bool{}, present: present}
	w.walk(parsed.NativeRep().Expr(), nil)
	return w.unsafe, nil
}

// step is one field selected, or one constant key indexed.
type step struct {
	name  string
	index bool
}

// fieldPath is a chain of field names and constant keys under `object`. A field and a key of one
// name are one field to a test: has(m.k) and 'k' in m test the same.
type fieldPath []step

// String writes the path as the expression does (object.data.tier, object.metadata.labels['app']).
func (p fieldPath) String() string {
	var b strings.Builder
	b.WriteString(VarObject)
	for _, s := range p {
		if s.index {
			fmt.Fprintf(&b, "['%s']", strings.ReplaceAll(s.name, "'", `\'`))
		} else {
			b.WriteString("." + s.name)
		}
	}
	return b.String()
}

// names is the path's names.
func (p fieldPath) names() []string {
	out := make([]string, len(p))
	for i, s := range p {
		out[i] = s.name
	}
	return out
}

// under reports whether p is q or under it, by names.
func (p fieldPath) under(q fieldPath) bool {
	if len(p) < len(q) {
		return false
	}
	for i := range q {
		if p[i].name != q[i].name {
			return false
		}
	}
	return true
}

// guards are the paths tests have shown present.
type guards []fieldPath

// covers reports whether a guard shows p present: it is p or under it.
func (g guards) covers(p fieldPath) bool {
	return slices.ContainsFunc(g, func(q fieldPath) bool { return q.under(p) })
}

type readWalker struct {
	unsafe  []string
	seen    map[string]bool
	present func(names []string) bool
}

// known reports whether p is known present: always, for the object's kind, or by a test.
func (w *readWalker) known(p fieldPath, g guards) bool {
	names := p.names()
	return slices.Contains(AlwaysPresent, strings.Join(names, ".")) || w.present != nil && w.present(names) || g.covers(p)
}

// walk visits x, the fields in g known present.
func (w *readWalker) walk(x ast.Expr, g guards) {
	if p, rest, ok := objectRead(x); ok {
		w.check(p, g)
		for _, k := range rest {
			w.walk(k, g) // dynamic keys
		}
		return
	}
	switch x.Kind() {
	case ast.CallKind:
		w.walkCall(x.AsCall(), g)
	case ast.SelectKind:
		w.walk(x.AsSelect().Operand(), g) // a test-only select (has), or one not on object
	case ast.ListKind:
		for _, el := range x.AsList().Elements() {
			w.walk(el, g)
		}
	case ast.MapKind:
		for _, en := range x.AsMap().Entries() {
			w.walk(en.AsMapEntry().Key(), g)
			w.walk(en.AsMapEntry().Value(), g)
		}
	case ast.StructKind:
		for _, f := range x.AsStruct().Fields() {
			w.walk(f.AsStructField().Value(), g)
		}
	case ast.ComprehensionKind:
		c := x.AsComprehension()
		for _, part := range []ast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			w.walk(part, g)
		}
	}
}

// walkCall visits a call: the sides of && and ||, and the branches of a condition, see the tests
// of the other side, or of the condition.
func (w *readWalker) walkCall(c ast.CallExpr, g guards) {
	args := c.Args()
	switch c.FunctionName() {
	case operators.LogicalAnd:
		// CEL's && is commutative: an error on one side is absorbed when the other is false.
		w.walk(args[0], append(slices.Clip(g), whenTrue(args[1])...))
		w.walk(args[1], append(slices.Clip(g), whenTrue(args[0])...))
		return
	case operators.LogicalOr:
		w.walk(args[0], append(slices.Clip(g), whenFalse(args[1])...))
		w.walk(args[1], append(slices.Clip(g), whenFalse(args[0])...))
		return
	case operators.Conditional:
		w.walk(args[0], g)
		w.walk(args[1], append(slices.Clip(g), whenTrue(args[0])...))
		w.walk(args[2], append(slices.Clip(g), whenFalse(args[0])...))
		return
	case operators.OptSelect, operators.OptIndex:
		// The operand must be there; what is selected from it may not.
		w.walk(args[0], g)
		if len(args) > 1 && args[1].Kind() != ast.LiteralKind {
			w.walk(args[1], g)
		}
		return
	}
	if c.IsMemberFunction() {
		w.walk(c.Target(), g)
	}
	for _, a := range args {
		w.walk(a, g)
	}
}

// check records p, or its shortest prefix not known present.
func (w *readWalker) check(p fieldPath, g guards) {
	for i := 1; i <= len(p); i++ {
		if w.known(p[:i], g) {
			continue
		}
		if s := p[:i].String(); !w.seen[s] {
			w.seen[s] = true
			w.unsafe = append(w.unsafe, s)
		}
		return
	}
}

// objectRead returns the path x reads under `object` (a chain of selections and constant-key
// indexes down to the variable), and the dynamic index keys along the way.
func objectRead(x ast.Expr) (fieldPath, []ast.Expr, bool) {
	var p fieldPath
	var dynamic []ast.Expr
	cur := x
	for {
		switch cur.Kind() {
		case ast.IdentKind:
			if cur.AsIdent() != VarObject || len(p) == 0 && len(dynamic) == 0 {
				return nil, nil, false
			}
			slices.Reverse(p)
			return p, dynamic, true
		case ast.SelectKind:
			s := cur.AsSelect()
			if s.IsTestOnly() {
				return nil, nil, false
			}
			p = append(p, step{name: s.FieldName()})
			cur = s.Operand()
		case ast.CallKind:
			c := cur.AsCall()
			if c.FunctionName() != operators.Index || len(c.Args()) != 2 {
				return nil, nil, false
			}
			if key, ok := constantKey(c.Args()[1]); ok {
				p = append(p, step{name: key, index: true})
			} else {
				p, dynamic = nil, append(dynamic, c.Args()[1]) // only what is before it is checked
			}
			cur = c.Args()[0]
		default:
			return nil, nil, false
		}
	}
}

// constantKey is a string literal's value.
func constantKey(x ast.Expr) (string, bool) {
	if x.Kind() != ast.LiteralKind {
		return "", false
	}
	s, ok := x.AsLiteral().(types.String)
	return string(s), ok
}

// whenTrue are the fields a condition shows present when it is true: has(), `in`, an optional
// chain's hasValue(), through && and !.
func whenTrue(x ast.Expr) guards {
	switch x.Kind() {
	case ast.SelectKind:
		if s := x.AsSelect(); s.IsTestOnly() {
			if p, _, ok := objectRead(s.Operand()); ok {
				return guards{append(slices.Clip(p), step{name: s.FieldName()})}
			} else if isObject(s.Operand()) {
				return guards{{{name: s.FieldName()}}}
			}
		}
	case ast.CallKind:
		c := x.AsCall()
		switch args := c.Args(); c.FunctionName() {
		case operators.LogicalAnd:
			return append(whenTrue(args[0]), whenTrue(args[1])...)
		case operators.LogicalNot:
			return whenFalse(args[0])
		case operators.In:
			if key, ok := constantKey(args[0]); ok {
				if p, ok := pathOf(args[1]); ok {
					return guards{append(slices.Clip(p), step{name: key, index: true})}
				}
			}
		case "hasValue":
			if c.IsMemberFunction() {
				if p, ok := optionalPath(c.Target()); ok {
					return guards{p}
				}
			}
		}
	}
	return nil
}

// whenFalse are the fields a condition shows present when it is false.
func whenFalse(x ast.Expr) guards {
	if x.Kind() != ast.CallKind {
		return nil
	}
	c := x.AsCall()
	switch args := c.Args(); c.FunctionName() {
	case operators.LogicalOr:
		return append(whenFalse(args[0]), whenFalse(args[1])...)
	case operators.LogicalNot:
		return whenTrue(args[0])
	}
	return nil
}

// pathOf is the path x reads, `object` itself included (as the empty path).
func pathOf(x ast.Expr) (fieldPath, bool) {
	if isObject(x) {
		return fieldPath{}, true
	}
	p, dynamic, ok := objectRead(x)
	return p, ok && len(dynamic) == 0
}

// optionalPath is the path an optional chain (object.?a.?b, object.?a[?'k']) would read.
func optionalPath(x ast.Expr) (fieldPath, bool) {
	if x.Kind() != ast.CallKind {
		return pathOf(x)
	}
	c := x.AsCall()
	switch c.FunctionName() {
	case operators.OptSelect, operators.OptIndex, operators.Index:
		p, ok := optionalPath(c.Args()[0])
		key, isConst := constantKey(c.Args()[1])
		if !ok || !isConst {
			return nil, false
		}
		return append(slices.Clip(p), step{name: key, index: c.FunctionName() != operators.OptSelect}), true
	}
	return nil, false
}

func isObject(x ast.Expr) bool { return x.Kind() == ast.IdentKind && x.AsIdent() == VarObject }
