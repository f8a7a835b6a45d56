// Package kindtypes gives the CEL type of a kind's objects, so that an expression over an object a
// step acts on (a resource step's `resource`) is type-checked when the policy is compiled: from the
// OpenAPI v3 schema the cluster publishes (built-in kinds and CRDs alike), or, without a cluster,
// from the Go types of the kinds client-go knows.
package kindtypes

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/teardown-dev/teardown-operator/internal/expr"
)

// ErrUnknown is returned for a kind whose schema is not known.
var ErrUnknown = errors.New("no schema for the kind")

// Func returns the type of a kind's objects, or an error (ErrUnknown when there is no schema).
type Func func(gvk schema.GroupVersionKind) (expr.Type, error)

// name is the CEL type name of a kind's objects: unique per kind.
func name(gvk schema.GroupVersionKind) string {
	g := gvk.Group
	if g == "" {
		g = "core"
	}
	return "resource." + g + "." + gvk.Version + "." + gvk.Kind
}

// Builtin returns the type of a kind client-go knows (Pods, StatefulSets, Jobs, ...) from its Go
// type, without a cluster; ErrUnknown for any other kind.
func Builtin(gvk schema.GroupVersionKind) (expr.Type, error) {
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return expr.Type{}, fmt.Errorf("%s: %w", gvk, ErrUnknown)
	}
	return expr.TypeOf(reflect.TypeOf(obj), name(gvk)), nil
}

// pathsTTL is how long the list of the cluster's group-versions is trusted: a CRD installed
// after it was read is seen at most this late. Each group-version's schema is cached by the hash
// in its URL, so it is fetched again only when it changes.
const pathsTTL = 30 * time.Second

// Discovery reads kinds' types from the OpenAPI v3 schemas the cluster publishes.
type Discovery struct {
	client openapi.Client

	mu      sync.Mutex
	paths   map[string]openapi.GroupVersion
	readAt  time.Time
	schemas map[string]*schemaDoc // by group-version path
}

// schemaDoc is one group-version's OpenAPI v3 document, at the URL (hash) it was read from.
type schemaDoc struct {
	url     string
	schemas map[string]*spec.Schema
	types   map[schema.GroupVersionKind]expr.Type
}

// NewDiscovery returns a Discovery reading through client (discovery.OpenAPIV3()).
func NewDiscovery(client openapi.Client) *Discovery {
	return &Discovery{client: client, schemas: map[string]*schemaDoc{}}
}

// Type returns the type of gvk's objects from the cluster's published schema.
func (d *Discovery) Type(gvk schema.GroupVersionKind) (expr.Type, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	path := "apis/" + gvk.Group + "/" + gvk.Version
	if gvk.Group == "" {
		path = "api/" + gvk.Version
	}
	gv, err := d.groupVersion(path)
	if err != nil {
		return expr.Type{}, err
	}
	doc := d.schemas[path]
	if doc == nil || doc.url != gv.ServerRelativeURL() {
		if doc, err = readDoc(gv); err != nil {
			return expr.Type{}, fmt.Errorf("reading the OpenAPI schema of %s: %w", gvk.GroupVersion(), err)
		}
		d.schemas[path] = doc
	}
	if t, ok := doc.types[gvk]; ok {
		return t, nil
	}
	ref, ok := doc.refOf(gvk)
	if !ok {
		return expr.Type{}, fmt.Errorf("%s: %w", gvk, ErrUnknown)
	}
	s, err := resolver.PopulateRefs(func(ref string) (*spec.Schema, bool) {
		s, ok := doc.schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
		return s, ok
	}, ref)
	if err != nil {
		return expr.Type{}, fmt.Errorf("resolving the schema of %s: %w", gvk, err)
	}
	t := expr.SchemaType(s, name(gvk))
	doc.types[gvk] = t
	return t, nil
}

// groupVersion finds path among the cluster's group-versions, reading them again when they are
// older than pathsTTL or do not have it (its CRD may have just been installed).
func (d *Discovery) groupVersion(path string) (openapi.GroupVersion, error) {
	if gv, ok := d.paths[path]; ok && time.Since(d.readAt) < pathsTTL {
		return gv, nil
	}
	paths, err := d.client.Paths()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's OpenAPI v3 paths: %w", err)
	}
	d.paths, d.readAt = paths, time.Now()
	gv, ok := paths[path]
	if !ok {
		return nil, fmt.Errorf("the cluster publishes no schema for %s: %w", path, ErrUnknown)
	}
	return gv, nil
}

func readDoc(gv openapi.GroupVersion) (*schemaDoc, error) {
	raw, err := gv.Schema(runtime.ContentTypeJSON)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Components struct {
			Schemas map[string]*spec.Schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, err
	}
	return &schemaDoc{url: gv.ServerRelativeURL(), schemas: resp.Components.Schemas, types: map[schema.GroupVersionKind]expr.Type{}}, nil
}

// refOf finds the schema of gvk by its x-kubernetes-group-version-kind extension.
func (doc *schemaDoc) refOf(gvk schema.GroupVersionKind) (string, bool) {
	for ref, s := range doc.schemas {
		var gvks []schema.GroupVersionKind
		if s.Extensions.GetObject("x-kubernetes-group-version-kind", &gvks) != nil {
			continue
		}
		for _, g := range gvks {
			if g == gvk {
				return "#/components/schemas/" + ref, true
			}
		}
	}
	return "", false
}
