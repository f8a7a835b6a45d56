// Package engine is teardown-operator's generic controller. Three reconcilers share one registry of
// compiled policies:
//
//   - the policy reconciler compiles each TeardownPolicy and ClusterTeardownPolicy, reports problems
//     in its status, starts the metadata watch on its target kind and, when it is deleted, releases
//     its targets once its in-flight runs are done;
//   - the target reconciler keeps each object's teardown finalizers in line with the policies that
//     select it and, once the object is being deleted, creates its TeardownRun;
//   - the run reconciler advances a run's pipeline one bounded action at a time, persisting every
//     deadline and next-check time in the run status, and finally removes the finalizer.
//
// Each file is named by the reconciler that owns it (policy_*, target_*, run_*) or by its role;
// the dynamic informers' events reach each concern through the handler it registers (router.go).
// docs/development.md has a map, and the path of one deletion.
//
// Nothing here blocks a worker: every wait is a requeue whose due time is in the run status, so a
// restarted operator resumes where the last one stopped. Side effects are at-least-once: a crash
// between an action and the status write repeats the action, which step kinds make harmless
// (deterministic names, idempotency keys).
package engine
