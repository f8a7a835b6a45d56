package chaos

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// observer watches a namespace from outside the operator: when each object went, and every Job
// created (a Job name seen with two UIDs was created twice).
type observer struct {
	mu      sync.Mutex
	goneAt  map[string]time.Time
	jobUIDs map[string]map[types.UID]bool
}

func observe(ctx context.Context, ns string) *observer {
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	o := &observer{goneAt: map[string]time.Time{}, jobUIDs: map[string]map[types.UID]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	_, err = f.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				o.mu.Lock()
				o.goneAt[cm.Name] = time.Now()
				o.mu.Unlock()
			}
		},
	})
	Expect(err).NotTo(HaveOccurred())
	_, err = f.Batch().V1().Jobs().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			job := obj.(*batchv1.Job)
			o.mu.Lock()
			if o.jobUIDs[job.Name] == nil {
				o.jobUIDs[job.Name] = map[types.UID]bool{}
			}
			o.jobUIDs[job.Name][job.UID] = true
			o.mu.Unlock()
		},
	})
	Expect(err).NotTo(HaveOccurred())
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return o
}

// gone returns when the named object went, if it did.
func (o *observer) gone(name string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.goneAt[name]
	return t, ok
}

// jobsCreatedTwice returns the Job names seen with more than one UID.
func (o *observer) jobsCreatedTwice() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for name, uids := range o.jobUIDs {
		if len(uids) > 1 {
			out = append(out, name)
		}
	}
	return out
}

// jobs counts the Job names seen.
func (o *observer) jobs() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.jobUIDs)
}
