package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

func TestPlanStart(t *testing.T) {
	for name, tc := range map[string]struct {
		facts startFacts
		want  startPlan
	}{
		"OnFailure, metadata only: from the cache, in the object's namespace": {
			startFacts{TargetNamespace: "shop", RunNamespace: "teardown-system"},
			startPlan{FromCache: true, Namespace: "shop"}},
		"a policy that reads the object first": {
			startFacts{ReadsTargetFirst: true, TargetNamespace: "shop", RunNamespace: "teardown-system"},
			startPlan{Namespace: "shop"}},
		"break glass is attributed from the live object": {
			startFacts{BreakGlass: true, TargetNamespace: "shop", RunNamespace: "teardown-system"},
			startPlan{Namespace: "shop"}},
		"a cluster-scoped object's run goes to the run namespace": {
			startFacts{ReadsTargetFirst: true, RunNamespace: "teardown-system"},
			startPlan{Namespace: "teardown-system"}},
		"nothing is created in a namespace being deleted": {
			startFacts{ReadsTargetFirst: true, TargetNamespace: "shop", NamespaceTerminating: true, RunNamespace: "teardown-system"},
			startPlan{Namespace: "teardown-system", Moved: true}},
		"a deletion a predecessor may have handled: the object read, its run looked for first": {
			startFacts{Inherited: true, TargetNamespace: "shop", RunNamespace: "teardown-system"},
			startPlan{Namespace: "shop", Resume: true}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, planStart(tc.facts)); diff != "" {
				t.Errorf("planStart (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanRecord(t *testing.T) {
	retain, release := v1alpha1.FailurePolicyRetain, v1alpha1.FailurePolicyRelease
	for name, tc := range map[string]struct {
		facts recordFacts
		want  recordPlan
	}{
		"All, succeeded at once: a record from the start, released, the policy's series counts it": {
			recordFacts{Phase: v1alpha1.RunSucceeded, RecordsEveryRun: true, CleanSuccess: true},
			recordPlan{Record: true, LabelReleased: true, ReleaseNow: true, EventsOn: eventsOnPolicy}},
		"All from the cache, succeeded at once: no read, the record's create rules a repeat out": {
			recordFacts{Phase: v1alpha1.RunSucceeded, RecordsEveryRun: true, CleanSuccess: true, FromCache: true},
			recordPlan{Record: true, LabelReleased: true, ReleaseNow: true, EventsOn: eventsOnPolicy}},
		"All from the cache, succeeded past a failed step: no read, one event on the object": {
			recordFacts{Phase: v1alpha1.RunSucceeded, RecordsEveryRun: true, FromCache: true},
			recordPlan{Record: true, LabelReleased: true, ReleaseNow: true, EventsOn: eventsOnTarget}},
		"All from the cache, goes on: its snapshot read before the record": {
			recordFacts{Phase: v1alpha1.RunRunning, RecordsEveryRun: true, FromCache: true},
			recordPlan{Record: true, ReadSnapshot: true, HoldFinalizer: true, EventsOn: eventsOnRunAndTarget}},
		"OnFailure from the cache, failed at once under Release: its snapshot read (no earlier record rules a repeat out)": {
			recordFacts{Phase: v1alpha1.RunFailed, FailurePolicy: v1alpha1.FailurePolicyRelease, FromCache: true},
			recordPlan{Record: true, ReadSnapshot: true, LabelReleased: true, ReleaseNow: true, EventsOn: eventsOnRunAndTarget}},
		"OnFailure, a clean success at once: no run, events on the policy": {
			recordFacts{Phase: v1alpha1.RunSucceeded, CleanSuccess: true, FromCache: true},
			recordPlan{LabelReleased: true, ReleaseNow: true, EventsOn: eventsOnPolicy}},
		"OnFailure, succeeded past a failed step (onFailure Continue): recorded, its snapshot read": {
			recordFacts{Phase: v1alpha1.RunSucceeded, FromCache: true},
			recordPlan{Record: true, ReadSnapshot: true, LabelReleased: true, ReleaseNow: true, EventsOn: eventsOnTarget}},
		"goes on past its first pass: recorded, holding its finalizer": {
			recordFacts{Phase: v1alpha1.RunRunning, RecordsEveryRun: true},
			recordPlan{Record: true, HoldFinalizer: true, EventsOn: eventsOnRunAndTarget}},
		"OnFailure from the cache, goes on: its snapshot read before the record": {
			recordFacts{Phase: v1alpha1.RunRunning, FromCache: true},
			recordPlan{Record: true, ReadSnapshot: true, HoldFinalizer: true, EventsOn: eventsOnRunAndTarget}},
		"failed at once under Retain: a teardown still owed holds its finalizer, the object stays": {
			recordFacts{Phase: v1alpha1.RunFailed, FailurePolicy: retain, RecordsEveryRun: true},
			recordPlan{Record: true, HoldFinalizer: true, EventsOn: eventsOnRunAndTarget}},
		"failed at once under Release: released, a record": {
			recordFacts{Phase: v1alpha1.RunFailed, FailurePolicy: release, RecordsEveryRun: true},
			recordPlan{Record: true, LabelReleased: true, ReleaseNow: true, EventsOn: eventsOnRunAndTarget}},
		"two-phase, succeeded at once: the run controller deletes the object once its veto is lifted": {
			recordFacts{Phase: v1alpha1.RunSucceeded, RecordsEveryRun: true, TwoPhase: true, CleanSuccess: true},
			recordPlan{Record: true, HoldFinalizer: true, EventsOn: eventsOnTarget}},
		"two-phase, abandoned at once: released, no delete": {
			recordFacts{Phase: v1alpha1.RunAbandoned, RecordsEveryRun: true, TwoPhase: true},
			recordPlan{Record: true, LabelReleased: true, ReleaseNow: true, EventsOn: eventsOnRunAndTarget}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, planRecord(tc.facts)); diff != "" {
				t.Errorf("planRecord (-want +got):\n%s", diff)
			}
		})
	}
}

// A run without its status yet is left to its deletion's first pass for unwrittenGrace after its
// creation; one with a status, or older, is passed at once.
func TestUnwrittenWait(t *testing.T) {
	created := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	run := &v1alpha1.TeardownRun{}
	run.CreationTimestamp = metav1.NewTime(created)
	for _, tc := range []struct {
		phase v1alpha1.RunPhase
		after time.Duration
		want  time.Duration
	}{
		{"", time.Second, unwrittenGrace - time.Second},
		{"", unwrittenGrace + time.Second, 0},
		{v1alpha1.RunRunning, time.Second, 0},
	} {
		run.Status.Phase = tc.phase
		if got := unwrittenWait(run, created.Add(tc.after)); got != tc.want {
			t.Errorf("phase %q, %s after its creation: wait %s, want %s", tc.phase, tc.after, got, tc.want)
		}
	}
}
