package kindtypes

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi"

	"github.com/teardown-dev/teardown-operator/internal/expr"
)

// compiles reports the error of compiling cond with `resource` of type t ("" if it compiles).
func compiles(t *testing.T, typ expr.Type, cond string) string {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	env, err = env.Declare(expr.Var{Name: "resource", Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.CompileCondition(cond); err != nil {
		return err.Error()
	}
	return ""
}

// TestBuiltin: kinds client-go knows are typed offline; others are unknown.
func TestBuiltin(t *testing.T) {
	sts, err := Builtin(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"})
	if err != nil {
		t.Fatal(err)
	}
	if e := compiles(t, sts, "resource.?status.?replicas.orValue(0) == 0 && resource.metadata.name != ''"); e != "" {
		t.Errorf("a StatefulSet's fields: %s", e)
	}
	if e := compiles(t, sts, "resource.status.replicaz == 0"); !strings.Contains(e, "undefined field 'replicaz'") {
		t.Errorf("a field a StatefulSet lacks: %q", e)
	}
	if _, err := Builtin(schema.GroupVersionKind{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Backup"}); !errors.Is(err, ErrUnknown) {
		t.Errorf("a custom kind offline: %v", err)
	}
}

// backupDoc is a group-version's OpenAPI v3 document, as the API server publishes one for a CRD.
const backupDoc = `{"components": {"schemas": {
  "io.cnpg.postgresql.v1.Backup": {
    "type": "object",
    "x-kubernetes-group-version-kind": [{"group": "postgresql.cnpg.io", "version": "v1", "kind": "Backup"}],
    "properties": {
      "apiVersion": {"type": "string"}, "kind": {"type": "string"},
      "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
      "spec": {"type": "object", "properties": {
        "cluster": {"type": "object", "properties": {"name": {"type": "string"}}},
        "target": {"x-kubernetes-int-or-string": true},
        "parameters": {"type": "object", "additionalProperties": {"type": "string"}},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "odd": {"type": "object", "properties": {"last-seen": {"type": "string"}}}}},
      "status": {"type": "object", "properties": {
        "phase": {"type": "string"},
        "startedAt": {"type": "string", "format": "date-time"},
        "instances": {"type": "integer"},
        "conditions": {"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}}
    }
  },
  "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {
    "name": {"type": "string"}, "namespace": {"type": "string"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}
}}}`

// scripted is a cluster's OpenAPI v3 discovery: group-version paths, each with a document and the
// hash in its URL; reads are counted.
type scripted struct {
	docs       map[string]string
	hash       map[string]string
	pathsReads int
	docReads   int
}

func (s *scripted) Paths() (map[string]openapi.GroupVersion, error) {
	s.pathsReads++
	out := map[string]openapi.GroupVersion{}
	for p := range s.docs {
		out[p] = &scriptedGV{s: s, path: p}
	}
	return out, nil
}

type scriptedGV struct {
	s    *scripted
	path string
}

func (g *scriptedGV) Schema(string) ([]byte, error) {
	g.s.docReads++
	return []byte(g.s.docs[g.path]), nil
}

func (g *scriptedGV) ServerRelativeURL() string {
	return "/openapi/v3/" + g.path + "?hash=" + g.s.hash[g.path]
}

// TestDiscovery: a custom kind is typed from its published schema: its fields, metadata through a
// reference, formats as strings, and what the schema leaves open as dyn. A document is read again
// only when its hash changes, and a group-version published later is found.
func TestDiscovery(t *testing.T) {
	backup := schema.GroupVersionKind{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Backup"}
	s := &scripted{docs: map[string]string{"apis/postgresql.cnpg.io/v1": backupDoc}, hash: map[string]string{"apis/postgresql.cnpg.io/v1": "a"}}
	d := NewDiscovery(s)
	typ, err := d.Type(backup)
	if err != nil {
		t.Fatal(err)
	}
	for cond, want := range map[string]string{
		"resource.status.phase == 'completed'":                     "",
		"resource.metadata.name.startsWith('orders')":              "",
		"resource.metadata.?labels[?'app'].orValue('') == 'db'":    "",
		"resource.status.startedAt > '2026-01-01'":                 "", // a date-time is a string, as in the object
		"resource.spec.target == 3 || resource.spec.target == 'x'": "", // int-or-string: dyn
		"resource.spec.parameters['k'] == 'v'":                     "",
		"resource.spec.extra.anything.goes == 1":                   "", // preserve-unknown-fields without properties: dyn
		"resource.status.conditions.exists(c, c.type == 'Ready')":  "",
		"resource.apiVersion == 'postgresql.cnpg.io/v1'":           "",
		"resource.status.phse == 'completed'":                      "undefined field 'phse'",
		"resource.status.instances == 'two'":                       "no matching overload",
	} {
		if got := compiles(t, typ, cond); want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%s: got %q, want %q", cond, got, want)
		}
	}

	if _, err := d.Type(backup); err != nil || s.docReads != 1 {
		t.Fatalf("a second look: err %v, %d document reads; want 1", err, s.docReads)
	}
	s.hash["apis/postgresql.cnpg.io/v1"] = "b"
	d.readAt = d.readAt.Add(-pathsTTL) // the paths are old: read again
	if _, err := d.Type(backup); err != nil || s.docReads != 2 {
		t.Fatalf("after the CRD changed: err %v, %d document reads; want 2", err, s.docReads)
	}

	velero := schema.GroupVersionKind{Group: "velero.io", Version: "v1", Kind: "Backup"}
	if _, err := d.Type(velero); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a group-version not published: %v", err)
	}
	s.docs["apis/velero.io/v1"] = strings.ReplaceAll(backupDoc, "postgresql.cnpg.io", "velero.io")
	if _, err := d.Type(velero); err != nil {
		t.Fatalf("a group-version published since (its CRD installed): %v", err)
	}
	if _, err := d.Type(schema.GroupVersionKind{Group: "velero.io", Version: "v1", Kind: "Restore"}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a kind its group-version does not have: %v", err)
	}
}
