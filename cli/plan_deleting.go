package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/internal/naming"
)

// planOperator is what the operator's lease says of it, in a plan.
type planOperator struct {
	// State is running, not running or unknown.
	State string `json:"state"`
	// Since is when the holder took the lease or, not running, when a replica last renewed it
	// (RFC 3339).
	Since   string `json:"since,omitempty"`
	Message string `json:"message"`
}

// planDeletion is the deletion an object is already in: who holds it and whether anyone acts.
type planDeletion struct {
	// Since is the object's deletionTimestamp (RFC 3339).
	Since string `json:"since"`
	// Finalizers are the teardown finalizers holding it; OtherFinalizers those of other
	// controllers.
	Finalizers      []string  `json:"finalizers"`
	OtherFinalizers []string  `json:"otherFinalizers,omitempty"`
	Runs            []planRun `json:"runs"`
	// Acting is false when nobody acts on the object's teardown: no run exists for it, or no
	// replica of the operator runs; Message then says what to do.
	Acting  bool   `json:"acting"`
	Message string `json:"message"`
	// Namespace is the object's, for the commands Message suggests.
	Namespace string `json:"-"`
}

// planRun is one run of the object.
type planRun struct {
	Name        string `json:"name"`
	Namespace   string `json:"namespace"`
	Phase       string `json:"phase"`
	CurrentStep string `json:"currentStep,omitempty"`
}

func operatorReport(st operatorState) planOperator {
	out := planOperator{State: "unknown", Message: st.String()}
	switch {
	case st.Held:
		out.State = "running"
	case st.down():
		out.State = "not running"
	}
	if !st.Since.IsZero() {
		out.Since = st.Since.UTC().Format(time.RFC3339)
	}
	return out
}

// deletion reports on an object already being deleted: since when, which teardown finalizers
// hold it, its runs, and whether anyone acts on them (nil when it is not being deleted).
func (r *root) deletion(ctx context.Context, arg string, t *target, op operatorState) *planDeletion {
	ts := t.Object.GetDeletionTimestamp()
	if ts == nil {
		return nil
	}
	d := &planDeletion{Since: ts.UTC().Format(time.RFC3339), Finalizers: []string{}, Runs: []planRun{}}
	for _, f := range t.Object.GetFinalizers() {
		if naming.IsOurs(f) {
			d.Finalizers = append(d.Finalizers, f)
		} else {
			d.OtherFinalizers = append(d.OtherFinalizers, f)
		}
	}
	runs, err := r.kube.runsOf(ctx, t.Object.GetUID(), t.Object.GetNamespace())
	ended := len(runs) > 0
	for _, run := range runs {
		d.Runs = append(d.Runs, planRun{Name: run.Name, Namespace: run.Namespace, Phase: string(run.Status.Phase), CurrentStep: run.Status.CurrentStep})
		ended = ended && run.Status.Phase.Finished()
	}
	d.Namespace = t.Object.GetNamespace()
	d.Acting, d.Message = judgeDeletion(withNamespace(arg, d.Namespace), d, len(runs) > 0 || err != nil, ended, op)
	if err != nil {
		d.Message = "cannot list its runs: " + oneLine(err.Error()) + "; " + d.Message
	}
	return d
}

// judgeDeletion says whether anyone acts on a deletion held by teardown finalizers, and what to
// do when nobody does. haveRuns is true when runs exist (or could not be listed), ended when
// they all ended (a Failed run keeps its object).
func judgeDeletion(arg string, d *planDeletion, haveRuns, ended bool, op operatorState) (bool, string) {
	breakGlass := fmt.Sprintf("to let it go without its teardown (break glass): kubectl teardown abandon %s --reason \"...\" (its runs are marked Abandoned), or kubectl teardown drain --policy %s (removes the finalizer, running nothing)", arg, drainPolicy(d.Finalizers, d.Namespace))
	switch {
	case len(d.Finalizers) == 0:
		return true, "no teardown finalizer holds it: its deletion waits for other controllers only"
	case op.down():
		// abandon needs the operator to act on the annotation: only drain works without it.
		return false, fmt.Sprintf("nobody acts on it: no replica of the operator has held its lease %s since %s, so no run starts or goes on; start the operator (scale its Deployment up); to let it go without its teardown while the operator is gone (break glass): kubectl teardown drain --policy %s (removes the finalizer, running nothing)",
			op.Lease, op.Since.UTC().Format(time.RFC3339), drainPolicy(d.Finalizers, d.Namespace))
	case !haveRuns && op.Known:
		return false, fmt.Sprintf("nobody acts on it: no run exists for it, though the operator runs; see the policies below (a policy deleted, not Ready or suspended starts none) and the operator's log; %s", breakGlass)
	case !haveRuns:
		return false, fmt.Sprintf("no run exists for it, and whether the operator runs is unknown (%s): if it does not, start it; %s", op.Why, breakGlass)
	case ended:
		return false, fmt.Sprintf("its runs have ended and keep it (a Failed run under failurePolicy Retain): fix the cause and kubectl teardown retry %s; %s", arg, breakGlass)
	}
	return true, "its runs carry its teardown: kubectl teardown status " + arg
}

// printDeletion writes the deletion an object is in, and the operator's state when it matters.
func printDeletion(w io.Writer, rep *planReport) {
	if rep.Operator.State == "not running" {
		fmt.Fprintf(w, "  %s\n", rep.Operator.Message)
	}
	d := rep.Deleting
	if d == nil {
		return
	}
	since, _ := time.Parse(time.RFC3339, d.Since)
	fmt.Fprintf(w, "  BEING DELETED since %s (%s ago), held by teardown finalizers: %s\n", d.Since, age(time.Since(since)), orNone(d.Finalizers))
	if len(d.OtherFinalizers) > 0 {
		fmt.Fprintf(w, "    and by other controllers' finalizers: %s\n", strings.Join(d.OtherFinalizers, ", "))
	}
	for _, run := range d.Runs {
		step := ""
		if run.CurrentStep != "" {
			step = ", step " + run.CurrentStep
		}
		fmt.Fprintf(w, "    run %s/%s: %s%s\n", run.Namespace, run.Name, phaseOrPending(run.Phase), step)
	}
	if len(d.Runs) == 0 && len(d.Finalizers) > 0 {
		fmt.Fprintf(w, "    no run exists for it\n")
	}
	fmt.Fprintf(w, "    %s\n", d.Message)
}

// drainPolicy names the policy of the first teardown finalizer as drain --policy takes it.
func drainPolicy(finalizers []string, namespace string) string {
	if len(finalizers) == 0 {
		return "POLICY"
	}
	prefix, name, _ := strings.Cut(finalizers[0], "/")
	if prefix == strings.ToLower(policy.KindCluster)+"."+naming.Domain {
		return policy.KindCluster + "/" + name
	}
	return withNamespace(policy.KindNamespaced+"/"+name, namespace)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func phaseOrPending(s string) string {
	if s == "" {
		return string(v1alpha1.RunPending)
	}
	return s
}
