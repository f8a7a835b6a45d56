package engine

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// retentionSweeper deletes released runs (v1alpha1.LabelReleased) once --run-retention has passed
// since they completed. Such runs are records only and are not cached, so nothing else looks at
// them again: every sweep lists them from the API server, a page at a time.
type retentionSweeper struct {
	client    client.Client
	reader    client.Reader
	retention time.Duration
}

// sweepPage is how many released runs one list request returns.
const sweepPage = 500

// interval is how often the sweeper looks: a tenth of the retention, between a second and ten
// minutes, so that a run goes at most that long after its time.
func (s *retentionSweeper) interval() time.Duration {
	return min(max(s.retention/10, time.Second), 10*time.Minute)
}

// Start implements manager.Runnable.
func (s *retentionSweeper) Start(ctx context.Context) error {
	t := time.NewTicker(s.interval())
	defer t.Stop()
	for {
		if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			ctrl.Log.WithName("retention").Info("cannot delete expired runs yet; trying again", "error", err.Error(), "retryIn", s.interval())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader deletes.
func (s *retentionSweeper) NeedLeaderElection() bool { return true }

// sweep deletes every released run past its retention.
func (s *retentionSweeper) sweep(ctx context.Context) error {
	opts := []client.ListOption{client.HasLabels{v1alpha1.LabelReleased}, client.Limit(sweepPage)}
	for cont := ""; ; {
		var page v1alpha1.TeardownRunList
		if err := s.reader.List(ctx, &page, append(opts, client.Continue(cont))...); err != nil {
			return err
		}
		for i := range page.Items {
			run := &page.Items[i]
			// The label alone can be anyone's who may patch runs: a run is a record to delete
			// only if its status (the operator's) says it released its object.
			if releasedRecord(run) && expired(run, s.retention) {
				pre := client.Preconditions{UID: &run.UID}
				if err := s.client.Delete(ctx, run, pre); client.IgnoreNotFound(err) != nil {
					return err
				}
			}
		}
		if cont = page.Continue; cont == "" {
			return nil
		}
	}
}

// expired reports whether a finished run's retention has passed.
func expired(run *v1alpha1.TeardownRun, retention time.Duration) bool {
	done := run.Status.CompletionTime
	return run.DeletionTimestamp == nil && done != nil && time.Since(done.Time) >= retention
}
