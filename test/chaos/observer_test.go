package chaos

import (
	"context"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// observer watches a namespace from outside the operator: when each object went, and every Job
// and ConfigMap created (a name seen with two UIDs was created twice).
type observer struct {
	mu     sync.Mutex
	goneAt map[string]time.Time
	// uids holds the UIDs seen of each object, by "jobs/<name>" or "configmaps/<name>".
	uids map[string]map[types.UID]bool
}

func observe(ctx context.Context, ns string) *observer {
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	o := &observer{goneAt: map[string]time.Time{}, uids: map[string]map[types.UID]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	_, err = f.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { o.seen("configmaps", obj.(*corev1.ConfigMap).ObjectMeta) },
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
		AddFunc: func(obj any) { o.seen("jobs", obj.(*batchv1.Job).ObjectMeta) },
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

func (o *observer) seen(resource string, m metav1.ObjectMeta) {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := resource + "/" + m.Name
	if o.uids[key] == nil {
		o.uids[key] = map[types.UID]bool{}
	}
	o.uids[key][m.UID] = true
}

// jobsCreatedTwice returns the Job names seen with more than one UID.
func (o *observer) jobsCreatedTwice() []string {
	var out []string
	for _, name := range o.createdTwice() {
		if job, ok := strings.CutPrefix(name, "jobs/"); ok {
			out = append(out, job)
		}
	}
	return out
}

// createdTwice returns the Jobs and ConfigMaps ("jobs/<name>", "configmaps/<name>") seen with
// more than one UID.
func (o *observer) createdTwice() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for key, uids := range o.uids {
		if len(uids) > 1 {
			out = append(out, key)
		}
	}
	return out
}

// jobs counts the Job names seen.
func (o *observer) jobs() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for key := range o.uids {
		if strings.HasPrefix(key, "jobs/") {
			n++
		}
	}
	return n
}
