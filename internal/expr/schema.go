package expr

import (
	"regexp"

	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// maxSchemaDepth bounds how deep a published schema is typed; below it, values are dyn. Real
// kinds are far shallower; the bound only stops a recursive schema.
const maxSchemaDepth = 32

// identifier is a property name CEL selects as a field (resource.metadata.namespace): unlike
// Kubernetes' validation rules, which see escaped names (__namespace__), expressions here read the
// object's own keys.
var identifier = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// SchemaType declares the type of a Kubernetes object from the OpenAPI schema the cluster
// publishes for its kind (references resolved), as it looks as unstructured data, like TypeOf:
// strings of every format (date-time, duration, byte) are strings, int-or-string and
// what the schema leaves open (no type, x-kubernetes-preserve-unknown-fields without
// properties) are dyn. name names the type (for example "resource.postgresql.cnpg.io.v1.Backup").
func SchemaType(s *spec.Schema, name string) Type {
	return Type{schemaDecl(s, name, 0)}
}

func schemaDecl(s *spec.Schema, name string, depth int) *apiservercel.DeclType {
	if s == nil || depth > maxSchemaDepth || isIntOrString(s) {
		return apiservercel.DynType
	}
	switch schemaTypeOf(s) {
	case "string":
		return apiservercel.StringType
	case "boolean":
		return apiservercel.BoolType
	case "integer":
		return apiservercel.IntType
	case "number":
		return apiservercel.DoubleType
	case "array":
		if s.Items == nil || s.Items.Schema == nil {
			return apiservercel.NewListType(apiservercel.DynType, -1)
		}
		return apiservercel.NewListType(schemaDecl(s.Items.Schema, name+".@idx", depth+1), -1)
	case "object":
		return objectDecl(s, name, depth)
	}
	return apiservercel.DynType
}

// objectDecl types an object schema: its properties, or a map of its additionalProperties. An
// object that declares neither holds anything (dyn).
func objectDecl(s *spec.Schema, name string, depth int) *apiservercel.DeclType {
	if len(s.Properties) == 0 {
		if ap := s.AdditionalProperties; ap != nil && ap.Schema != nil {
			return apiservercel.NewMapType(apiservercel.StringType, schemaDecl(ap.Schema, name+".@elem", depth+1), -1)
		}
		return apiservercel.DynType
	}
	fields := make(map[string]*apiservercel.DeclField, len(s.Properties))
	for prop, ps := range s.Properties {
		if !identifier.MatchString(prop) {
			// Values are plain maps, read by their real keys: an object with a key CEL cannot
			// select (last-seen, a.b) is a map, so that resource.status['last-seen'] works.
			return apiservercel.NewMapType(apiservercel.StringType, apiservercel.DynType, -1)
		}
		fields[prop] = apiservercel.NewDeclField(prop, schemaDecl(&ps, name+"."+prop, depth+1), false, nil, nil)
	}
	if s.Extensions != nil {
		if embedded, _ := s.Extensions.GetBool("x-kubernetes-embedded-resource"); embedded {
			addObjectMeta(fields)
		}
	}
	if depth == 0 {
		addObjectMeta(fields)
	}
	return apiservercel.NewObjectType(name, fields)
}

// addObjectMeta makes apiVersion, kind and metadata readable at the root of an object whose
// schema leaves them out (as CRDs' published schemas may).
func addObjectMeta(fields map[string]*apiservercel.DeclField) {
	for _, f := range []string{"apiVersion", "kind"} {
		if _, ok := fields[f]; !ok {
			fields[f] = apiservercel.NewDeclField(f, apiservercel.StringType, false, nil, nil)
		}
	}
	if _, ok := fields["metadata"]; !ok {
		fields["metadata"] = apiservercel.NewDeclField("metadata", apiservercel.DynType, false, nil, nil)
	}
}

// schemaTypeOf is the schema's one type, or "" when it has none or several.
func schemaTypeOf(s *spec.Schema) string {
	if len(s.Type) == 1 {
		return s.Type[0]
	}
	if len(s.Type) == 0 && len(s.Properties) > 0 {
		return "object"
	}
	return ""
}

func isIntOrString(s *spec.Schema) bool {
	if s.Extensions == nil {
		return false
	}
	v, _ := s.Extensions.GetBool("x-kubernetes-int-or-string")
	return v
}
