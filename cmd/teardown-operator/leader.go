package main

import (
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/fence"
)

// Leader election, controller-runtime's defaults spelled out: the fence refuses side effects
// once the lease was last renewed more than renewDeadline ago, before a standby can take over
// (leaseDuration after it last saw the lease renewed).
const (
	leaderElectionID = v1alpha1.LeaderElectionLease
	leaseDuration    = 15 * time.Second
	renewDeadline    = 10 * time.Second
	retryPeriod      = 2 * time.Second
)

// leaderLock returns the lease lock, fenced, as controller-runtime would build it.
func leaderLock(cfg *rest.Config, namespace string) (*fence.Lock, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	id := host + "_" + string(uuid.NewUUID())
	// A copy: rest.AddUserAgent edits the config it is given, and a timeout on the manager's
	// config would also cut every informer's watch after it (client-go applies it to watches).
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	// One hung request must not cost the lease.
	cfg.Timeout = renewDeadline / 2
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	coord, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, leaderElectionID, core, coord,
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	return fence.New(lock, renewDeadline), nil
}

// leaderOptions sets the manager's leader election: with a fenced lock, and a client whose
// writes the fence refuses once the lease may be lost. Without leader election, nothing is fenced.
func leaderOptions(opts *ctrl.Options, cfg *rest.Config, o *options) (*fence.Lock, error) {
	opts.LeaderElection = o.leaderElect
	if !o.leaderElect {
		return nil, nil
	}
	lock, err := leaderLock(cfg, o.leaderNS)
	if err != nil {
		return nil, err
	}
	ld, rd, rp := leaseDuration, renewDeadline, retryPeriod
	opts.LeaderElectionID, opts.LeaderElectionNamespace = leaderElectionID, o.leaderNS
	opts.LeaderElectionResourceLockInterface = lock
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &ld, &rd, &rp
	opts.LeaderElectionReleaseOnCancel = true
	opts.NewClient = func(cfg *rest.Config, co client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, co)
		if err != nil {
			return nil, err
		}
		return lock.Client(c), nil
	}
	return lock, nil
}
