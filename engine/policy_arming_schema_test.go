package engine

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi"
)

// publishedPaths is an /openapi/v3 whose group-versions the test sets.
type publishedPaths struct {
	paths map[string]openapi.GroupVersion
	err   error
	reads int
}

func (p *publishedPaths) Paths() (map[string]openapi.GroupVersion, error) {
	p.reads++
	return p.paths, p.err
}

func TestSchemaGate(t *testing.T) {
	widget := schema.GroupVersionKind{Group: "example.teardown.dev", Version: "v1", Kind: "Widget"}
	pub := &publishedPaths{paths: map[string]openapi.GroupVersion{}}
	g := newSchemaGate(pub)
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }

	if wait, err := g.wait(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}); wait != 0 || err != nil || pub.reads != 0 {
		t.Errorf("a built-in kind: wait %s, %v, %d reads; want none", wait, err, pub.reads)
	}
	if wait, err := g.wait(widget); wait == 0 || err != nil {
		t.Errorf("a kind not published yet: wait %s, %v; want a wait", wait, err)
	}
	pub.paths["apis/example.teardown.dev/v1"] = nil
	if wait, _ := g.wait(widget); wait != schemaSettle {
		t.Errorf("just published: wait %s; want %s", wait, schemaSettle)
	}
	now = now.Add(4 * time.Second)
	if wait, _ := g.wait(widget); wait != schemaSettle-4*time.Second {
		t.Errorf("published 4 s ago: wait %s; want %s", wait, schemaSettle-4*time.Second)
	}
	now = now.Add(schemaSettle)
	if wait, _ := g.wait(widget); wait != 0 {
		t.Errorf("settled: wait %s; want none", wait)
	}
	delete(pub.paths, "apis/example.teardown.dev/v1") // the CRD deleted
	if wait, _ := g.wait(widget); wait == 0 {
		t.Error("a group-version no longer published: no wait")
	}
	pub.paths["apis/example.teardown.dev/v1"] = nil // and installed again
	if wait, _ := g.wait(widget); wait != schemaSettle {
		t.Errorf("published again: wait %s; want %s from then", wait, schemaSettle)
	}
	pub.err = errors.New("down")
	if _, err := g.wait(schema.GroupVersionKind{Group: "other.example", Version: "v1", Kind: "X"}); err == nil {
		t.Error("an /openapi/v3 that cannot be read: no error")
	}
}
