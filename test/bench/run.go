package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// bench is one contender's run: its cluster, clients, and what it measures.
type bench struct {
	o          options
	contender  contender
	kubeconfig string
	c          client.WithWatch
	cs         kubernetes.Interface
	proc       *process
	ep         *endpoint
	metrics    string
	namespaces []string       // the targets', target i in namespaces[i % len]
	pprof      string         // the operator's --pprof-bind-address, with -profile
	pids       map[string]int // the cluster's processes and the contender's, by name
	// creates are the durations of the first targets' create requests, and armedAtCreate how
	// many of them returned the object with a finalizer (armed by an admission policy).
	creates       []time.Duration
	armedAtCreate atomic.Int64
}

// runOne measures one contender on a fresh cluster of its own. Each round has its own cluster
// names: a cluster created again under the name of one just deleted can meet the old one's
// processes still shutting down (a client then saw the old CA on the new port).
func runOne(o options, con contender, round int) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cluster := o.cluster + "-" + con.name
	if round > 0 {
		cluster += fmt.Sprintf("-r%d", round+1)
	}
	kubeconfig, err := framework.StartCluster(o.root, cluster)
	if err != nil {
		return nil, err
	}
	if !o.keepCluster {
		defer func() {
			if err := framework.StopCluster(o.root, cluster); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	b := &bench{o: o, contender: con, kubeconfig: kubeconfig, pids: clusterPIDs(kwokDir(o, cluster))}
	if err := b.connect(ctx); err != nil {
		return nil, err
	}
	err = b.startContender()
	defer b.stop()
	if err != nil {
		return nil, err
	}
	r := &result{contender: con.name, rssIdle: -1, rssProtected: -1, peak: -1, rssRetained: -1}
	if err := b.arm(ctx); err != nil {
		return nil, err
	}
	if b.proc != nil {
		time.Sleep(2 * time.Second) // let its caches fill: its memory ready to protect, protecting nothing
		r.rssIdle = b.proc.rss()
	}
	if r.protect, err = b.protect(ctx); err != nil {
		return nil, err
	}
	r.createP50, r.createP99, r.createP99After, r.armedAtCreate = b.createLatency()
	if b.proc != nil {
		r.rssProtected = b.proc.rss()
	}
	if err := b.teardown(ctx, r); err != nil {
		return nil, err
	}
	return r, b.protectAgain(ctx, r)
}

func (b *bench) connect(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", b.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // the benchmark's own client must not be the bottleneck
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	if b.c, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := framework.InstallCRDs(ctx, b.c, filepath.Join(b.o.root, "config", "crd", "bases")); err != nil {
		return err
	}
	return client.IgnoreAlreadyExists(b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown-system"}}))
}

// startContender starts the contender's process, and what -step needs with it: the local server
// of the http steps, and a known metrics address for the operator's step-duration histogram.
func (b *bench) startContender() error {
	var modeArgs []string
	var err error
	if b.o.step != stepWait {
		if b.metrics, err = freeAddr(); err != nil {
			return err
		}
		modeArgs = []string{"--metrics-bind-address=" + b.metrics}
	}
	if b.o.step == stepHTTP || b.o.step == stepPipeline {
		if b.ep, err = startEndpoint(b.o.httpDelay); err != nil {
			return err
		}
		modeArgs = append(modeArgs, "--http-allowed-destinations="+b.ep.addr())
		fmt.Printf("http endpoint %s\n", b.ep.addr())
	}
	if b.contender.start == nil {
		return nil
	}
	if b.metrics != "" && b.contender.policy != nil {
		fmt.Printf("operator metrics %s\n", b.metrics)
	}
	if b.o.profile > 0 && b.contender.policy != nil {
		if b.pprof, err = freeAddr(); err != nil {
			return err
		}
		modeArgs = append(modeArgs, "--pprof-bind-address="+b.pprof)
	}
	b.proc, err = b.contender.start(b.o, b.kubeconfig, append(modeArgs, b.contender.args...))
	return err
}

func (b *bench) stop() {
	if b.proc != nil {
		b.proc.stop()
	}
	if b.ep != nil {
		b.ep.stop()
	}
}

// deleteTarget deletes target i; the raw floor then releases it itself.
func (b *bench) deleteTarget(ctx context.Context, i int) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.namespaceOf(i), Name: name(i)}}
	if err := b.c.Delete(ctx, cm); err != nil || b.contender.name != contenderRaw {
		return err
	}
	return b.c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
}

// deleteAll deletes the targets to delete at once, or their namespace with -namespace, noting when.
func (b *bench) deleteAll(ctx context.Context, deletedAt []time.Time) error {
	if b.o.namespace {
		now := time.Now()
		for i := range deletedAt {
			deletedAt[i] = now
		}
		return b.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.namespaces[0]}})
	}
	return forEach(ctx, len(deletedAt), b.o.parallel, func(i int) error {
		deletedAt[i] = time.Now()
		return b.deleteTarget(ctx, i)
	})
}

// waitNamespaceGone waits until the deleted namespace is gone. It looks every 100 ms: its reads
// count among the contender's.
func (b *bench) waitNamespaceGone(ctx context.Context) error {
	return waitEvery(ctx, b.o.timeout, 100*time.Millisecond, func() (bool, error) {
		err := b.c.Get(ctx, client.ObjectKey{Name: b.namespaces[0]}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// teardown deletes the targets to delete at once and measures until the last is gone.
func (b *bench) teardown(ctx context.Context, r *result) error {
	keys := b.keys()
	gone, err := watchDeletions(ctx, b.c, keys)
	if err != nil {
		return err
	}
	// Run before StopCluster: a watch that outlives the API server fails to resume.
	defer gone.stop()
	var cpuBefore time.Duration
	if b.proc != nil {
		cpuBefore = b.proc.cpu()
	}
	before, err := writeCounts(ctx, b.cs)
	if err != nil {
		return err
	}
	var prof *profiler
	if b.o.profile > 0 {
		prof = startProfile(ctx, b.cs, b.contender.name, b.pprof, filepath.Join(b.o.root, "bin"), b.o.profile)
	}
	deletedAt := make([]time.Time, len(keys))
	busyBefore, totalBefore := machineCPU()
	procsBefore := sampleCPU(b.processes())
	start := time.Now()
	if err := b.deleteAll(ctx, deletedAt); err != nil {
		diagnose(b.c, keys, gone.snapshot(), b.ep, b.metrics)
		return fmt.Errorf("deleting ConfigMaps: %w", err)
	}
	stopProgress := progress(b.o, gone, b.ep, start)
	goneAt, err := gone.wait(ctx, len(keys))
	stopProgress()
	if err != nil {
		diagnose(b.c, keys, goneAt, b.ep, b.metrics)
		return fmt.Errorf("waiting for %d targets to be gone (%d seen gone): %w", len(keys), len(goneAt), err)
	}
	gone.stop() // every target is gone: nothing more to watch for
	if b.o.namespace {
		if err := b.waitNamespaceGone(ctx); err != nil {
			return err
		}
	}
	r.total = time.Since(start)
	busy, total := machineCPU()
	r.machineBusy = float64(busy-busyBefore) / float64(total-totalBefore)
	r.procsBefore, r.procsAfter = procsBefore, sampleCPU(b.processes())
	reportRestarts(gone, start)
	if b.proc != nil {
		r.cpu = b.proc.cpu() - cpuBefore
	}
	if err := b.measure(ctx, r, before, keys, deletedAt, goneAt); err != nil {
		return err
	}
	if prof != nil {
		return prof.report(ctx)
	}
	return nil
}
