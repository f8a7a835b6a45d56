// Package docs checks claims of README.md and docs/ against the code and the files they describe,
// where a claim can be checked without a cluster: a claim that goes stale here fails the build
// instead of misleading a new user.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// root is the repository, from this package's directory.
var root = filepath.Join("..", "..")

func read(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestRunHistoryExplained: kubectl explain teardownpolicy.spec.runHistory says where the event of
// a teardown recorded without a run goes (the policy) and what it costs, as operating.md does.
// Issue: it put the event on the object and called it "about twice as cheap".
func TestRunHistoryExplained(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal([]byte(read(t, "config/crd/bases/teardown.dev_teardownpolicies.yaml")), crd); err != nil {
		t.Fatal(err)
	}
	desc := strings.Join(strings.Fields(crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["runHistory"].Description), " ")
	for _, want := range []string{"no event on the object", "TeardownSucceeded event series", "one write", "All costs three"} {
		if !strings.Contains(desc, want) {
			t.Errorf("spec.runHistory's description lacks %q:\n%s", want, desc)
		}
	}
	if op := strings.Join(strings.Fields(read(t, "docs/operating.md")), " "); !strings.Contains(op, "costs the API server one write, the release. `runHistory: All` keeps a TeardownRun for every deletion, the audit mode: a teardown that ends in its first pass costs three writes") {
		t.Errorf("docs/operating.md no longer states the cost spec.runHistory's description quotes")
	}
}

// TestCorpusCounts: development.md counts the lint corpus as it is.
func TestCorpusCounts(t *testing.T) {
	m := regexp.MustCompile(`(\d+) broken and (\d+) valid policies`).FindStringSubmatch(read(t, "docs/development.md"))
	if m == nil {
		t.Fatal("docs/development.md does not count the lint corpus")
	}
	for i, dir := range []string{"broken", "valid"} {
		files, _ := filepath.Glob(filepath.Join(root, "cli/lint/testdata/corpus", dir, "*.yaml"))
		if n, _ := strconv.Atoi(m[i+1]); n != len(files) {
			t.Errorf("docs/development.md says %d %s policies; cli/lint/testdata/corpus/%s holds %d", n, dir, dir, len(files))
		}
	}
}

// TestReadmeNeedsNoUninstalledTool: README's install commands run with what the README says is
// needed (kubectl's built-in kustomize, not the kustomize binary, which nothing installs).
func TestReadmeNeedsNoUninstalledTool(t *testing.T) {
	for _, f := range []string{"README.md", "docs/operating.md", "config/manager/kustomization.yaml"} {
		if strings.Contains(read(t, f), "kustomize edit") {
			t.Errorf("%s tells users to run kustomize edit; nothing installs the kustomize binary", f)
		}
	}
}

// TestClusterVersionNote: test/cluster/README.md says what kubectl version prints, given how
// build-control-plane.sh links the binaries.
func TestClusterVersionNote(t *testing.T) {
	stamps := strings.Contains(read(t, "test/cluster/build-control-plane.sh"), ".gitVersion=$KUBE_VERSION")
	note := read(t, "test/cluster/README.md")
	if stamps && strings.Contains(note, "kubectl version` against this cluster errors") {
		t.Error("test/cluster/README.md says kubectl version fails, but build-control-plane.sh stamps the version")
	}
	if stamps && !strings.Contains(note, "reports `v1.36.3`") {
		t.Error("test/cluster/README.md does not say the version kubectl version reports")
	}
}

// TestDemoKeepDocumented: the demo's DEMO_KEEP is documented where users look, not only in the
// script's header.
func TestDemoKeepDocumented(t *testing.T) {
	for _, f := range []string{"README.md", "docs/development.md"} {
		if !strings.Contains(read(t, f), "DEMO_KEEP=1 make demo") {
			t.Errorf("%s does not document DEMO_KEEP", f)
		}
	}
}

// TestProtectionWindowStated: where README promises a finalizer on every matching object, it says
// from when: from the object's creation, whether or not the operator runs, where an admission
// policy arms it, and otherwise not until a replica runs.
func TestProtectionWindowStated(t *testing.T) {
	readme := strings.Join(strings.Fields(read(t, "README.md")), " ")
	promise := strings.Index(readme, "puts a finalizer on every matching object")
	creation := strings.Index(readme, "adds the finalizer to each matching object it creates, whether or not the operator runs")
	window := strings.Index(readme, "one created and deleted while no replica runs goes without its teardown")
	if promise < 0 || creation < 0 || window < 0 || window-promise > 1500 {
		t.Error("README.md promises a finalizer on every matching object without saying, next to it, from when: at creation where an admission policy arms it, otherwise not while the operator is down")
	}
	operating := strings.Join(strings.Fields(read(t, "docs/operating.md")), " ")
	if !strings.Contains(operating, "one created and deleted in that window is deleted without its teardown") {
		t.Error("docs/operating.md's known limits do not state the window")
	}
	if !strings.Contains(operating, "### Protected from creation") {
		t.Error("docs/operating.md does not explain when an object is protected from")
	}
}

// TestEveryGrantExplained: docs/operating.md "Permissions" has a line for each rule of the
// operator's ClusterRole, with the same API group, resources and verbs, and none for a rule it does
// not have: a grant added without a reason fails here.
func TestEveryGrantExplained(t *testing.T) {
	var role struct {
		Rules []struct {
			APIGroups []string `json:"apiGroups"`
			Resources []string `json:"resources"`
			Verbs     []string `json:"verbs"`
		} `json:"rules"`
	}
	if err := yaml.Unmarshal([]byte(strings.TrimPrefix(read(t, "config/rbac/role.yaml"), "---\n")), &role); err != nil {
		t.Fatal(err)
	}
	op := read(t, "docs/operating.md")
	start := strings.Index(op, "## Permissions\n")
	end := strings.Index(op[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal(`docs/operating.md has no "Permissions" section`)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(op[start:start+1+end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		if strings.TrimSpace(cells[4]) == "" {
			t.Errorf("docs/operating.md: the grant %s gives no reason", line)
		}
		rows[strings.Join([]string{strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])}, " | ")] = true
	}
	quote := func(xs []string) string {
		out := make([]string, len(xs))
		for i, x := range xs {
			if x == "" {
				x = `""`
			}
			out[i] = "`" + x + "`"
		}
		return strings.Join(out, ", ")
	}
	for _, r := range role.Rules {
		key := strings.Join([]string{quote(r.APIGroups), quote(r.Resources), strings.Join(r.Verbs, ", ")}, " | ")
		if !rows[key] {
			t.Errorf("docs/operating.md \"Permissions\" has no line for the grant %s: add one that says why", key)
		}
		delete(rows, key)
	}
	for row := range rows {
		t.Errorf("docs/operating.md \"Permissions\" explains %s, which config/rbac/role.yaml does not grant", row)
	}
}
