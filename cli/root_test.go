package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/teardown-dev/teardown-operator/cli"
)

// run runs the plugin in-process, stdin empty (not a terminal).
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := cli.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	code := cli.Run(cmd, args)
	return out.String(), errOut.String(), code
}

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const cleanPolicy = `apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata: {name: pause}
spec:
  targetRef: {apiVersion: v1, kind: ConfigMap}
  timeout: 5m
  steps:
  - name: pause
    wait: {duration: 10s}
`

// TestExitCodes: the offline commands' exit codes, and bad input as one line on stderr.
func TestExitCodes(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		code    int
		errLine string // a substring of the one error line; "" expects none
	}{
		{"clean", []string{"lint", write(t, "p.yaml", cleanPolicy)}, cli.ExitOK, ""},
		{"problems", []string{"lint", write(t, "p.yaml", strings.Replace(cleanPolicy, "10s", "ten seconds", 1))}, cli.ExitFindings, ""},
		{"not YAML", []string{"lint", write(t, "p.yaml", "a: [\n")}, cli.ExitUsage, "is not YAML"},
		{"missing file", []string{"lint", "/nonexistent/p.yaml"}, cli.ExitUsage, "no such file or directory"},
		{"no policy", []string{"lint", write(t, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")}, cli.ExitUsage, "no TeardownPolicy"},
		{"unknown flag", []string{"lint", "--bogus", "x"}, cli.ExitUsage, "unknown flag: --bogus"},
		{"bad output", []string{"lint", "-o", "xml", write(t, "p.yaml", cleanPolicy)}, cli.ExitUsage, `--output "xml"`},
		{"no args", []string{"lint"}, cli.ExitUsage, "at least one"},
		{"no tests", []string{"test", write(t, "p.yaml", cleanPolicy)}, cli.ExitUsage, "no TeardownTest"},
		{"abandon without reason", []string{"abandon", "configmap/x"}, cli.ExitUsage, "--reason is required"},
		{"drain without scope", []string{"drain"}, cli.ExitUsage, "exactly one of --policy"},
		{"status --policy with an object", []string{"status", "--policy", "TeardownPolicy/p", "configmap/x"}, cli.ExitUsage, "give no RUN or KIND/NAME with it"},
		{"status --policy with -A", []string{"status", "--policy", "TeardownPolicy/p", "-A"}, cli.ExitUsage, "-A adds nothing"},
		{"retry with no timeout", []string{"retry", "configmap/x", "--timeout", "0s"}, cli.ExitUsage, "--timeout 0s: must be positive"},
		{"version", []string{"version"}, cli.ExitOK, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := run(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errOut)
			}
			if tt.errLine == "" {
				if errOut != "" {
					t.Errorf("stderr %q, want none", errOut)
				}
				return
			}
			if !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tt.errLine) {
				t.Errorf("stderr %q, want one line \"error: ...%s...\"", errOut, tt.errLine)
			}
		})
	}
}

// TestHelpSaysKubectlTeardown: usage is printed as kubectl prints plugins.
func TestHelpSaysKubectlTeardown(t *testing.T) {
	out, _, code := run(t, "lint", "--help")
	if code != cli.ExitOK || !strings.Contains(out, "kubectl teardown lint") {
		t.Errorf("exit %d, help:\n%s", code, out)
	}
}
