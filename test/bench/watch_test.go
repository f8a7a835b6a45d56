package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// scriptedWatches hands out the given watchers in turn and records the options of each Watch.
type scriptedWatches struct {
	client.WithWatch
	mu       sync.Mutex
	watchers []*watch.FakeWatcher
	versions []string
}

func (s *scriptedWatches) Watch(_ context.Context, _ client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo := &client.ListOptions{}
	for _, o := range opts {
		o.ApplyToList(lo)
	}
	rv := ""
	if lo.Raw != nil {
		rv = lo.Raw.ResourceVersion
	}
	s.versions = append(s.versions, rv)
	if len(s.watchers) == 0 {
		// The API server is gone (as when the cluster is stopped).
		return nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	}
	w := s.watchers[0]
	s.watchers = s.watchers[1:]
	return w, nil
}

func (s *scriptedWatches) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.versions...)
}

func meta(name, rv string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// testKeys are the keys of n targets in namespace ns.
func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = types.NamespacedName{Namespace: "ns", Name: name(i)}.String()
	}
	return keys
}

func TestDeletionsSurviveClosedWatches(t *testing.T) {
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	// Only target-00003 is still there when the targets are listed again; the other ConfigMap is
	// not a target.
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name(3), Labels: targetLabels}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}}).Build()
	ws := []*watch.FakeWatcher{watch.NewFake(), watch.NewFake(), watch.NewFake()}
	c := &scriptedWatches{WithWatch: base, watchers: append([]*watch.FakeWatcher(nil), ws...)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := watchDeletions(ctx, c, testKeys(4))
	if err != nil {
		t.Fatal(err)
	}
	// First watch: one deletion, then the server closes it: resume at its resourceVersion.
	ws[0].Delete(meta(name(0), "10"))
	ws[0].Stop()
	// Second watch: that version is too old: re-list, which finds targets 1 and 2 gone.
	ws[1].Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	ws[1].Stop()
	// Third watch, from the list: the last deletion.
	ws[2].Delete(meta(name(3), "30"))

	gone, err := d.wait(ctx, 4)
	if err != nil {
		t.Fatalf("waiting: %v (seen %v)", err, d.snapshot())
	}
	if len(gone) != 4 {
		t.Errorf("gone = %v", gone)
	}
	restarts, inferred := d.resumed()
	if len(restarts) != 2 || inferred != 2 {
		t.Errorf("restarts %v, inferred %d; want 2 restarts and 2 inferred", restarts, inferred)
	}
	if v := c.calls(); len(v) != 3 || v[0] != "" || v[1] != "10" {
		t.Errorf("watches started at resourceVersions %q, want \"\", \"10\", then the list's", v)
	}
}

// A successful run stops the watch before it stops the cluster: the watch must then end at once
// and quietly, not see its connection closed and try to resume it against an API server that is
// gone ("restarting it failed: connection refused").
func TestDeletionsStopBeforeTheAPIServerGoes(t *testing.T) {
	w := watch.NewFake()
	c := &scriptedWatches{watchers: []*watch.FakeWatcher{w}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := watchDeletions(ctx, c, testKeys(1))
	if err != nil {
		t.Fatal(err)
	}
	w.Delete(meta(name(0), "10"))
	if _, err := d.wait(ctx, 1); err != nil {
		t.Fatal(err)
	}

	stopped := make(chan struct{})
	go func() { d.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return while the watch was open")
	}
	d.stop() // a second stop (deferred in run) is harmless

	w.Stop() // the API server goes away, closing the watch
	time.Sleep(100 * time.Millisecond)
	if v := c.calls(); len(v) != 1 {
		t.Errorf("watches started at resourceVersions %q: the stopped watch was resumed", v)
	}
	if restarts, _ := d.resumed(); len(restarts) != 0 {
		t.Errorf("restarts after stop: %v", restarts)
	}
}

// A watch the API server closes while it cannot be reached is retried until stopped, and stop
// ends the retries without reporting the cancellation as a failure.
func TestDeletionsStopWhileResuming(t *testing.T) {
	w := watch.NewFake()
	c := &scriptedWatches{watchers: []*watch.FakeWatcher{w}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := watchDeletions(ctx, c, testKeys(1))
	if err != nil {
		t.Fatal(err)
	}
	w.Delete(meta(name(0), "10"))
	w.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for len(c.calls()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	d.stop()
	restarts, _ := d.resumed()
	if len(restarts) == 0 {
		t.Fatal("the failed resume was not reported")
	}
	for _, r := range restarts {
		if !strings.Contains(r.text, "connection refused") {
			t.Errorf("restart %q: want only the connection failures, not the cancellation", r.text)
		}
	}
}
