package main

import (
	"context"

	"github.com/go-logr/logr"
)

// releasedLeaseLogger is the manager's logger, but for the one error line controller-runtime
// writes on every clean stop with leader election: the operator releases its lease when it stops
// (LeaderElectionReleaseOnCancel), client-go then calls OnStoppedLeading, and the manager reports
// "leader election lost" after its stop began, as an error (kubernetes-sigs/controller-runtime
// #3535). A lease given up on purpose is not lost: once stopping has begun, that line is logged
// as what it is, at info level. A lease lost while running still fails the manager as before.
func releasedLeaseLogger(ctx context.Context, base logr.Logger) logr.Logger {
	return logr.New(releasedLeaseSink{LogSink: base.GetSink(), stopping: ctx})
}

// Words of controller-runtime's manager (pkg/manager/internal.go, v0.25).
const (
	afterStopMessage = "error received after stop sequence was engaged"
	leaseLostError   = "leader election lost"
)

type releasedLeaseSink struct {
	logr.LogSink
	stopping context.Context
}

func (s releasedLeaseSink) Error(err error, msg string, keysAndValues ...any) {
	if msg == afterStopMessage && err != nil && err.Error() == leaseLostError && s.stopping.Err() != nil {
		s.LogSink.Info(0, "released the leader election lease on shutdown", keysAndValues...)
		return
	}
	s.LogSink.Error(err, msg, keysAndValues...)
}

func (s releasedLeaseSink) WithValues(keysAndValues ...any) logr.LogSink {
	return releasedLeaseSink{LogSink: s.LogSink.WithValues(keysAndValues...), stopping: s.stopping}
}

func (s releasedLeaseSink) WithName(name string) logr.LogSink {
	return releasedLeaseSink{LogSink: s.LogSink.WithName(name), stopping: s.stopping}
}
