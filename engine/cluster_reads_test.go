package engine

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// The run cache's lookups find a target's runs and a policy's runs through the indexes the engine
// adds to the run informer, and follow a run that changes or goes.
func TestRunsByIndex(t *testing.T) {
	run := func(name, uid string, ref v1alpha1.PolicyReference) *v1alpha1.TeardownRun {
		return &v1alpha1.TeardownRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: v1alpha1.TeardownRunSpec{Target: v1alpha1.TargetObjectReference{UID: types.UID(uid)}, PolicyRef: ref}}
	}
	db := v1alpha1.PolicyReference{Kind: policy.KindNamespaced, Namespace: "ns", Name: "db"}
	all := v1alpha1.PolicyReference{Kind: policy.KindCluster, Name: "db"} // same name, other kind
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, runIndexers)
	for _, r := range []*v1alpha1.TeardownRun{run("a1", "uid-a", db), run("a2", "uid-a", all), run("b1", "uid-b", db)} {
		if err := indexer.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	reads := clusterReads{runs: indexer}
	names := func(runs []v1alpha1.TeardownRun) []string {
		var out []string
		for _, r := range runs {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out
	}
	ctx := context.Background()
	if got := names(reads.runsOfTarget(ctx, "uid-a")); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Errorf("runs of target uid-a = %v, want [a1 a2]", got)
	}
	if got := reads.runsOfTarget(ctx, "uid-none"); len(got) != 0 {
		t.Errorf("runs of a target without runs = %v, want none", names(got))
	}
	got, err := reads.runsOfPolicy(ctx, policy.KeyOf(db))
	if err != nil || !slices.Equal(names(got), []string{"a1", "b1"}) {
		t.Errorf("runs of policy %s = %v, %v; want [a1 b1]", policy.KeyOf(db), names(got), err)
	}
	if got, _ := reads.runsOfPolicy(ctx, policy.KeyOf(all)); !slices.Equal(names(got), []string{"a2"}) {
		t.Errorf("runs of the cluster policy of the same name = %v, want [a2]", names(got))
	}
	// A run retargeted in the cache (as an update would show it) moves between index values, and a
	// deleted run leaves them.
	if err := indexer.Update(run("b1", "uid-a", db)); err != nil {
		t.Fatal(err)
	}
	if err := indexer.Delete(run("a1", "uid-a", db)); err != nil {
		t.Fatal(err)
	}
	if got := names(reads.runsOfTarget(ctx, "uid-a")); !slices.Equal(got, []string{"a2", "b1"}) {
		t.Errorf("after an update and a delete, runs of uid-a = %v, want [a2 b1]", got)
	}
	if got := reads.runsOfTarget(ctx, "uid-b"); len(got) != 0 {
		t.Errorf("after the update, runs of uid-b = %v, want none", names(got))
	}
	// The lookups hand out copies of the run structs: a caller's change to one does not reach
	// the cache (the objects they point into are the cache's own, read only).
	got = reads.runsOfTarget(ctx, "uid-a")
	got[0].Name = "changed"
	if again := names(reads.runsOfTarget(ctx, "uid-a")); !slices.Equal(again, []string{"a2", "b1"}) {
		t.Errorf("after a caller renamed its copy, runs of uid-a = %v, want [a2 b1]", again)
	}
	if _, err := runIndexers[indexTargetUID]("not a run"); err == nil {
		t.Error("indexing a string as a run: no error")
	}
}
