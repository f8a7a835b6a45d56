package main

import (
	"context"
	"errors"
	"slices"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/teardown-dev/teardown-operator/engine"
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

// newLogger is controller-runtime's logger as the zap flags configure it, but for the audit line
// (engine.AuditMessage), logged once per teardown that ends: it is never sampled. In production
// mode controller-runtime samples each message (the first 100 a second, then one in 100), which
// in a mass deletion dropped most of those lines, the one record of a teardown that leaves no run.
func newLogger(o zap.Options) logr.Logger {
	var unsampled zapcore.Core
	o.ZapOpts = append(slices.Clip(o.ZapOpts), uberzap.WrapCore(func(c zapcore.Core) zapcore.Core {
		unsampled = c // the core before controller-runtime's sampler wraps it
		return c
	}))
	raw := zap.NewRaw(zap.UseFlagOptions(&o))
	raw = raw.WithOptions(uberzap.WrapCore(func(sampled zapcore.Core) zapcore.Core {
		return auditCore{sampled: sampled, audit: unsampled}
	}))
	return zapr.NewLogger(raw)
}

// auditCore sends the audit line to the unsampled core, and everything else to the sampled one.
// The fields of With are kept, and encoded only for an entry that is written: controller-runtime
// adds values to its logger for every reconcile (the object, a reconcile ID), and zap's cores
// encode them at once, which took 6% of the operator's CPU in a namespace deletion, mostly for
// reconciles that log nothing (zap's own lazy core encodes them once a second With is chained).
type auditCore struct {
	sampled, audit zapcore.Core
	fields         []zapcore.Field
}

func (c auditCore) With(fields []zapcore.Field) zapcore.Core {
	c.fields = append(slices.Clip(c.fields), fields...)
	return c
}

func (c auditCore) Enabled(l zapcore.Level) bool { return c.sampled.Enabled(l) }

// route picks the core an entry goes to, with the logger's fields.
func (c auditCore) route(e zapcore.Entry) zapcore.Core {
	core := c.sampled
	if e.Message == engine.AuditMessage {
		core = c.audit
	}
	if len(c.fields) == 0 {
		return core
	}
	return core.With(c.fields)
}

func (c auditCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.Enabled(e.Level) {
		return ce
	}
	return c.route(e).Check(e, ce)
}

func (c auditCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.route(e).Write(e, fields)
}

func (c auditCore) Sync() error {
	return errors.Join(c.sampled.Sync(), c.audit.Sync())
}
