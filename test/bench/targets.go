package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// namespaceOf is target i's namespace: the targets are dealt to the namespaces in turn, so that
// the first m of them are spread over all the namespaces evenly.
func (b *bench) namespaceOf(i int) string { return b.namespaces[i%len(b.namespaces)] }

// key is target i's namespace/name, as the deletion watch records it.
func (b *bench) key(i int) string {
	return types.NamespacedName{Namespace: b.namespaceOf(i), Name: name(i)}.String()
}

// keys are the keys of the targets the teardown deletes: the first -delete.
func (b *bench) keys() []string {
	keys := make([]string, b.o.deletes)
	for i := range keys {
		keys[i] = b.key(i)
	}
	return keys
}

// describeTargets says how many targets there are, where, and how many the teardown deletes.
func describeTargets(o options) string {
	s := fmt.Sprintf("%d targets", o.n)
	if o.namespaces > 1 {
		s += fmt.Sprintf(" in %d namespaces", o.namespaces)
	}
	if o.deletes < o.n {
		s += fmt.Sprintf(", %d of them deleted (teardown figures per deleted target)", o.deletes)
	}
	return s
}

// arm creates the targets' namespaces (and with -step resource the ServiceAccount the steps act
// as), has the contender protect their targets, and waits until it is ready to, so that neither
// its start nor its policy's is timed as protecting.
func (b *bench) arm(ctx context.Context) error {
	if err := b.makeNamespaces(ctx); err != nil {
		return err
	}
	if b.o.step == stepResource {
		// On every contender's cluster, the peer's too, so that all hold the same objects.
		if err := b.makeRecorder(ctx); err != nil {
			return fmt.Errorf("creating the ServiceAccount %s and its RBAC: %w", recorderName, err)
		}
	}
	if err := b.contender.arm(ctx, b.c, b.namespaces, b.policySteps()); err != nil {
		return err
	}
	if b.contender.ready == nil {
		return nil
	}
	if err := waitFor(ctx, time.Minute, func() (bool, error) { return b.contender.ready(ctx, b.c, b.namespaces) }); err != nil {
		return fmt.Errorf("waiting for the policy to be Ready: %w", err)
	}
	return nil
}

// makeNamespaces creates the targets' namespaces: one, bench-<time>, or -namespaces of them,
// bench-<time>-<k>.
func (b *bench) makeNamespaces(ctx context.Context) error {
	base := fmt.Sprintf("bench-%d", time.Now().Unix())
	b.namespaces = []string{base}
	if b.o.namespaces > 1 {
		b.namespaces = make([]string, b.o.namespaces)
		for k := range b.namespaces {
			b.namespaces[k] = fmt.Sprintf("%s-%d", base, k)
		}
	}
	for _, ns := range b.namespaces {
		if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: benchNamespace}}); err != nil {
			return err
		}
	}
	return nil
}

// protect creates the targets and waits until the contender protects them all.
func (b *bench) protect(ctx context.Context) (time.Duration, error) {
	where := b.namespaces[0]
	if len(b.namespaces) > 1 {
		where = fmt.Sprintf("%d namespaces (%s to %s)", len(b.namespaces), where, b.namespaces[len(b.namespaces)-1])
	}
	fmt.Printf("creating %d ConfigMaps in %s\n", b.o.n, where)
	start := time.Now()
	b.creates = make([]time.Duration, b.o.n)
	err := b.createProtected(ctx, 0, b.o.n)
	return time.Since(start), err
}

// createLatency is the p50 and p99 of the first targets' create requests, the p99 of those after
// the first -parallel (the creates that meet an admission policy the API server has not compiled
// yet wait for it), and how many returned the object armed.
func (b *bench) createLatency() (p50, p99, p99After time.Duration, armed int) {
	lat := slices.Clone(b.creates)
	if len(lat) == 0 {
		return 0, 0, 0, 0
	}
	after := slices.Clone(lat[min(b.o.parallel, len(lat)-1):])
	slices.Sort(lat)
	slices.Sort(after)
	return pct(lat, 50), pct(lat, 99), pct(after, 99), int(b.armedAtCreate.Load())
}

// createProtected creates count targets numbered from first, and waits until the contender
// protects n objects in all.
func (b *bench) createProtected(ctx context.Context, first, count int) error {
	if err := forEach(ctx, count, b.o.parallel, func(i int) error {
		obj := newTarget(b.contender.name, b.namespaceOf(first+i), first+i)
		began := time.Now()
		err := b.c.Create(ctx, obj)
		if first == 0 && err == nil {
			b.creates[i] = time.Since(began)
			if len(obj.GetFinalizers()) > 0 && b.contender.name != contenderRaw {
				b.armedAtCreate.Add(1)
			}
		}
		return err
	}); err != nil {
		return fmt.Errorf("creating ConfigMaps: %w", err)
	}
	have := 0
	// 10 ms a target, 10 minutes at least: contenders protect a few hundred targets a second on
	// 2 cores, most of them while they are being created.
	if err := waitEvery(ctx, scaledLimit(b.o.n, 10*time.Millisecond), listEvery(b.o.n), func() (bool, error) {
		var err error
		have, err = b.contender.protected(ctx, b.c, b.namespaces)
		return have == b.o.n, err
	}); err != nil {
		return fmt.Errorf("waiting for %d protected objects (have %d): %w", b.o.n, have, err)
	}
	return nil
}
