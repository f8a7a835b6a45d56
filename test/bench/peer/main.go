// Command peer is the benchmark's yardstick: a controller written by hand in the textbook pattern
// (controller-runtime, controllerutil.AddFinalizer/RemoveFinalizer with Update, 16 workers) that
// holds every ConfigMap labelled app=bench with a finalizer and, once it is deleted, releases it at
// once. It is what a team writes instead of teardown-operator, doing no teardown work, so the
// benchmark measures what the operator costs beyond it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

const finalizer = "peer.example.com/cleanup"

// reconciler adds the finalizer to live objects and removes it from deleted ones.
type reconciler struct{ client.Client }

func (r reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.DeletionTimestamp.IsZero() {
		if controllerutil.AddFinalizer(&cm, finalizer) {
			return ctrl.Result{}, r.Update(ctx, &cm)
		}
		return ctrl.Result{}, nil
	}
	// The teardown work would be done here.
	if controllerutil.RemoveFinalizer(&cm, finalizer) {
		return ctrl.Result{}, r.Update(ctx, &cm)
	}
	return ctrl.Result{}, nil
}

func main() {
	// controller-runtime registers --kubeconfig; ctrl.GetConfig reads it.
	workers := flag.Int("workers", 16, "concurrent reconciles")
	flag.Parse()
	if err := run(*workers); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
}

func run(workers int) error {
	cfg, err := ctrl.GetConfig() // client-side rate limiting off: the API server's fairness rules
	if err != nil {
		return err
	}
	selected := labels.SelectorFromSet(labels.Set{"app": "bench"})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics: server.Options{BindAddress: "0"},
		Cache:   cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Label: selected}}},
	})
	if err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(reconciler{mgr.GetClient()})
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
