package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestRequeueConflicts(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("changed"))
	other := errors.New("boom")
	canceled := fmt.Errorf("writing status: Put \"https://...\": %w", context.Canceled)
	stopping, stop := context.WithCancel(context.Background())
	stop()
	tests := []struct {
		name    string
		ctx     context.Context
		res     reconcile.Result
		err     error
		want    reconcile.Result
		wantErr error
	}{
		{"a conflict is a quick requeue", nil, reconcile.Result{}, conflict, reconcile.Result{RequeueAfter: conflictRetry}, nil},
		{"a wrapped conflict too", nil, reconcile.Result{}, fmt.Errorf("writing status: %w", conflict), reconcile.Result{RequeueAfter: conflictRetry}, nil},
		{"other errors pass", nil, reconcile.Result{}, other, reconcile.Result{}, other},
		{"results pass", nil, reconcile.Result{RequeueAfter: time.Minute}, nil, reconcile.Result{RequeueAfter: time.Minute}, nil},
		{"a request cut short by the operator's stop is no error", stopping, reconcile.Result{}, canceled, reconcile.Result{}, nil},
		{"a cancellation while running is one", nil, reconcile.Result{}, canceled, reconcile.Result{}, canceled},
	}
	for _, tt := range tests {
		r := requeueConflicts[string](reconcile.TypedFunc[string](func(context.Context, string) (reconcile.Result, error) { return tt.res, tt.err }))
		ctx := tt.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		got, err := r.Reconcile(ctx, "x")
		if got != tt.want || !errors.Is(err, tt.wantErr) && err != tt.wantErr {
			t.Errorf("%s: got %v, %v; want %v, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}
