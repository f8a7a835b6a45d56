// Command builtinkinds writes the table of the kinds a Kubernetes API server serves on its own
// (group, version, kind, resource, namespaced), which kubectl teardown lint uses without a
// cluster: it starts the API server of the local control plane (envtest, KUBEBUILDER_ASSETS,
// default bin/), reads its discovery and writes cli/discovery/builtin_kinds.json.
//
//	make builtin-kinds                      # after the control plane's Kubernetes version changes
//	go run ./hack/builtinkinds -out FILE    # write elsewhere
//
// An integration spec (test/integration/builtin_kinds_test.go) fails when the committed table
// differs from what the API server of the tests serves, as cli/discovery.TableOf reads it (the
// same table: hack/ may not import the CLI, so it is built here again).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// kind is one line of the table (cli/discovery.BuiltinKind).
type kind struct {
	Group      string `json:"group"`
	Version    string `json:"version"`
	Kind       string `json:"kind"`
	Resource   string `json:"resource"`
	Namespaced bool   `json:"namespaced"`
}

func main() {
	out := flag.String("out", filepath.Join("cli", "discovery", "builtin_kinds.json"), "file to write")
	flag.Parse()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		os.Setenv("KUBEBUILDER_ASSETS", "bin")
	}
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "builtinkinds:", err)
		os.Exit(1)
	}
}

func write(out string) (err error) {
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the API server (make control-plane): %w", err)
	}
	defer func() {
		if stopErr := env.Stop(); err == nil {
			err = stopErr
		}
	}()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	version, err := dc.ServerVersion()
	if err != nil {
		return err
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		return err
	}
	raw, err := encode(version.GitVersion, kinds(lists))
	if err != nil {
		return err
	}
	return os.WriteFile(out, raw, 0o644)
}

// kinds are the kinds of discovery's lists, subresources left out, ordered by group, version,
// kind and resource.
func kinds(lists []*metav1.APIResourceList) []kind {
	var out []kind
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if !strings.Contains(r.Name, "/") {
				out = append(out, kind{Group: gv.Group, Version: gv.Version, Kind: r.Kind, Resource: r.Name, Namespaced: r.Namespaced})
			}
		}
	}
	slices.SortFunc(out, func(a, b kind) int {
		return strings.Compare(a.Group+"/"+a.Version+"/"+a.Kind+"/"+a.Resource, b.Group+"/"+b.Version+"/"+b.Kind+"/"+b.Resource)
	})
	return out
}

// encode writes the table as JSON with one kind a line, for reviewable diffs.
func encode(kubernetes string, kinds []kind) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"kubernetes\": %q,\n  \"kinds\": [\n", kubernetes)
	for i, k := range kinds {
		line, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		sep := ","
		if i == len(kinds)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %s%s\n", line, sep)
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes(), nil
}
