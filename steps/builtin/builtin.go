// Package builtin lists the step kinds teardown-operator ships, for the operator binary and for
// the test suites that run the engine.
package builtin

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/approval"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	"github.com/teardown-dev/teardown-operator/steps/jobstep"
	"github.com/teardown-dev/teardown-operator/steps/resource"
	"github.com/teardown-dev/teardown-operator/steps/wait"
)

// Options configure the built-in kinds. The operator sets HTTP and Job; the seams (Lister, Logs,
// and HTTP.Transport) let kubectl teardown test run the same kinds against a world of its own.
type Options struct {
	HTTP httpstep.Options
	Job  jobstep.Options
	// Lister lists what wait steps look up; nil lists from the API server (Deps.Reader).
	Lister wait.Lister
	// Logs reads the logs of failed Job pods; nil reads them from the API server (Deps.Config).
	Logs jobstep.LogReader
	// Resource is what resource steps act on; nil acts on the API server (Deps.Config), as the
	// ServiceAccounts the steps name.
	Resource resource.API
	// Approvals is where approval steps read and check their answers; nil reads them from the
	// operator's cache and asks the API server (Deps.Client, Deps.Reader).
	Approvals approval.Ledger
}

// Kinds returns a factory for every built-in step kind. It is the one list of step kinds: the
// operator, the integration suites and kubectl teardown test build theirs from it, and a test
// checks it against the CRD's rules that name them.
func Kinds(opts Options) []steps.Factory {
	return []steps.Factory{
		func(d steps.Deps) steps.Kind {
			lister := opts.Lister
			if lister == nil {
				lister = wait.NewAPILister(d.Reader, d.Mapper)
			}
			return wait.New(lister)
		},
		func(d steps.Deps) steps.Kind {
			h := opts.HTTP
			h.Fence = d.Fence
			return httpstep.New(d.Reader, d.Wake, h)
		},
		func(d steps.Deps) steps.Kind {
			logs := opts.Logs
			if logs == nil {
				var err error
				if logs, err = jobstep.NewLogReader(d.Config); err != nil {
					logs = noLogs{err}
				}
			}
			return jobstep.New(d.Client, d.Reader, logs, d.NamespaceTerminating, opts.Job)
		},
		func(d steps.Deps) steps.Kind {
			api := opts.Resource
			if api == nil {
				api = resource.NewDynamic(d.Config, d.Mapper, d.Fence)
			}
			return resource.New(api)
		},
		func(d steps.Deps) steps.Kind {
			ledger := opts.Approvals
			if ledger == nil {
				ledger = approval.NewAPILedger(d.Client, d.Reader)
			}
			return approval.New(ledger)
		},
	}
}

// CacheOptions are the manager's cache options the built-in kinds need: the engine watches the
// Jobs that job steps create, and only those (by their run label), not every Job in the cluster.
func CacheOptions() cache.Options {
	owned, err := labels.NewRequirement(v1alpha1.LabelRunUID, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&batchv1.Job{}: {Label: labels.NewSelector().Add(*owned)},
	}}
}

// noLogs stands in for a log reader that could not be built; the step says why there is no log.
type noLogs struct{ err error }

func (n noLogs) TailLog(context.Context, string, string, string, int64, int64) ([]byte, error) {
	return nil, fmt.Errorf("no log reader: %w", n.err)
}
