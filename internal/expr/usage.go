package expr

import (
	"slices"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
)

// Usage records which variables the expressions compiled in an environment read, and whether
// they read more of one than fields of its metadata, so that a caller can skip computing what no
// expression reads (the engine reads the whole target object from the API server only for a
// pipeline that reads more of `object` than the metadata it caches).
type Usage struct {
	mu     sync.Mutex
	read   map[string]bool
	beyond map[string]bool
}

// MetadataFields are the fields of metadata that ReadsBeyondMetadata does not count: those the
// engine's cache of an object keeps as they are. Annotations are not among them (the cache drops
// kubectl's last-applied copy), nor are managed fields.
var MetadataFields = []string{"name", "namespace", "uid", "labels", "generateName", "generation",
	"resourceVersion", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
	"finalizers", "ownerReferences"}

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

// ReadsBeyondMetadata reports whether a recorded expression reads more of the variable name than
// name.metadata.<f> for f in MetadataFields (written as field selections; an index such as
// name['metadata'] counts as more).
func (u *Usage) ReadsBeyondMetadata(name string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.beyond[name]
}

// record notes the identifiers a checked expression refers to; nil records nothing.
func (u *Usage) record(checked *cel.Ast) {
	if u == nil {
		return
	}
	root := checked.NativeRep().Expr()
	covered := map[int64]bool{} // identifiers read only as <ident>.metadata.<field of MetadataFields>
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(x ast.Expr) {
		if id, ok := metadataField(x); ok {
			covered[id] = true
		}
	}))
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.read == nil {
		u.read, u.beyond = map[string]bool{}, map[string]bool{}
	}
	ast.PreOrderVisit(root, ast.NewExprVisitor(func(x ast.Expr) {
		if x.Kind() != ast.IdentKind {
			return
		}
		u.read[x.AsIdent()] = true
		if !covered[x.ID()] {
			u.beyond[x.AsIdent()] = true
		}
	}))
}

// metadataField returns the id of the identifier x selects a metadata field of (ident.metadata.f).
func metadataField(x ast.Expr) (int64, bool) {
	if x.Kind() != ast.SelectKind || !slices.Contains(MetadataFields, x.AsSelect().FieldName()) {
		return 0, false
	}
	md := x.AsSelect().Operand()
	if md.Kind() != ast.SelectKind || md.AsSelect().FieldName() != "metadata" {
		return 0, false
	}
	ident := md.AsSelect().Operand()
	if ident.Kind() != ast.IdentKind {
		return 0, false
	}
	return ident.ID(), true
}
