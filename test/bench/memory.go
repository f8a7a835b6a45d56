package main

import (
	"context"
	"fmt"
	"time"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// protectAgain measures memory with every finished run retained: after the teardown it creates
// as many new targets as it deleted, spread over the namespaces alike, and waits until n are
// protected again, then reads the contender's RSS and its peak over the whole benchmark.
func (b *bench) protectAgain(ctx context.Context, r *result) error {
	if b.proc == nil || b.o.namespace {
		return nil
	}
	retained := 0
	if b.contender.policy != nil {
		var runs v1alpha1.TeardownRunList
		if err := b.c.List(ctx, &runs); err != nil { // the runs are in the targets' namespaces
			return err
		}
		retained = len(runs.Items)
	}
	if err := b.createProtected(ctx, b.o.n, b.o.deletes); err != nil {
		return fmt.Errorf("protecting objects again: %w", err)
	}
	time.Sleep(2 * time.Second) // let the recount and the caches settle
	r.rssRetained, r.peak = b.proc.rss(), b.proc.peak()
	pid := b.proc.cmd.Process.Pid
	fmt.Printf("  memory with %d protected objects and %d retained runs: RSS %s (anonymous %s, pages of the binary and files %s), peak RSS over the benchmark %s\n",
		b.o.n, retained, mib(r.rssRetained), mib(procStatus(pid, "RssAnon")), mib(procStatus(pid, "RssFile")), mib(r.peak))
	return nil
}
