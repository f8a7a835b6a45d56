package expr

import (
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
)

// Usage records which variables the expressions compiled in an environment read, so that a
// caller can skip computing a variable no expression reads (the engine reads the whole target
// object from the API server only for a pipeline that reads `object`).
type Usage struct {
	mu   sync.Mutex
	read map[string]bool
}

// Tracking returns an environment that records in u the variables every expression compiled in
// it, or in an environment derived from it, reads.
func (e *Env) Tracking(u *Usage) *Env {
	out := *e
	out.usage = u
	return &out
}

// Reads reports whether a recorded expression reads the variable name. A name a comprehension
// binds counts as read: the answer errs on the side of computing the variable.
func (u *Usage) Reads(name string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.read[name]
}

// record notes the identifiers a checked expression refers to; nil records nothing.
func (u *Usage) record(checked *cel.Ast) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.read == nil {
		u.read = map[string]bool{}
	}
	ast.PreOrderVisit(checked.NativeRep().Expr(), ast.NewExprVisitor(func(x ast.Expr) {
		if x.Kind() == ast.IdentKind {
			u.read[x.AsIdent()] = true
		}
	}))
}
