// Command builtinkinds writes the table of the kinds a Kubernetes API server serves on its own
// (group, version, kind, resource, namespaced), which kubectl teardown lint uses without a
// cluster: it starts the API server of the local control plane (envtest, KUBEBUILDER_ASSETS,
// default bin/), reads its discovery and writes cli/discovery/builtin_kinds.json.
//
//	make builtin-kinds                      # after the control plane's Kubernetes version changes
//	go run ./hack/builtinkinds -out FILE    # write elsewhere
//
// An integration spec (test/integration/builtin_kinds_test.go) fails when the committed table
// differs from what the API server of the tests serves.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	clidiscovery "github.com/teardown-dev/teardown-operator/cli/discovery"
)

func main() {
	out := flag.String("out", filepath.Join("cli", "discovery", clidiscovery.BuiltinFile), "file to write")
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
	raw, err := encode(clidiscovery.TableOf(version.GitVersion, lists, nil))
	if err != nil {
		return err
	}
	return os.WriteFile(out, raw, 0o644)
}

// encode writes the table as JSON with one kind a line, for reviewable diffs.
func encode(t clidiscovery.BuiltinTable) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"kubernetes\": %q,\n  \"kinds\": [\n", t.Kubernetes)
	for i, k := range t.Kinds {
		line, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		sep := ","
		if i == len(t.Kinds)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %s%s\n", line, sep)
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes(), nil
}
