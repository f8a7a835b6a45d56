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
	tests := []struct {
		name    string
		res     reconcile.Result
		err     error
		want    reconcile.Result
		wantErr error
	}{
		{"a conflict is a quick requeue", reconcile.Result{}, conflict, reconcile.Result{RequeueAfter: conflictRetry}, nil},
		{"a wrapped conflict too", reconcile.Result{}, fmt.Errorf("writing status: %w", conflict), reconcile.Result{RequeueAfter: conflictRetry}, nil},
		{"other errors pass", reconcile.Result{}, other, reconcile.Result{}, other},
		{"results pass", reconcile.Result{RequeueAfter: time.Minute}, nil, reconcile.Result{RequeueAfter: time.Minute}, nil},
	}
	for _, tt := range tests {
		r := requeueConflicts[string](reconcile.TypedFunc[string](func(context.Context, string) (reconcile.Result, error) { return tt.res, tt.err }))
		got, err := r.Reconcile(context.Background(), "x")
		if got != tt.want || !errors.Is(err, tt.wantErr) && err != tt.wantErr {
			t.Errorf("%s: got %v, %v; want %v, %v", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}
