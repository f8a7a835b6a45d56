package discovery_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/teardown-dev/teardown-operator/cli/discovery"
)

func gvk(group, version, kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
}

var (
	configMap       = gvk("", "v1", "ConfigMap")
	namespace       = gvk("", "v1", "Namespace")
	deployment      = gvk("apps", "v1", "Deployment")
	managedDatabase = gvk("example.teardown.dev", "v1", "ManagedDatabase")
	clusterBackend  = gvk("example.teardown.dev", "v1", "ClusterBackend")
)

// kindsJSON is what `kubectl teardown kinds` prints: a JSON list of APIResourceLists, with
// subresources. widgets/status is namespaced while widgets is not: it must not win.
const kindsJSON = `[
  {
    "groupVersion": "v1",
    "resources": [
      {"name": "configmaps", "singularName": "", "namespaced": true, "kind": "ConfigMap", "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
      {"name": "namespaces", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
      {"name": "namespaces/status", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["get", "patch", "update"]},
      {"name": "pods/eviction", "singularName": "", "namespaced": true, "kind": "Eviction", "verbs": ["create"]}
    ]
  },
  {
    "groupVersion": "apps/v1",
    "resources": [
      {"name": "deployments", "singularName": "", "namespaced": true, "kind": "Deployment", "verbs": ["get", "list"]},
      {"name": "deployments/status", "singularName": "", "namespaced": true, "kind": "Deployment", "verbs": ["get"]},
      {"name": "deployments/scale", "singularName": "", "namespaced": true, "kind": "Scale", "verbs": ["get"]}
    ]
  },
  {
    "groupVersion": "example.teardown.dev/v1",
    "resources": [
      {"name": "manageddatabases", "singularName": "", "namespaced": true, "kind": "ManagedDatabase", "verbs": ["get", "list"]},
      {"name": "widgets", "singularName": "", "namespaced": false, "kind": "Widget", "verbs": ["get", "list"]},
      {"name": "widgets/status", "singularName": "", "namespaced": true, "kind": "Widget", "verbs": ["get"]}
    ]
  }
]
`

// oneListYAML is a single APIResourceList in YAML, as `kubectl get --raw /apis/<g>/<v>` gives it
// (converted).
const oneListYAML = `kind: APIResourceList
apiVersion: v1
groupVersion: example.teardown.dev/v1
resources:
- name: manageddatabases
  singularName: manageddatabase
  namespaced: true
  kind: ManagedDatabase
  verbs: [get, list, watch]
- name: manageddatabases/status
  singularName: ""
  namespaced: true
  kind: ManagedDatabase
  verbs: [get]
- name: clusterbackends
  singularName: clusterbackend
  namespaced: false
  kind: ClusterBackend
  verbs: [get, list]
- name: clusterbackends/finalize
  singularName: ""
  namespaced: true
  kind: Finalize
  verbs: [update]
`

// oneListJSON is `kubectl get --raw /apis/apps/v1`.
const oneListJSON = `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"apps/v1","resources":[
{"name":"deployments","singularName":"deployment","namespaced":true,"kind":"Deployment","verbs":["get"],"shortNames":["deploy"]},
{"name":"deployments/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1","kind":"Scale","verbs":["get"]}]}`

// listsYAML is a list of APIResourceLists in YAML.
const listsYAML = `- groupVersion: v1
  resources:
  - {name: configmaps, kind: ConfigMap, namespaced: true, verbs: [get]}
  - {name: namespaces, kind: Namespace, namespaced: false, verbs: [get]}
- groupVersion: apps/v1
  resources:
  - {name: deployments, kind: Deployment, namespaced: true, verbs: [get]}
`

// apiResources is what `kubectl api-resources` prints (SHORTNAMES empty for the CRD).
const apiResources = `NAME                              SHORTNAMES   APIVERSION                        NAMESPACED   KIND
configmaps                        cm           v1                                true         ConfigMap
namespaces                        ns           v1                                false        Namespace
deployments                       deploy       apps/v1                           true         Deployment
manageddatabases                               example.teardown.dev/v1           true         ManagedDatabase
`

