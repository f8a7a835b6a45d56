package engine

import (
	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// How a deletion's run starts, decided with no I/O: facts in, plan out, as engine/pipeline decides
// a pass. run_start.go gathers the facts and carries the plan out.

// startFacts are what decides where a deletion's run goes and how it starts.
type startFacts struct {
	// ReadsTargetFirst: the policy records every run, is two-phase, or its expressions read more of
	// the object than the cached metadata holds (policy.Compiled.ReadsTargetFirst).
	ReadsTargetFirst bool
	// BreakGlass: the abandon annotation is set; who set it is in the managed fields, which only the
	// API server has.
	BreakGlass bool
	// TargetNamespace is the object's ("" for a cluster-scoped one), and NamespaceTerminating says
	// whether it is being deleted; RunNamespace is the operator's --run-namespace.
	TargetNamespace      string
	NamespaceTerminating bool
	RunNamespace         string
	// Inherited: the deletion began before this process led (leadership.predates). A predecessor
	// may have recorded its run, or run its pipeline and released the object, and the caches may
	// not show it (a first list served from the past).
	Inherited bool
}

// startPlan is where a run goes and what its first pass starts from.
type startPlan struct {
	// FromCache: the first pass starts from the cached metadata, and the whole object is read only
	// if the run is to be recorded (for its snapshot). Otherwise the object is read first.
	FromCache bool
	// Namespace is where the run is created: the object's, or the run namespace for a
	// cluster-scoped object or one whose namespace is being deleted (nothing can be created there).
	Namespace string
	// Moved: the run goes to the run namespace though the object has one; a run made there before
	// the namespace's deletion began may exist, and goes on.
	Moved bool
	// Resume: a predecessor's run is looked for in the API server before the first pass; if there
	// is one, it goes on instead.
	Resume bool
}

// planStart decides where a deletion's run goes and what it starts from.
func planStart(f startFacts) startPlan {
	p := startPlan{FromCache: !f.ReadsTargetFirst && !f.BreakGlass && !f.Inherited, Namespace: f.TargetNamespace, Resume: f.Inherited}
	if f.TargetNamespace == "" || f.NamespaceTerminating {
		p.Namespace, p.Moved = f.RunNamespace, f.TargetNamespace != ""
	}
	return p
}

// recordFacts are what decides, after its first pass, whether and how a run is recorded.
type recordFacts struct {
	// Phase is the run's phase after its first pass; FailurePolicy its pipeline's.
	Phase         v1alpha1.RunPhase
	FailurePolicy v1alpha1.FailurePolicy
	// RecordsEveryRun: runHistory All (or Always), or a two-phase policy (policy.Compiled.RecordsEveryRun).
	RecordsEveryRun bool
	TwoPhase        bool
	// CleanSuccess: it succeeded with no step failed (cleanSuccess).
	CleanSuccess bool
	// FromCache: the first pass started from the cached metadata (startPlan.FromCache).
	FromCache bool
}

// recordPlan is what becomes of a run after its first pass.
type recordPlan struct {
	// Record: the run is created (with its first pass's status, in one write). Otherwise the
	// teardown leaves no run: runHistory SkipImmediateSuccess and a clean success at once.
	Record bool
	// ReadSnapshot: before it is created, the whole object is read for its snapshot (the pass
	// started from the cache).
	ReadSnapshot bool
	// HoldFinalizer: the run carries its own finalizer (v1alpha1.FinalizerRun): it still owes
	// something: a pipeline in flight, an object to delete (two-phase), or a teardown that failed
	// and keeps its object, until it is retried to success or abandoned; deleting the run by hand
	// then loses nothing.
	HoldFinalizer bool
	// LabelReleased: the run is a record from the start (v1alpha1.LabelReleased), never cached.
	LabelReleased bool
	// ReleaseNow: the target's finalizer is removed right after the record (or at once, with no
	// record). A two-phase run that ended at once leaves its object's deletion to the run
	// controller: it waits for the veto to be lifted (deleteTarget).
	ReleaseNow bool
	// EventsOn says where the pass's events go.
	EventsOn eventPlace
}

// planRecord decides whether and how a run is recorded after its first pass.
func planRecord(f recordFacts) recordPlan {
	releases := f.Phase.Finished() && f.Phase.Releases(f.FailurePolicy)
	deletes := releases && f.TwoPhase && f.Phase != v1alpha1.RunAbandoned
	p := recordPlan{Record: f.RecordsEveryRun || !f.CleanSuccess, EventsOn: eventsOnRunAndTarget}
	p.HoldFinalizer = !f.Phase.Finished() || deletes || !releases
	p.LabelReleased = !p.HoldFinalizer && releases
	p.ReleaseNow = releases && !deletes
	// The audit mode's record of a pass that ended it: an earlier pass of the same deletion left
	// a record of that name, which the create runs into (AlreadyExists), so the live object need
	// not be read to rule a repeat out, and the cached metadata is the snapshot.
	auditRecord := f.RecordsEveryRun && !f.TwoPhase && p.LabelReleased
	p.ReadSnapshot = p.Record && f.FromCache && !auditRecord
	switch {
	case !p.Record, auditRecord && f.CleanSuccess:
		// No run, or a run that is itself the record: the policy's folded series counts it.
		p.EventsOn = eventsOnPolicy
	case f.Phase == v1alpha1.RunSucceeded:
		// The object goes at once and the run's status tells it all: one event, on the object,
		// naming the run.
		p.EventsOn = eventsOnTarget
	}
	return p
}
