package expr

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// Type is the declared type of a variable, so that the checker catches a misspelt field or a
// comparison of an int with a string when the policy is compiled rather than when an object is
// deleted. Values stay plain Go data (maps, lists, scalars) at evaluation; the types are the same
// kind Kubernetes uses for CEL over schemas (DeclType).
type Type struct {
	decl *apiservercel.DeclType
}

// Scalar types and dyn, which the checker does not check.
var (
	String = Type{apiservercel.StringType}
	Int    = Type{apiservercel.IntType}
	Bool   = Type{apiservercel.BoolType}
	Double = Type{apiservercel.DoubleType}
	Dyn    = Type{apiservercel.DynType}
)

// ListOf is a list of elem.
func ListOf(elem Type) Type { return Type{apiservercel.NewListType(elem.decl, -1)} }

// MapOf is a map from strings to elem.
func MapOf(elem Type) Type {
	return Type{apiservercel.NewMapType(apiservercel.StringType, elem.decl, -1)}
}

// ObjectType is an object with the given fields. name is the type's name in error messages; it
// must be unique among the types of one environment (nested objects are named name.field).
func ObjectType(name string, fields map[string]Type) Type {
	decls := make(map[string]*apiservercel.DeclField, len(fields))
	for n, t := range fields {
		decls[n] = apiservercel.NewDeclField(n, t.decl, false, nil, nil)
	}
	return Type{apiservercel.NewObjectType(name, decls)}
}

// Var is a variable an environment declares.
type Var struct {
	Name string
	Type Type
}

// Declare returns an environment that also binds vars with their types.
func (e *Env) Declare(vars ...Var) (*Env, error) {
	var opts []cel.EnvOption
	objects := append([]*apiservercel.DeclType(nil), e.objects...)
	for _, v := range vars {
		if v.Type.decl == nil {
			return nil, fmt.Errorf("variable %q has no type", v.Name)
		}
		if e.untyped && v.Type.decl.IsObject() {
			v.Type = Dyn
		}
		if v.Type.decl.IsObject() || v.Type.decl.IsMap() || v.Type.decl.IsList() {
			objects = append(objects, v.Type.decl)
		}
		opts = append(opts, cel.Variable(v.Name, v.Type.decl.CelType()))
	}
	if len(objects) > len(e.objects) {
		provider := apiservercel.NewDeclTypeProvider(objects...)
		popts, err := provider.EnvOptions(e.base)
		if err != nil {
			return nil, fmt.Errorf("declaring types: %w", err)
		}
		opts = append(opts, popts...)
	}
	env, err := e.cel.Extend(opts...)
	if err != nil {
		return nil, fmt.Errorf("extending CEL environment: %w", err)
	}
	return &Env{cel: env, objects: objects, base: e.base, scope: e.scope, untyped: e.untyped, reserved: e.reserved, usage: e.usage}, nil
}

// Untyped returns an environment in which every object variable declared later is dynamic and no
// step reference is checked: it compiles the pipelines runs copied from policies before those
// checks existed, so that an upgrade does not fail a teardown in flight.
func (e *Env) Untyped() *Env {
	out := *e
	out.untyped, out.scope = true, nil
	return &out
}

// Types of the values Go types map to, for TypeOf.
var (
	timeType      = reflect.TypeFor[metav1.Time]()
	microTimeType = reflect.TypeFor[metav1.MicroTime]()
	durationType  = reflect.TypeFor[metav1.Duration]()
	quantityType  = reflect.TypeFor[resource.Quantity]()
	intOrStrType  = reflect.TypeFor[intstr.IntOrString]()
	rawType       = reflect.TypeFor[runtime.RawExtension]()
)

// TypeOf declares the type of a Kubernetes API object, read from its Go type's JSON fields, as
// it looks once converted to unstructured data: times are RFC 3339 strings, quantities and
// int-or-strings are dyn. name names the type (for example "batch.v1.Job").
func TypeOf(t reflect.Type, name string) Type {
	return Type{declOf(t, name, map[reflect.Type]bool{})}
}

func declOf(t reflect.Type, name string, visiting map[reflect.Type]bool) *apiservercel.DeclType {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case timeType, microTimeType, durationType:
		return apiservercel.StringType
	case quantityType, intOrStrType, rawType:
		return apiservercel.DynType
	}
	switch t.Kind() {
	case reflect.String:
		return apiservercel.StringType
	case reflect.Bool:
		return apiservercel.BoolType
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return apiservercel.IntType
	case reflect.Float32, reflect.Float64:
		return apiservercel.DoubleType
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return apiservercel.StringType // []byte is base64 text in JSON
		}
		return apiservercel.NewListType(declOf(t.Elem(), name+".@idx", visiting), -1)
	case reflect.Map:
		return apiservercel.NewMapType(apiservercel.StringType, declOf(t.Elem(), name+".@elem", visiting), -1)
	case reflect.Struct:
		if visiting[t] { // a recursive type: the inner occurrence is not checked
			return apiservercel.DynType
		}
		visiting[t] = true
		defer delete(visiting, t)
		fields := map[string]*apiservercel.DeclField{}
		addFields(t, name, fields, visiting)
		return apiservercel.NewObjectType(name, fields)
	}
	return apiservercel.DynType
}

// addFields adds the JSON fields of struct t, those of inlined structs included.
func addFields(t reflect.Type, name string, fields map[string]*apiservercel.DeclField, visiting map[reflect.Type]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-", !f.IsExported():
			continue
		case tag == "" && f.Anonymous:
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(ft, name, fields, visiting)
			}
			continue
		case tag == "":
			tag = f.Name
		}
		fields[tag] = apiservercel.NewDeclField(tag, declOf(f.Type, name+"."+tag, visiting), false, nil, nil)
	}
}