// apiResourcesWide is `kubectl api-resources -o wide`: more columns after KIND.
const apiResourcesWide = `NAME                SHORTNAMES   APIVERSION                NAMESPACED   KIND              VERBS                                        CATEGORIES
configmaps          cm           v1                        true         ConfigMap         create,delete,get,list,patch,update,watch
namespaces          ns           v1                        false        Namespace         create,delete,get,list,patch,update,watch
deployments         deploy       apps/v1                   true         Deployment        create,delete,get,list,patch,update,watch   all
clusterbackends                  example.teardown.dev/v1   false        ClusterBackend    get,list
`

func writeDump(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		content string
		// want is every kind served, with its scope.
		want map[schema.GroupVersionKind]bool
		// notServed are kinds that must not be served (subresources' kinds among them).
		notServed []schema.GroupVersionKind
	}{
		{
			name:    "JSON list from kubectl teardown kinds",
			file:    "kinds.json",
			content: kindsJSON,
			want: map[schema.GroupVersionKind]bool{
				configMap:       true,
				namespace:       false,
				deployment:      true,
				managedDatabase: true,
				gvk("example.teardown.dev", "v1", "Widget"): false,
			},
			notServed: []schema.GroupVersionKind{
				gvk("", "v1", "Eviction"),
				gvk("apps", "v1", "Scale"),
				gvk("apps", "v1", "StatefulSet"),
				gvk("apps", "v1beta1", "Deployment"),
				gvk("", "v1", "Deployment"),
			},
		},
		{
			name:    "single APIResourceList in YAML",
			file:    "crds.yaml",
			content: oneListYAML,
			want: map[schema.GroupVersionKind]bool{
				managedDatabase: true,
				clusterBackend:  false,
			},
			notServed: []schema.GroupVersionKind{
				gvk("example.teardown.dev", "v1", "Finalize"),
				gvk("example.teardown.dev", "v1beta1", "ManagedDatabase"),
				configMap,
			},
		},
		{
			name:    "single APIResourceList in JSON",
			file:    "apps.json",
			content: oneListJSON,
			want: map[schema.GroupVersionKind]bool{
				deployment: true,
			},
			notServed: []schema.GroupVersionKind{
				gvk("apps", "v1", "Scale"),
				gvk("autoscaling", "v1", "Scale"),
			},
		},
		{
			name:    "list of APIResourceLists in YAML",
			file:    "kinds.yaml",
			content: listsYAML,
			want: map[schema.GroupVersionKind]bool{
				configMap:  true,
				namespace:  false,
				deployment: true,
			},
			notServed: []schema.GroupVersionKind{managedDatabase},
		},
		{
			name:    "kubectl api-resources table",
			file:    "api-resources.txt",
			content: apiResources,
			want: map[schema.GroupVersionKind]bool{
				configMap:       true,
				namespace:       false,
				deployment:      true,
				managedDatabase: true,
			},
			notServed: []schema.GroupVersionKind{
				clusterBackend,
				gvk("apps", "v1", "StatefulSet"),
				gvk("", "v1", "cm"),
				gvk("", "v1", "configmaps"),
			},
		},
		{
			name:    "kubectl api-resources table with blank lines around it",
			file:    "api-resources.txt",
			content: "\n\n" + apiResources + "\n\n",
			want: map[schema.GroupVersionKind]bool{
				configMap:       true,
				namespace:       false,
				deployment:      true,
				managedDatabase: true,
			},
		},
		{
			name:    "kubectl api-resources -o wide table",
			file:    "api-resources-wide.txt",
			content: apiResourcesWide,
			want: map[schema.GroupVersionKind]bool{
				configMap:      true,
				namespace:      false,
				deployment:     true,
				clusterBackend: false,
			},
			notServed: []schema.GroupVersionKind{managedDatabase},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeDump(t, tt.file, tt.content)
			k, err := discovery.Load(path)
			if err != nil {
				t.Fatalf("Load: unexpected error: %v", err)
			}
			if k.Len() != len(tt.want) {
				t.Errorf("Len() = %d, want %d", k.Len(), len(tt.want))
			}
			for g, want := range tt.want {
				got, err := k.Namespaced(g)
				if err != nil {
					t.Errorf("Namespaced(%v): unexpected error: %v", g, err)
					continue
				}
				if got != want {
					t.Errorf("Namespaced(%v) = %v, want %v", g, got, want)
				}
			}
			for _, g := range tt.notServed {
				ns, err := k.Namespaced(g)
				if err == nil {
					t.Errorf("Namespaced(%v) = %v, want a NotServedError", g, ns)
					continue
				}
				var nse *discovery.NotServedError
				if !errors.As(err, &nse) {
					t.Errorf("Namespaced(%v): error %v is %T, want *discovery.NotServedError", g, err, err)
					continue
				}
				if nse.GVK != g || nse.Source != path {
					t.Errorf("NotServedError = {GVK: %v, Source: %q}, want {GVK: %v, Source: %q}", nse.GVK, nse.Source, g, path)
				}
				for _, w := range []string{g.Kind, path, "not served"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
			}
		})
	}
}

