package discovery

import (
	_ "embed" // the built-in kinds' table
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// BuiltinFile is the table of built-in kinds, beside this file, written by hack/builtinkinds.
const BuiltinFile = "builtin_kinds.json"

//go:embed builtin_kinds.json
var builtinJSON []byte

// BuiltinTable is the kinds a Kubernetes API server serves with no CustomResourceDefinition or
// aggregated API installed, read from a real API server's discovery (hack/builtinkinds; an
// integration spec fails when it drifts from the API server the tests run).
type BuiltinTable struct {
	// Kubernetes is the API server's version, such as v1.36.3.
	Kubernetes string        `json:"kubernetes"`
	Kinds      []BuiltinKind `json:"kinds"`
}

// BuiltinKind is one kind of one group version.
type BuiltinKind struct {
	Group      string `json:"group"`
	Version    string `json:"version"`
	Kind       string `json:"kind"`
	Resource   string `json:"resource"`
	Namespaced bool   `json:"namespaced"`
}

// TableOf makes the table of the kinds in discovery's resource lists (subresources left out),
// in a stable order, leaving out groups skip names (those of CustomResourceDefinitions).
func TableOf(kubernetes string, lists []*metav1.APIResourceList, skip func(group string) bool) BuiltinTable {
	t := BuiltinTable{Kubernetes: kubernetes}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil || skip != nil && skip(gv.Group) {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource
			}
			t.Kinds = append(t.Kinds, BuiltinKind{Group: gv.Group, Version: gv.Version, Kind: r.Kind, Resource: r.Name, Namespaced: r.Namespaced})
		}
	}
	slices.SortFunc(t.Kinds, func(a, b BuiltinKind) int {
		return strings.Compare(a.Group+"/"+a.Version+"/"+a.Kind+"/"+a.Resource, b.Group+"/"+b.Version+"/"+b.Kind+"/"+b.Resource)
	})
	return t
}

// Builtin returns the embedded table.
func Builtin() BuiltinTable { return builtinTable() }

var builtinTable = sync.OnceValue(func() BuiltinTable {
	var t BuiltinTable
	if err := json.Unmarshal(builtinJSON, &t); err != nil {
		panic(fmt.Sprintf("%s: %v", BuiltinFile, err)) // embedded at build time, tested
	}
	return t
})

// BuiltinKinds are the built-in kinds as Kinds: Namespaced answers for them, and a
// NotServedError for any other kind (a custom resource, which only a cluster knows).
var BuiltinKinds = sync.OnceValue(func() *Kinds {
	t := Builtin()
	k := &Kinds{source: "the built-in kinds of Kubernetes " + t.Kubernetes, scope: map[schema.GroupVersionKind]bool{}}
	for _, b := range t.Kinds {
		k.scope[schema.GroupVersionKind{Group: b.Group, Version: b.Version, Kind: b.Kind}] = b.Namespaced
	}
	return k
})
