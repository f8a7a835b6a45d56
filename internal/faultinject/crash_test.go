//go:build faultinject

package faultinject

import (
	"net/http"
	"net/url"
	"testing"
)

func TestAPIPoint(t *testing.T) {
	for _, tc := range []struct{ method, url, want string }{
		{"GET", "/api/v1/namespaces/a/configmaps/x", ""},
		{"PATCH", "/api/v1/namespaces/a/configmaps/x", "patch configmaps x"},
		{"PUT", "/apis/teardown.dev/v1alpha1/namespaces/a/teardownruns/r/status", "update teardownruns/status r"},
		{"POST", "/apis/teardown.dev/v1alpha1/namespaces/a/teardownruns", "create teardownruns"},
		{"POST", "/apis/batch/v1/namespaces/a/jobs?dryRun=All", "create jobs (dry run)"},
		{"DELETE", "/api/v1/namespaces/a", "delete namespaces a"},
		{"PATCH", "/apis/teardown.dev/v1alpha1/clusterteardownpolicies/p/status", "patch clusterteardownpolicies/status p"},
		{"POST", "/apis/events.k8s.io/v1/namespaces/a/events", ""},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l", ""},
		{"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", ""},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := apiPoint(&http.Request{Method: tc.method, URL: u}); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.url, got, tc.want)
		}
	}
}
