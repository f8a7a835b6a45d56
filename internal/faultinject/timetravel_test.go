//go:build faultinject

package faultinject

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseTimeTravel(t *testing.T) {
	got, err := ParseTimeTravel("41234:10s")
	if err != nil || got == nil || got.RV != "41234" || got.Hold != 10*time.Second {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got, err := ParseTimeTravel(""); got != nil || err != nil {
		t.Errorf("empty: got %+v, %v; want none", got, err)
	}
	for in, msg := range map[string]string{
		"41234":     "want <resourceVersion>:<duration>",
		"0:10s":     "want <resourceVersion>:<duration>",
		"abc:10s":   "want <resourceVersion>:<duration>",
		"41234:-1s": `hold "-1s" is not a positive Go duration`,
		"41234:ten": `hold "ten" is not a positive Go duration`,
	} {
		if _, err := ParseTimeTravel(in); err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), EnvTimeTravel) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", in, err, EnvTimeTravel, msg)
		}
	}
}

// recorder answers every request 200 and keeps its URL.
type recorder struct{ urls []string }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.urls = append(r.urls, req.URL.RequestURI())
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// TestTraveller follows one cache through its start: a watch-list refused, its first list sent to
// the past, the watch after it held, then everything as it is; another cache travels on its own,
// and reads of one object or live lists never travel.
func TestTraveller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		tr := &traveller{next: rec, journey: newJourney(TimeTravel{RV: "100", Hold: 10 * time.Second})}
		get := func(url, accept string) *http.Response {
			req, _ := http.NewRequest(http.MethodGet, "https://api"+url, nil)
			req.Header.Set("Accept", accept)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			return resp
		}
		runs := "/apis/teardown.dev/v1alpha1/teardownruns"
		if resp := get(runs+"?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", "application/json"); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("watch-list: status %d, want 400", resp.StatusCode)
		}
		get("/apis/teardown.dev/v1alpha1/namespaces/a/teardownruns/r1", "application/json")
		get(runs+"?resourceVersion=", "application/json") // a live list
		get(runs+"?limit=500&resourceVersion=0", "application/json")
		get(runs+"?limit=500&resourceVersion=0", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
		start := time.Now()
		get(runs+"?watch=1&resourceVersion=100", "application/json")
		if held := time.Since(start); held != 10*time.Second {
			t.Errorf("the watch after the first list was held %s, want 10s", held)
		}
		start = time.Now()
		get(runs+"?watch=1&resourceVersion=120", "application/json")
		get(runs+"?resourceVersion=0", "application/json")
		if held := time.Since(start); held != 0 {
			t.Errorf("later requests were held %s", held)
		}
		want := []string{
			"/apis/teardown.dev/v1alpha1/namespaces/a/teardownruns/r1",
			runs + "?resourceVersion=",
			runs + "?limit=500&resourceVersion=100&resourceVersionMatch=Exact",
			runs + "?limit=500&resourceVersion=100&resourceVersionMatch=Exact",
			runs + "?watch=1&resourceVersion=100",
			runs + "?watch=1&resourceVersion=120",
			runs + "?resourceVersion=0",
		}
		if strings.Join(rec.urls, "\n") != strings.Join(want, "\n") {
			t.Errorf("requests sent:\n%s\nwant:\n%s", strings.Join(rec.urls, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestStatusResponse: the injected refusals read, to a client, as the API server's own.
func TestStatusResponse(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://api/api/v1/configmaps?watch=1", nil)
	for _, tc := range []struct {
		resp  *http.Response
		is    func(error) bool
		code  int
		names string
	}{
		{expiredResponse(req), apierrors.IsResourceExpired, http.StatusGone, "410 Gone"},
		{statusResponse(req, http.StatusBadRequest, metav1.StatusReasonBadRequest, "no"), apierrors.IsBadRequest, http.StatusBadRequest, "400 Bad Request"},
	} {
		var st metav1.Status
		if err := json.NewDecoder(tc.resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		if err := apierrors.FromObject(&st); !tc.is(err) || tc.resp.StatusCode != tc.code || tc.resp.Status != tc.names {
			t.Errorf("%s: %v, status %d %q", tc.names, err, tc.resp.StatusCode, tc.resp.Status)
		}
	}
}
