package steps

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// fakeKind is configured when its name is in the step's name, which keeps the table readable:
// a step named "wait+http" configures both kinds.
type fakeKind struct{ name string }

func (k fakeKind) Name() string { return k.name }

func (k fakeKind) Configured(s *v1alpha1.Step) bool {
	for _, part := range strings.Split(s.Name, "+") {
		if part == k.name {
			return true
		}
	}
	return false
}

func (k fakeKind) Compile(CompileContext, *v1alpha1.Step, *field.Path) (Action, field.ErrorList) {
	return nil, nil
}

// waitKind is configured by the step's wait field, as the real wait kind is.
type waitKind struct{}

func (waitKind) Name() string                     { return "wait" }
func (waitKind) Configured(s *v1alpha1.Step) bool { return s.Wait != nil }
func (waitKind) Compile(CompileContext, *v1alpha1.Step, *field.Path) (Action, field.ErrorList) {
	return nil, nil
}

func TestRegistryFind(t *testing.T) {
	three := Registry{fakeKind{"wait"}, fakeKind{"http"}, fakeKind{"job"}}
	tests := []struct {
		name     string
		registry Registry
		step     string
		want     string // name of the kind found; empty when an error is wanted
		wantErr  string
	}{
		{"empty registry", Registry{}, "wait", "", "sets no step kind; set exactly one of "},
		{"nil registry", nil, "wait", "", "sets no step kind; set exactly one of "},
		{"no kind, one known", Registry{fakeKind{"wait"}}, "none", "", "sets no step kind; set exactly one of wait"},
		{"no kind", three, "none", "", "sets no step kind; set exactly one of wait, http, job"},
		{"first kind", three, "wait", "wait", ""},
		{"middle kind", three, "http", "http", ""},
		{"last kind", three, "job", "job", ""},
		{"two kinds", three, "wait+http", "", "sets both wait and http; set exactly one step kind"},
		{"two kinds in registry order", three, "job+wait", "", "sets both wait and job; set exactly one step kind"},
		{"three kinds names the first two", three, "job+http+wait", "", "sets both wait and http; set exactly one step kind"},
		{"unknown kind besides a known one", three, "http+ftp", "http", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := tt.registry.Find(&v1alpha1.Step{Name: tt.step})
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Find(%q) = %v, want error %q", tt.step, k, tt.wantErr)
				}
				if err.Error() != tt.wantErr {
					t.Errorf("Find(%q) error %q, want %q", tt.step, err.Error(), tt.wantErr)
				}
				if k != nil {
					t.Errorf("Find(%q) returned kind %v with an error", tt.step, k)
				}
				return
			}
			if err != nil {
				t.Fatalf("Find(%q): %v", tt.step, err)
			}
			if k == nil || k.Name() != tt.want {
				t.Errorf("Find(%q) = %v, want kind %q", tt.step, k, tt.want)
			}
		})
	}
}

func TestRegistryFindByField(t *testing.T) {
	r := Registry{waitKind{}, fakeKind{"http"}}
	k, err := r.Find(&v1alpha1.Step{Name: "pause", Wait: &v1alpha1.WaitStep{Until: "true"}})
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	if k.Name() != "wait" {
		t.Errorf("Find = %q, want wait", k.Name())
	}
	_, err = r.Find(&v1alpha1.Step{Name: "http", Wait: &v1alpha1.WaitStep{Until: "true"}})
	if want := "sets both wait and http; set exactly one step kind"; err == nil || err.Error() != want {
		t.Errorf("Find with wait and http: error %v, want %q", err, want)
	}
	_, err = r.Find(&v1alpha1.Step{Name: "pause"})
	if want := "sets no step kind; set exactly one of wait, http"; err == nil || err.Error() != want {
		t.Errorf("Find with no kind: error %v, want %q", err, want)
	}
}

func TestResultHelpers(t *testing.T) {
	if got, want := Done("waited %s", 3*time.Second), (Result{Outcome: Succeeded, Message: "waited 3s"}); !resultEqual(got, want) {
		t.Errorf("Done = %+v, want %+v", got, want)
	}
	if got, want := Waiting(7*time.Second, "waiting for %q", "x"), (Result{Outcome: InProgress, CheckAfter: 7 * time.Second, Message: `waiting for "x"`}); !resultEqual(got, want) {
		t.Errorf("Waiting = %+v, want %+v", got, want)
	}
	if got, want := Fail(true, "lookup %s: %v", "pods", "boom"), (Result{Outcome: Failed, Retryable: true, Message: "lookup pods: boom"}); !resultEqual(got, want) {
		t.Errorf("Fail(true) = %+v, want %+v", got, want)
	}
	if got, want := Fail(false, "refused"), (Result{Outcome: Failed, Message: "refused"}); !resultEqual(got, want) {
		t.Errorf("Fail(false) = %+v, want %+v", got, want)
	}
}

func resultEqual(a, b Result) bool {
	return a.Outcome == b.Outcome && a.Message == b.Message && a.Retryable == b.Retryable &&
		a.RetryAfter == b.RetryAfter && a.CheckAfter == b.CheckAfter &&
		a.Outputs == nil && b.Outputs == nil && a.State == nil && b.State == nil && a.Watch == nil && b.Watch == nil
}

func TestInputNamespaced(t *testing.T) {
	if (&Input{}).Namespaced() {
		t.Errorf("Namespaced() = true for a cluster policy")
	}
	if !(&Input{PolicyNamespace: "prod"}).Namespaced() {
		t.Errorf("Namespaced() = false for a policy in prod")
	}
}

// Compile-time checks that the fakes are kinds.
var (
	_ Kind = fakeKind{}
	_ Kind = waitKind{}
)