func TestNotServedErrorMessage(t *testing.T) {
	path := writeDump(t, "kinds.json", kindsJSON)
	k, err := discovery.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	tests := []struct {
		gvk  schema.GroupVersionKind
		want []string
	}{
		{gvk("example.teardown.dev", "v1", "Missing"), []string{"Missing", "example.teardown.dev/v1", "not served", path}},
		{gvk("", "v1", "Missing"), []string{"Missing", "v1", "not served", path}},
		{gvk("apps", "v1beta1", "Deployment"), []string{"Deployment", "apps/v1beta1", "not served", path}},
	}
	for _, tt := range tests {
		t.Run(tt.gvk.String(), func(t *testing.T) {
			_, err := k.Namespaced(tt.gvk)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		// want are substrings of the message besides the file's path.
		want []string
	}{
		{name: "not YAML", content: "{{{ not: [yaml\n"},
		{name: "prose", content: "this is not a discovery dump\n"},
		{name: "a number", content: "42\n"},
		{name: "empty file", content: "", want: []string{"no kinds"}},
		{name: "empty JSON list", content: "[]\n", want: []string{"no kinds"}},
		{name: "empty YAML list", content: "[]\n---\n", want: []string{"no kinds"}},
		{name: "empty object", content: "{}\n", want: []string{"no kinds"}},
		{name: "lists without resources", content: `[{"groupVersion":"v1","resources":[]}]`, want: []string{"no kinds"}},
		{name: "only subresources", content: `{"groupVersion":"v1","resources":[{"name":"pods/log","kind":"Pod","namespaced":true}]}`, want: []string{"no kinds"}},
		{name: "a Kubernetes object, not a dump", content: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", want: []string{"no kinds"}},
		{name: "wrong field types", content: `[{"groupVersion":"v1","resources":"configmaps"}]`},
		{
			name:    "table without a KIND column",
			content: "NAME         SHORTNAMES   APIVERSION   NAMESPACED\nconfigmaps   cm           v1           true\n",
			want:    []string{"KIND"},
		},
		{
			name:    "table with a bad APIVERSION",
			content: "NAME         APIVERSION   NAMESPACED   KIND\nconfigmaps   a/b/c        true         ConfigMap\n",
			want:    []string{"a/b/c"},
		},
		{
			// The table's empty list: like "[]", it has no kinds.
			name:    "table with a header only",
			content: "NAME   SHORTNAMES   APIVERSION   NAMESPACED   KIND\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeDump(t, "dump.txt", tt.content)
			k, err := discovery.Load(path)
			if err == nil {
				t.Fatalf("Load: no error, got %d kinds", k.Len())
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file %q", err, path)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.json")
	_, err := discovery.Load(path)
	if err == nil {
		t.Fatal("Load: no error")
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v is not os.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the file %q", err, path)
	}
}
