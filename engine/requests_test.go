package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// A request counts only as the admission policy that checks requests admitted it: while it is in
// force, and set after it was.
func TestRequestUntrusted(t *testing.T) {
	since := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	withEntry := func(at time.Time) *metav1.PartialObjectMetadata {
		obj := &metav1.PartialObjectMetadata{}
		obj.Annotations = map[string]string{v1alpha1.AnnotationAbandon: "alice: INC-1"}
		obj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-annotate", Time: &metav1.Time{Time: at},
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:teardown.dev/abandon":{}}}}`)}}
		return obj
	}
	tests := []struct {
		name string
		obj  *metav1.PartialObjectMetadata
		err  error
		want string // "" = trusted
	}{
		{"set after the policy was in force", withEntry(since.Add(time.Minute)), nil, ""},
		{"set within the managed fields' second", withEntry(since.Add(-500 * time.Millisecond)), nil, ""},
		{"set before", withEntry(since.Add(-time.Minute)), nil, "before the admission policy teardown.dev-requests that checks requests was in force"},
		{"policy missing", withEntry(since.Add(time.Minute)), errors.New("the ValidatingAdmissionPolicy teardown.dev-requests that checks requests is not installed"), "is not installed"},
		{"no managed fields", &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationAbandon: "x"}}}, nil, "was set is unknown"},
	}
	for _, tt := range tests {
		got := requestUntrusted(v1alpha1.AnnotationAbandon, annotationSetAt(tt.obj, v1alpha1.AnnotationAbandon), since, tt.err)
		switch {
		case tt.want == "" && got != "":
			t.Errorf("%s: untrusted: %s", tt.name, got)
		case tt.want != "" && !strings.Contains(got, tt.want):
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// Who asked is the value up to the first ": ", whatever colons the user name holds.
func TestParseRequest(t *testing.T) {
	for value, want := range map[string]request{
		"alice@example.com: INC-7":                      {user: "alice@example.com", who: `alice@example.com (annotation teardown.dev/abandon="INC-7")`},
		"system:serviceaccount:ci:bot: shop closed: ok": {user: "system:serviceaccount:ci:bot", who: `system:serviceaccount:ci:bot (annotation teardown.dev/abandon="shop closed: ok")`},
		"oidc:alice": {user: "oidc:alice", who: `oidc:alice (annotation teardown.dev/abandon="")`},
	} {
		if got := parseRequest(v1alpha1.AnnotationAbandon, value); got != want {
			t.Errorf("%q: got %+v, want %+v", value, got, want)
		}
	}
}
