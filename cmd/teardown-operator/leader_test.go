package main

import (
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The lease client's short timeout must stay on its own copy of the config: on the manager's,
// client-go would cut every informer's watch after it and fail every slower request.
func TestLeaderOptionsLeaveTheManagerConfig(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", UserAgent: "teardown-operator"}
	var mo ctrl.Options
	lock, err := leaderOptions(&mo, cfg, &options{leaderElect: true, leaderNS: "teardown-system"})
	if err != nil {
		t.Fatal(err)
	}
	if lock == nil || mo.LeaderElectionResourceLockInterface == nil {
		t.Fatal("leader election is on, but no lock was set")
	}
	if cfg.Timeout != 0 || cfg.UserAgent != "teardown-operator" {
		t.Errorf("the manager's config was changed: timeout %s, user agent %q", cfg.Timeout, cfg.UserAgent)
	}
}
