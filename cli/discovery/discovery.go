// Package discovery answers which kinds a cluster serves, and their scope, from a discovery dump
// (for checks without a cluster) or from a live cluster.
package discovery

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// Kinds is the set of kinds a cluster serves, each namespaced or not.
type Kinds struct {
	source string
	scope  map[schema.GroupVersionKind]bool
}

// NotServedError says a kind is not in the dump.
type NotServedError struct {
	GVK    schema.GroupVersionKind
	Source string
}

func (e *NotServedError) Error() string {
	return fmt.Sprintf("apiVersion %s kind %s is not served (not in %s)", e.GVK.GroupVersion(), e.GVK.Kind, e.Source)
}

// FromLists builds Kinds from discovery's resource lists.
func FromLists(source string, lists []*metav1.APIResourceList) *Kinds {
	k := &Kinds{source: source, scope: map[schema.GroupVersionKind]bool{}}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource
			}
			k.scope[gv.WithKind(r.Kind)] = r.Namespaced
		}
	}
	return k
}

// Load reads a discovery dump: the JSON or YAML of one APIResourceList or a list of them (what
// `kubectl teardown kinds` prints, or `kubectl get --raw /apis/<group>/<version>` for one
// group), or the table `kubectl api-resources` prints.
func Load(path string) (*Kinds, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	trimmed := bytes.TrimSpace(raw)
	if bytes.HasPrefix(trimmed, []byte("NAME ")) {
		return parseTable(path, trimmed)
	}
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: neither a discovery dump (JSON or YAML) nor `kubectl api-resources` output: %v", path, err)
	}
	var lists []*metav1.APIResourceList
	if bytes.HasPrefix(bytes.TrimSpace(j), []byte("[")) {
		err = json.Unmarshal(j, &lists)
	} else {
		var one metav1.APIResourceList
		err = json.Unmarshal(j, &one)
		lists = append(lists, &one)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: not a discovery dump: %v", path, err)
	}
	k := FromLists(path, lists)
	if len(k.scope) == 0 {
		return nil, fmt.Errorf("%s: no kinds in it: expected APIResourceLists (groupVersion, resources) or `kubectl api-resources` output", path)
	}
	return k, nil
}

// parseTable reads `kubectl api-resources` output: NAME [SHORTNAMES] APIVERSION NAMESPACED KIND ...
func parseTable(path string, raw []byte) (*Kinds, error) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Scan()
	header := sc.Text()
	cols := map[string]int{}
	for _, name := range []string{"APIVERSION", "NAMESPACED", "KIND"} {
		i := strings.Index(header, name)
		if i < 0 {
			return nil, fmt.Errorf("%s: the api-resources table has no %s column", path, name)
		}
		cols[name] = i
	}
	k := &Kinds{source: path, scope: map[schema.GroupVersionKind]bool{}}
	for sc.Scan() {
		line := sc.Text()
		if len(line) <= cols["KIND"] {
			continue
		}
		gv, err := schema.ParseGroupVersion(strings.Fields(line[cols["APIVERSION"]:])[0])
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %v", path, line, err)
		}
		namespaced := strings.HasPrefix(strings.TrimSpace(line[cols["NAMESPACED"]:]), "true")
		k.scope[gv.WithKind(strings.Fields(line[cols["KIND"]:])[0])] = namespaced
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(k.scope) == 0 {
		return nil, fmt.Errorf("%s: no kinds in it: the api-resources table has only its header", path)
	}
	return k, nil
}

// Namespaced reports whether the kind is namespaced; a NotServedError when it is not served.
func (k *Kinds) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	ns, ok := k.scope[gvk]
	if !ok {
		return false, &NotServedError{GVK: gvk, Source: k.source}
	}
	return ns, nil
}

// Len is the number of kinds.
func (k *Kinds) Len() int { return len(k.scope) }
