package cli_test

import (
	"strings"
	"testing"

	"github.com/teardown-dev/teardown-operator/cli"
)

// TestDrainStopOperatorUsage: a malformed --stop-operator or --timeout is a usage error, found
// before any cluster is read (these runs have none).
func TestDrainStopOperatorUsage(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		errLine string
	}{
		{[]string{"drain", "--all", "--stop-operator", "teardown-operator"}, `--stop-operator "teardown-operator": name the operator's Deployment as NAMESPACE/NAME`},
		{[]string{"drain", "--all", "--stop-operator", "deployment/teardown-system/teardown-operator"}, "NAMESPACE/NAME"},
		{[]string{"drain", "--policy", "p", "--stop-operator", "/teardown-operator"}, "--stop-operator"},
		{[]string{"drain", "--all", "--stop-operator="}, `--stop-operator ""`},
		{[]string{"drain", "--all", "--stop-operator"}, "flag needs an argument: --stop-operator"},
		{[]string{"drain", "--all", "--stop-operator", "ns/op", "--timeout", "0s"}, "--timeout 0s: give a positive duration"},
		{[]string{"drain", "--all", "--timeout", "soon"}, `invalid argument "soon" for "--timeout"`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, errOut, code := run(t, tt.args...)
			if code != cli.ExitUsage || !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tt.errLine) {
				t.Errorf("exit %d, stderr %q; want exit 2 and one line \"error: ...%s...\"", code, errOut, tt.errLine)
			}
		})
	}
}

func TestDrainHelpExplainsStopOperator(t *testing.T) {
	out, _, code := run(t, "drain", "--help")
	for _, want := range []string{"--stop-operator NAMESPACE/NAME", "stays at 0 replicas", "kubectl scale or helm upgrade", "--timeout duration"} {
		if code != cli.ExitOK || !strings.Contains(out, want) {
			t.Errorf("exit %d, help lacks %q:\n%s", code, want, out)
		}
	}
}

// TestDrainAllRefusesWhereItCannotAsk: --all without --yes, its standard input not a terminal (a
// script, a pipe), releases nothing and says what to do, before any cluster is read. Issue: it
// drained every object without asking.
func TestDrainAllRefusesWhereItCannotAsk(t *testing.T) {
	out, errOut, code := run(t, "drain", "--all", "--kubeconfig", "/nonexistent")
	if code != cli.ExitUsage || out != "" || !strings.Contains(errOut, "cannot ask here (standard input is not a terminal): add --yes") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, and the refusal", code, out, errOut)
	}
}
