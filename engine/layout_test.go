package engine_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/teardown-dev/teardown-operator"

// TestImportRule keeps the dependency direction: cmd → {engine, cli} → {engine/*, steps, internal/*, api};
// steps/* → {steps, internal/*, api}; internal/* → {internal/*, api, config} (config/: manifests embedded
// as they are, importing nothing). Only cmd/, cli/ and test/ import the engine, the engine never
// imports a step kind or the CLI, so step kinds plug in without the engine knowing them and the
// compiler and pipeline run without the operator (the CLI).
func TestImportRule(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := strings.TrimPrefix(fields[0], module+"/"), fields[1:]
		for _, imp := range imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			if why := forbidden(pkg, dep); why != "" {
				t.Errorf("%s imports %s: %s", pkg, dep, why)
			}
		}
	}
}

func forbidden(pkg, dep string) string {
	under := func(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	switch {
	case under(dep, "engine") && !under(pkg, "engine") && !under(pkg, "cmd") && !under(pkg, "cli") && !under(pkg, "test"):
		return "only cmd/, cli/ and test/ import the engine"
	case under(dep, "cli") && !under(pkg, "cli") && !under(pkg, "cmd") && !under(pkg, "test"):
		return "only cmd/ and test/ import the CLI"
	case under(pkg, "engine") && under(dep, "steps") && dep != "steps":
		return "the engine never imports a step kind (only the steps contract)"
	case under(pkg, "internal") && !under(dep, "internal") && dep != "api/v1alpha1" && !under(dep, "config"):
		return "internal packages are leaf libraries"
	case under(pkg, "api") && dep != pkg:
		return "the API package imports nothing of the project"
	case under(pkg, "config"):
		return "config/ holds manifests (embedded as they are) and imports nothing of the project"
	}
	return ""
}

func TestForbidden(t *testing.T) {
	for _, tt := range []struct {
		pkg, dep string
		bad      bool
	}{
		{"steps/wait", "engine", true},
		{"steps/builtin", "engine", true},
		{"internal/expr", "engine/policy", true},
		{"internal/admissiontrust", "config/admission", false},
		{"config/admission", "api/v1alpha1", true},
		{"engine", "steps/httpstep", true},
		{"engine/policy", "steps/wait", true},
		{"internal/expr", "steps", true},
		{"api/v1alpha1", "internal/naming", true},
		{"engine", "steps", false},
		{"engine/policy", "internal/expr", false},
		{"cmd/teardown-operator", "engine", false},
		{"test/integration", "engine", false},
		{"cli/fixture", "engine/pipeline", false},
		{"engine", "cli/lint", true},
		{"steps/httpstep", "cli", true},
		{"steps/jobstep", "internal/naming", false},
	} {
		if got := forbidden(tt.pkg, tt.dep) != ""; got != tt.bad {
			t.Errorf("forbidden(%s, %s) = %v, want %v", tt.pkg, tt.dep, got, tt.bad)
		}
	}
}
