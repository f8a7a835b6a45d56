package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

const holdFinalizer = "bench.teardown.dev/hold"

// releaseMethod is one way to take the last finalizer off a terminating object.
type releaseMethod struct {
	name    string
	release func(ctx context.Context, cm *corev1.ConfigMap) error
}

// releaseMethods are the ways a controller can release an object: the operator's JSON patch
// through the metadata client, merge and strategic merge patches locked by resourceVersion, and
// the peer's Update of the whole object.
func (b *bench) releaseMethods() ([]releaseMethod, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", b.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = -1
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	patch := func(pt types.PatchType, body func(cm *corev1.ConfigMap) any) func(context.Context, *corev1.ConfigMap) error {
		return func(ctx context.Context, cm *corev1.ConfigMap) error {
			data, err := json.Marshal(body(cm))
			if err != nil {
				return err
			}
			_, err = mc.Resource(cms).Namespace(cm.Namespace).Patch(ctx, cm.Name, pt, data, metav1.PatchOptions{FieldManager: "bench"})
			return err
		}
	}
	locked := func(cm *corev1.ConfigMap) any {
		return map[string]any{"metadata": map[string]any{"uid": cm.UID, "resourceVersion": cm.ResourceVersion, "finalizers": []string{}}}
	}
	return []releaseMethod{
		{"JSON patch, tests uid and position (operator)", patch(types.JSONPatchType, func(cm *corev1.ConfigMap) any {
			return []map[string]any{
				{"op": "test", "path": "/metadata/uid", "value": cm.UID},
				{"op": "test", "path": "/metadata/finalizers/0", "value": holdFinalizer},
				{"op": "remove", "path": "/metadata/finalizers/0"},
			}
		})},
		{"merge patch, uid and resourceVersion", patch(types.MergePatchType, locked)},
		{"strategic merge patch, uid and resourceVersion", patch(types.StrategicMergePatchType, func(cm *corev1.ConfigMap) any {
			// finalizers merge in a strategic merge patch: removing one takes a directive
			return map[string]any{"metadata": map[string]any{"uid": cm.UID, "resourceVersion": cm.ResourceVersion,
				"$deleteFromPrimitiveList/finalizers": []string{holdFinalizer}}}
		})},
		{"Update of the whole object (peer)", func(ctx context.Context, cm *corev1.ConfigMap) error {
			cm.Finalizers = nil
			return b.c.Update(ctx, cm, client.FieldOwner("bench"))
		}},
	}, nil
}

// releaseCost creates N terminating ConfigMaps held by a finalizer for each release method, then
// releases them that way and reports the CPU the API server and etcd spent per release, the
// methods in a rotated order.
func releaseCost(ctx context.Context, b *bench, pids map[string]int) error {
	methods, err := b.releaseMethods()
	if err != nil {
		return err
	}
	o := b.o
	fmt.Printf("\ncontrol-plane CPU per release of a terminating ConfigMap, %d of each, %d at a time\n", o.n, o.parallel)
	fmt.Printf("%-48s %10s %14s %10s\n", "release", "releases/s", "kube-apiserver", "etcd")
	// The rows of one run move together with the cluster's state, so each run starts at another
	// method: over runs, none is always measured first.
	first := rand.IntN(len(methods))
	for i := range methods {
		k := (first + i) % len(methods)
		m := methods[k]
		ns := fmt.Sprintf("release-%d", k)
		held, err := b.terminatingConfigMaps(ctx, ns)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		api0, etcd0 := cpuOf(pids["kube-apiserver"]), cpuOf(pids["etcd"])
		start := time.Now()
		if err := forEach(ctx, o.n, o.parallel, func(i int) error { return m.release(ctx, held[i]) }); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		took := time.Since(start)
		left := &corev1.ConfigMapList{}
		if err := b.c.List(ctx, left, client.InNamespace(ns), client.MatchingLabels{"app": "bench"}); err != nil {
			return err
		}
		if len(left.Items) > 0 {
			first := left.Items[0]
			return fmt.Errorf("%s: %d of %d objects were not released, %s among them (finalizers %v, deleted %v)",
				m.name, len(left.Items), o.n, first.Name, first.Finalizers, first.DeletionTimestamp)
		}
		per := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", d.Seconds()*1000/float64(o.n)) }
		fmt.Printf("%-48s %10.0f %14s %10s\n", m.name, float64(o.n)/took.Seconds(),
			per(cpuOf(pids["kube-apiserver"])-api0), per(cpuOf(pids["etcd"])-etcd0))
	}
	return nil
}

// terminatingConfigMaps creates N ConfigMaps like the benchmark's targets in namespace ns, held
// by a finalizer, deletes them, and returns them as they are once terminating.
func (b *bench) terminatingConfigMaps(ctx context.Context, ns string) ([]*corev1.ConfigMap, error) {
	if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, err
	}
	held := make([]*corev1.ConfigMap, b.o.n)
	err := forEach(ctx, b.o.n, b.o.parallel, func(i int) error {
		cm := framework.ConfigMap(ns, name(i), map[string]string{"app": "bench"})
		cm.Finalizers = []string{holdFinalizer}
		if err := b.c.Create(ctx, cm); err != nil {
			return err
		}
		if err := b.c.Delete(ctx, cm); err != nil {
			return err
		}
		held[i] = &corev1.ConfigMap{}
		return b.c.Get(ctx, client.ObjectKeyFromObject(cm), held[i])
	})
	// Let the garbage collector and the namespace's watchers see the deletes before measuring.
	time.Sleep(2 * time.Second)
	return held, err
}
