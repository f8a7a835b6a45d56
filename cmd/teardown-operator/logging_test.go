package main

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/teardown-dev/teardown-operator/engine"
)

// TestAuditLineNeverSampled logs 1,000 teardowns that end, and as many other lines, within a
// second: in production mode every audit line is written, and the others are sampled as before.
func TestAuditLineNeverSampled(t *testing.T) {
	for _, devel := range []bool{false, true} {
		var out bytes.Buffer
		log := newLogger(zap.Options{Development: devel, DestWriter: &out}).WithName("teardownrun").WithValues("controller", "target")
		for i := range 1000 {
			log.Info(engine.AuditMessage, "phase", "Succeeded", "i", i)
			log.Info("teardown started", "i", i)
		}
		audit, other := strings.Count(out.String(), engine.AuditMessage), strings.Count(out.String(), "teardown started")
		if audit != 1000 {
			t.Errorf("development %v: %d of 1000 audit lines written", devel, audit)
		}
		if devel && other != 1000 || !devel && (other < 100 || other > 200) {
			t.Errorf("development %v: %d of 1000 other lines written; want all in development mode, about 110 sampled in production", devel, other)
		}
		if !devel && !strings.Contains(out.String(), `"controller":"target"`) {
			t.Errorf("the audit line lost the logger's values: %.300s", out.String())
		}
	}
}

// TestLoggerValuesChained: values added by chained WithValues (as controller-runtime adds them on
// every reconcile) are written, in order, with each line of either core, and not with a line of
// a parent logger.
func TestLoggerValuesChained(t *testing.T) {
	var out bytes.Buffer
	base := newLogger(zap.Options{DestWriter: &out})
	child := base.WithValues("controller", "target").WithValues("reconcileID", "r-1")
	child.V(1).Info("not written: below the level")
	child.Info("teardown started")
	child.Info(engine.AuditMessage, "phase", "Succeeded")
	base.Info("parent")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %d:\n%s", len(lines), out.String())
	}
	for _, line := range lines[:2] {
		if !strings.Contains(line, `"controller":"target","reconcileID":"r-1"`) {
			t.Errorf("line lost the logger's values: %s", line)
		}
	}
	if strings.Contains(lines[2], "reconcileID") {
		t.Errorf("the parent logger's line has its child's values: %s", lines[2])
	}
}
