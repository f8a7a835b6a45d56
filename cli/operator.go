package cli

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// operatorState is what the operator's leader election lease says of it: whether a replica holds
// the lease now (and so acts), and since when it does or nobody has.
type operatorState struct {
	// Known is false when the lease cannot tell: there is none (the operator never ran with leader
	// election in that namespace, or runs without it) or it cannot be read; Why says which.
	Known bool
	Why   string
	// Held: a replica, Holder, renewed the lease within its duration.
	Held   bool
	Holder string
	// Since is when the holder took the lease, or when the lease was last renewed by a replica
	// that no longer holds it: the moment from which nobody acted.
	Since time.Time
	// Renewed is when the lease was last renewed.
	Renewed time.Time
	// Lease is the lease's namespace/name, for messages.
	Lease string
}

// operator reads the operator's lease in the run namespace (--run-namespace: the operator keeps
// its lease there unless told otherwise) and says whether a replica holds it, now.
func (k *kube) operator(ctx context.Context) operatorState {
	return leaseState(ctx, k.client, k.runNamespace, time.Now())
}

// leaseState reads the lease namespace/LeaderElectionLease and judges it at now. A lease whose
// renewal is older than its duration is free: a standby would take it.
func leaseState(ctx context.Context, c client.Reader, namespace string, now time.Time) operatorState {
	st := operatorState{Lease: namespace + "/" + v1alpha1.LeaderElectionLease}
	var lease coordinationv1.Lease
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v1alpha1.LeaderElectionLease}, &lease)
	switch {
	case apierrors.IsNotFound(err):
		st.Why = fmt.Sprintf("no lease %s: the operator has not run with leader election there (its --leader-election-namespace may be another: set --run-namespace), or runs without it", st.Lease)
		return st
	case err != nil:
		st.Why = fmt.Sprintf("cannot read lease %s: %s", st.Lease, oneLine(err.Error()))
		return st
	}
	return judgeLease(&lease, now)
}

// judgeLease says whether lease is held at now.
func judgeLease(lease *coordinationv1.Lease, now time.Time) operatorState {
	st := operatorState{Known: true, Lease: lease.Namespace + "/" + lease.Name}
	spec := lease.Spec
	if spec.RenewTime != nil {
		st.Renewed = spec.RenewTime.Time
	} else if spec.AcquireTime != nil {
		st.Renewed = spec.AcquireTime.Time
	}
	holder := ""
	if spec.HolderIdentity != nil {
		holder = *spec.HolderIdentity
	}
	duration := time.Duration(0)
	if spec.LeaseDurationSeconds != nil {
		duration = time.Duration(*spec.LeaseDurationSeconds) * time.Second
	}
	st.Holder = holder
	st.Held = holder != "" && !st.Renewed.IsZero() && now.Before(st.Renewed.Add(duration))
	st.Since = st.Renewed
	if st.Held && spec.AcquireTime != nil {
		st.Since = spec.AcquireTime.Time
	}
	return st
}

// String is one line for people.
func (s operatorState) String() string {
	switch {
	case !s.Known:
		return "operator: unknown (" + s.Why + ")"
	case s.Held:
		return fmt.Sprintf("operator: running (replica %s holds lease %s, renewed %s ago)", s.Holder, s.Lease, age(time.Since(s.Renewed)))
	case s.Renewed.IsZero():
		return fmt.Sprintf("operator: not running (no replica has ever renewed lease %s)", s.Lease)
	}
	return fmt.Sprintf("operator: NOT RUNNING: no replica has held lease %s since %s (%s ago); no teardown runs until it is back, and only policies ProtectedFromCreation arm new objects meanwhile",
		s.Lease, s.Since.UTC().Format(time.RFC3339), age(time.Since(s.Since)))
}

// down reports whether the lease says for sure that no replica acts.
func (s operatorState) down() bool { return s.Known && !s.Held }
