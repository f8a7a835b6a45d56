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
