// Package schema checks objects of the operator's kinds against the OpenAPI schemas and CEL
// validation rules of their CustomResourceDefinitions, as the API server would when they are
// applied: defaults applied, unknown fields refused (kubectl's strict field validation), types,
// enums, patterns, limits and x-kubernetes-validations.
package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/config/crd"
)

// kindSchema is one served version's schema, ready to check objects.
type kindSchema struct {
	namespaced bool
	structural *structuralschema.Structural
	validator  validation.SchemaCreateValidator
	cel        *cel.Validator
}

// Validator checks objects against the embedded CustomResourceDefinitions.
type Validator struct {
	kinds map[schema.GroupVersionKind]*kindSchema
}

// New loads the embedded CustomResourceDefinitions.
func New() (*Validator, error) {
	v := &Validator{kinds: map[schema.GroupVersionKind]*kindSchema{}}
	files, err := fs.Glob(crd.Bases, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		raw, err := crd.Bases.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var def apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &def); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, ver := range def.Spec.Versions {
			ks, err := load(ver.Schema.OpenAPIV3Schema)
			if err != nil {
				return nil, fmt.Errorf("%s version %s: %w", f, ver.Name, err)
			}
			ks.namespaced = def.Spec.Scope == apiextensionsv1.NamespaceScoped
			v.kinds[schema.GroupVersionKind{Group: def.Spec.Group, Version: ver.Name, Kind: def.Spec.Names.Kind}] = ks
		}
	}
	return v, nil
}

func load(s *apiextensionsv1.JSONSchemaProps) (*kindSchema, error) {
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(s, internal, nil); err != nil {
		return nil, err
	}
	structural, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, err
	}
	validator, _, err := validation.NewSchemaValidator(internal)
	if err != nil {
		return nil, err
	}
	return &kindSchema{structural: structural, validator: validator,
		cel: cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
}

// Knows reports whether gvk is one of the embedded kinds.
func (v *Validator) Knows(gvk schema.GroupVersionKind) bool { return v.kinds[gvk] != nil }

// Validate defaults obj in place (as the API server stores it) and returns what the API server
// would refuse: unknown fields first, then schema and CEL rule violations. Paths start at the
// object's root (spec.steps[0].timeout).
func (v *Validator) Validate(ctx context.Context, gvk schema.GroupVersionKind, obj map[string]any) field.ErrorList {
	ks := v.kinds[gvk]
	if ks == nil {
		return field.ErrorList{field.Invalid(field.NewPath("kind"), gvk.Kind, "not a kind of the teardown.dev API")}
	}
	errs := validateMetadata(obj, ks.namespaced)
	pruned := pruning.PruneWithOptions(obj, ks.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range pruned {
		errs = append(errs, &field.Error{Type: field.ErrorTypeInvalid, Field: unknownFieldPath(p), BadValue: field.OmitValueType{},
			Detail: unknownField})
	}
	defaulting.Default(obj, ks.structural)
	errs = append(errs, validation.ValidateCustomResource(nil, obj, ks.validator)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, ks.structural, obj)...)
	if len(errs) > 0 {
		return errs // CEL rules assume the schema holds
	}
	celErrs, _ := ks.cel.Validate(ctx, nil, ks.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// unknownField is the detail of an unknown field's error.
const unknownField = "unknown field (kubectl apply refuses it)"

// IsUnknownField reports whether e is Validate's error for an unknown field, which Validate
// drops from the object (kubectl's strict field validation refuses it).
func IsUnknownField(e *field.Error) bool { return e.Detail == unknownField }

// unknownFieldPath is the path pruning reports for an unknown field, with an empty key (YAML and
// JSON allow one) written "": pruning joins keys with dots, so an empty key would leave an empty
// segment ("spec."), or no path at all at the root.
func unknownFieldPath(p string) string {
	segs := strings.Split(p, ".")
	for i, s := range segs {
		if s == "" {
			segs[i] = `""`
		}
	}
	return strings.Join(segs, ".")
}

// validateMetadata checks metadata as the API server does for every object: no unknown field,
// a name that is a DNS subdomain, a namespace for namespaced kinds only, valid labels and
// annotations.
func validateMetadata(obj map[string]any, namespaced bool) field.ErrorList {
	path := field.NewPath("metadata")
	raw, err := json.Marshal(obj["metadata"])
	if err != nil {
		return field.ErrorList{field.Invalid(path, nil, err.Error())}
	}
	var errs field.ErrorList
	var meta metav1.ObjectMeta
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&meta); err != nil {
		name, unknown := strings.CutPrefix(err.Error(), `json: unknown field "`)
		if !unknown {
			return field.ErrorList{field.Invalid(path, field.OmitValueType{}, err.Error())}
		}
		errs = append(errs, &field.Error{Type: field.ErrorTypeInvalid, Field: unknownFieldPath(path.String() + "." + strings.TrimSuffix(name, `"`)),
			BadValue: field.OmitValueType{}, Detail: unknownField})
		meta = metav1.ObjectMeta{}
		if err := json.Unmarshal(raw, &meta); err != nil {
			return errs
		}
	}
	if namespaced && meta.Namespace == "" {
		meta.Namespace = "default" // given by the request (kubectl apply -n) when the file names none
	}
	return append(errs, apivalidation.ValidateObjectMeta(&meta, namespaced, apivalidation.NameIsDNSSubdomain, path)...)
}

// Message is an error without its field path, which callers report apart; the OpenAPI validator
// repeats the path in its text ("spec.x in body should match ..."), which is dropped too.
func Message(e *field.Error) string {
	msg := strings.TrimPrefix(e.ErrorBody(), "Invalid value: ")
	return strings.ReplaceAll(msg, e.Field+" in body ", "")
}
