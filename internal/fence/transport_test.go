package fence

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// TestTransportFencesWrites drives a real metadata client against a loopback server: while the
// check fails, no write reaches the server and the caller gets the check's error; reads pass.
func TestTransportFencesWrites(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"a","resourceVersion":"7"}}`))
	}))
	defer srv.Close()

	expired := &ExpiredError{MaxAge: 10}
	var fail error
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(Transport(func() error { return fail }))
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms := mc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("ns")
	ctx := context.Background()
	patch := func() error {
		_, err := cms.Patch(ctx, "a", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
		return err
	}
	calls := []struct {
		name    string
		fail    error
		call    func() error
		wantErr bool
		method  string // what the server sees, "" for nothing
	}{
		{"patch while held", nil, patch, false, http.MethodPatch},
		{"patch once expired", expired, patch, true, ""},
		{"delete once expired", expired, func() error { return cms.Delete(ctx, "a", metav1.DeleteOptions{}) }, true, ""},
		{"get once expired", expired, func() error { _, err := cms.Get(ctx, "a", metav1.GetOptions{}); return err }, false, http.MethodGet},
	}
	for _, c := range calls {
		mu.Lock()
		seen = nil
		mu.Unlock()
		fail = c.fail
		err := c.call()
		var exp *ExpiredError
		if c.wantErr != (err != nil) || c.wantErr && !errors.As(err, &exp) {
			t.Fatalf("%s: error %v, want the fence's error: %v", c.name, err, c.wantErr)
		}
		mu.Lock()
		got := seen
		mu.Unlock()
		if c.method == "" && len(got) != 0 || c.method != "" && (len(got) != 1 || got[0] != c.method) {
			t.Fatalf("%s: server saw %v, want %q", c.name, got, c.method)
		}
	}
}
