package ownwrites

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestVersionsUpdate(t *testing.T) {
	w := NewVersions[types.NamespacedName]()
	key := types.NamespacedName{Namespace: "ns", Name: "run"}
	w.Set(key, Unknown)
	w.Forget(key) // the cache let the run go before the write's response came
	w.Update(key, "9")
	if w.Known(key) {
		t.Error("a response brought back a run the cache let go")
	}
	w.Set(key, Unknown)
	w.Update(key, "9")
	if w.Stale(key, "9") || !w.Stale(key, "8") {
		t.Error("the write's version is not the one expected")
	}
}
