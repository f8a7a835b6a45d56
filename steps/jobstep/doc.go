// Package jobstep implements the job step: each attempt creates one Kubernetes Job from the
// step's template and waits, without holding a worker, for it to complete or fail.
//
// A Job's name is fixed by the run, the step and the attempt (naming.JobName), and the step
// records the UID of the Job it created. A create repeated after a crash meets the Job it made
// (AlreadyExists) and adopts it when its labels name this run, step and attempt; a same-named Job
// made by anyone else, or a Job that replaced the recorded one, is never taken for the step's.
//
// Jobs carry the v1alpha1.LabelRun* labels, and the engine watches labelled Jobs, so a Job's change
// executes its run at once; the step looks again on an interval only as a safety net.
//
// A finished Job is kept while the run needs it: the step first records the outcome (with the
// failure reason and the tail of the failed pod's log) in the run's status, and only then sets
// the Job's ttlSecondsAfterFinished, so the Job controller deletes it after that time. A step that
// ends without a result of its own (its timeout, the pipeline's, break glass) deletes a Job still
// running, so no teardown work goes on behind the pipeline's back.
//
// A TeardownPolicy runs Jobs only in its own namespace, where any of its service accounts may be
// used: who may write a TeardownPolicy may run Jobs in its namespace through the operator. When
// that namespace is being deleted nothing can be created there, and the step fails at once saying
// so; a ClusterTeardownPolicy can run its Jobs in a namespace of its choosing instead.
package jobstep
