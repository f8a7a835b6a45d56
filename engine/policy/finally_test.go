package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

func withFinally(v policy.View, finally ...v1alpha1.Step) policy.View {
	v.Spec.Finally = finally
	return v
}

func withOnStuck(v policy.View, onStuck ...v1alpha1.Step) policy.View {
	v.Spec.OnStuck = onStuck
	return v
}

// Finally steps read every step and the finally steps before them, and how the run ended; steps
// cannot read them; their names are the steps' namespace; they cannot wait for people; and an
// unset timeout is bounded.
func TestCompileFinally(t *testing.T) {
	snap := httpStep("snap", map[string]string{"id": "response.body.id"}, "")
	notify := func(name, when, url string) v1alpha1.Step {
		return v1alpha1.Step{Name: name, When: when, HTTP: &v1alpha1.HTTPStep{URL: url}}
	}
	for _, tt := range []compileCheck{
		{"finally reads the steps and how the run ended", withFinally(namespaced("ConfigMap", snap),
			notify("chat", "run.phase != 'Succeeded' && steps.snap.phase == 'Succeeded'", "https://chat.example/${steps.snap.outputs.id}?m=${run.message}"),
			notify("pager", "steps.chat.phase == 'Failed'", "https://pager.example/")), nil},
		{"a step cannot read a finally step", withFinally(namespaced("ConfigMap", httpStep("a", nil, "steps.chat.phase == 'Succeeded'")),
			notify("chat", "", "https://chat.example/")), []string{"spec.steps[0].http.successCondition", "steps.chat runs after this step"}},
		{"a finally step named like a step", withFinally(namespaced("ConfigMap", snap), notify("snap", "", "https://chat.example/")),
			[]string{"spec.finally[0].name: Duplicate value"}},
		{"an approval in finally", withFinally(namespaced("ConfigMap", snap), v1alpha1.Step{Name: "ask", Approval: &v1alpha1.ApprovalStep{}}),
			[]string{"spec.finally[0].approval: Forbidden: finally steps cannot be approval steps"}},
		{"onStuck reads the steps, not the finally steps", withOnStuck(withFinally(namespaced("ConfigMap", snap), notify("chat", "", "https://chat.example/")),
			notify("page", "steps.chat.phase == 'Failed'", "https://pager.example/${run.phase}")), []string{"spec.onStuck[0].when", "steps.chat: the policy has no step"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := compileView(t, tt.view)
			if len(tt.want) == 0 && got != "" {
				t.Fatalf("unexpected errors: %s", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("errors %q do not contain %q", got, w)
				}
			}
		})
	}
	c, errs := fullCompiler(t).Compile(withFinally(namespaced("ConfigMap", snap), notify("chat", "", "https://chat.example/")))
	if len(errs) > 0 || len(c.Pipeline.Finally) != 1 || c.Pipeline.Finally[0].Spec.Timeout.Duration != 5*time.Minute {
		t.Errorf("finally compiled to %+v (%v); want one step bounded by 5m", c.Pipeline.Finally, errs)
	}
}
