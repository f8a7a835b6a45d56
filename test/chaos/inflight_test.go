package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// Changes in flight, as Acto makes them: the policy and its targets are edited while teardowns
// run, in a random order drawn from a seed. The oracle: a teardown runs the pipeline the policy
// had when its deletion began (its run keeps a copy), whatever is edited after; a deletion after
// an edit the operator has seen runs the new pipeline; an object relabelled out of the selector
// before its deletion is released and goes without a teardown; deleting the namespace tears down
// every object left with the pipeline of then.

// inflightEdits are the changes a sequence draws from, besides deletions.
var inflightEdits = []string{"url", "add", "remove", "reorder", "relabel", "touch", "recreate"}

type inflight struct {
	ns   string
	srv  *flakyServer
	spec []v1alpha1.Step // the policy's steps now
	gen  int             // bumped by every url edit: the URLs carry it
	// expected is, for each object deleted while it matched, the http calls (paths, in order)
	// the pipeline of its deletion makes; unmatched holds those relabelled out before.
	expected  map[string][]string
	unmatched map[string]bool
	next      int // the next object to delete
	objects   int
	added     int // steps added so far, to name the next
	// version is each object's data.v, which the URLs carry (its snapshot's, for a teardown);
	// touches counts the edits of objects' data.
	version map[string]string
	touches int
	// namespaceDeleted: the sequence ended with the namespace's deletion.
	namespaceDeleted bool
}

var _ = Describe("Changes in flight", func() {
	It("run every teardown with the pipeline of its deletion, and every later one with the new", func(ctx SpecContext) {
		seed, sequences := seedFromEnv("INFLIGHT_SEED"), sizeFromEnv("INFLIGHT_SEQUENCES", 20)
		r := rand.New(rand.NewPCG(seed, 2))
		srv, flags := steadyServer()
		op := startOperator(flags...)
		DeferCleanup(func() { op.stop() })
		op.waitLeading(time.Minute)
		var applied []string
		for i := range sequences {
			f := &inflight{ns: fmt.Sprintf("if-%s-%d", runID(), i), srv: srv, objects: 8, expected: map[string][]string{},
				unmatched: map[string]bool{}, version: map[string]string{}}
			f.deploy(ctx)
			var seq []string
			for f.next < f.objects {
				action := "delete"
				switch n := r.IntN(24); {
				case n == 0:
					action = "namespace" // ends the sequence
				case n < 12:
					action = inflightEdits[r.IntN(len(inflightEdits))]
				}
				seq = append(seq, action)
				By(fmt.Sprintf("sequence %d of %d in %s, action %d: %s (INFLIGHT_SEED=%d)", i+1, sequences, f.ns, len(seq), action, seed))
				f.do(ctx, action, r)
			}
			f.check(ctx)
			applied = append(applied, strings.Join(seq, " "))
		}
		report := fmt.Sprintf("%d sequences (INFLIGHT_SEED=%d) of 8 deletions and edits: every oracle held", sequences, seed)
		GinkgoWriter.Println(report + "\n" + strings.Join(applied, "\n"))
		AddReportEntry("changes in flight", report)
	})
})

// deploy creates the namespace, the policy (notify, a wait, done) and the objects.
func (f *inflight) deploy(ctx context.Context) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}})).To(Succeed())
	f.spec = []v1alpha1.Step{f.post("notify"), framework.WaitStep("settle", 3*time.Second), f.post("done")}
	f.createPolicy(ctx)
	for i := range f.objects {
		o := framework.ConfigMap(f.ns, fmt.Sprintf("o-%d", i), map[string]string{"app": "cf"})
		o.Data = map[string]string{"v": "0"}
		f.version[o.Name] = "0"
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
	for i := range f.objects {
		Eventually(probeFinalizers(ctx, f.object(i)), time.Minute, 100*time.Millisecond).Should(ContainElement("teardownpolicy.teardown.dev/cf"))
	}
}

func (f *inflight) post(step string) v1alpha1.Step {
	return v1alpha1.Step{Name: step, HTTP: &v1alpha1.HTTPStep{Method: "POST",
		URL: fmt.Sprintf("%s/%s/g%d/%s/${object.metadata.name}/${object.data.v}", f.srv.srv.URL, f.ns, f.gen, step)}}
}

func (f *inflight) object(i int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: fmt.Sprintf("o-%d", i)}}
}

func (f *inflight) createPolicy(ctx context.Context) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, framework.NamespacedPolicy(f.ns, "cf", f.spec...))).To(Succeed())
	f.awaitObserved(ctx)
}

// awaitObserved waits until the operator has compiled the policy's current generation: a
// deletion from then on gets it.
func (f *inflight) awaitObserved(ctx context.Context) {
	GinkgoHelper()
	p := &v1alpha1.TeardownPolicy{}
	Eventually(func() bool {
		return k8s.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "cf"}, p) == nil && p.Status.ObservedGeneration == p.Generation
	}, time.Minute, 50*time.Millisecond).Should(BeTrue(), "the operator did not observe the policy's generation")
}

// awaitStarted waits until the operator has taken up obj's teardown: its run is recorded, or
// (a pipeline done in its first pass, which records none) the object is gone. The pipeline is
// fixed from then on; an edit before that point may still apply to it.
func (f *inflight) awaitStarted(ctx context.Context, obj *corev1.ConfigMap) {
	GinkgoHelper()
	Eventually(func() bool {
		var runs v1alpha1.TeardownRunList
		_ = k8s.List(ctx, &runs, client.InNamespace(f.ns))
		for _, r := range runs.Items {
			if r.Spec.Target.Name == obj.Name {
				return true
			}
		}
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), &corev1.ConfigMap{}))
	}, time.Minute, 50*time.Millisecond).Should(BeTrue(), "the teardown of %s did not start", obj.Name)
}

// calls is what the current pipeline calls for object name, in order.
func (f *inflight) calls(name string) []string {
	var out []string
	for _, s := range f.spec {
		if s.HTTP != nil {
			u := strings.NewReplacer("${object.metadata.name}", name, "${object.data.v}", f.version[name]).Replace(s.HTTP.URL)
			out = append(out, strings.TrimPrefix(u, f.srv.srv.URL))
		}
	}
	return out
}

// do applies one action of a sequence.
func (f *inflight) do(ctx context.Context, action string, r *rand.Rand) {
	GinkgoHelper()
	switch action {
	case "delete":
		obj := f.object(f.next)
		if !f.unmatched[obj.Name] {
			f.expected[obj.Name] = f.calls(obj.Name)
		}
		Expect(k8s.Delete(ctx, obj)).To(Succeed())
		f.next++
		if !f.unmatched[obj.Name] {
			f.awaitStarted(ctx, obj)
		}
		return
	case "relabel":
		// An object not deleted yet leaves the selector: released, its deletion runs nothing. One
		// being torn down keeps its teardown (its run holds the pipeline).
		i := r.IntN(f.objects)
		obj := f.object(i)
		err := k8s.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"app":"elsewhere"}}}`)))
		Expect(client.IgnoreNotFound(err)).To(Succeed())
		if err == nil && i >= f.next {
			f.unmatched[obj.Name] = true
			Eventually(probeFinalizers(ctx, obj), time.Minute, 50*time.Millisecond).ShouldNot(ContainElement("teardownpolicy.teardown.dev/cf"),
				"%s was relabelled out of the selector but not released", obj.Name)
		}
		return
	case "touch":
		// The object's data changes: one not deleted yet is torn down with the new data later;
		// a teardown in flight keeps reading the snapshot its run took.
		i := r.IntN(f.objects)
		obj := f.object(i)
		f.touches++
		v := strconv.Itoa(f.touches)
		err := k8s.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", []byte(`{"data":{"v":"`+v+`"}}`)))
		Expect(client.IgnoreNotFound(err)).To(Succeed())
		if err == nil && i >= f.next {
			f.version[obj.Name] = v
		}
		return
	case "recreate":
		f.recreate(ctx)
		return
	case "namespace":
		// Every object left is deleted with it, and torn down with the pipeline of now; those
		// deleted before finish theirs.
		for ; f.next < f.objects; f.next++ {
			if name := f.object(f.next).Name; !f.unmatched[name] {
				f.expected[name] = f.calls(name)
			}
		}
		f.namespaceDeleted = true
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}})).To(Succeed())
		return
	}
	f.edit(action, r)
	p := &v1alpha1.TeardownPolicy{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "cf"}, p)).To(Succeed())
	p.Spec.Pipeline.Steps = f.spec
	Expect(k8s.Update(ctx, p)).To(Succeed())
	f.awaitObserved(ctx)
}

// edit changes f.spec: the URLs, a step added or removed, two steps swapped.
func (f *inflight) edit(action string, r *rand.Rand) {
	switch action {
	case "url":
		f.gen++
		for i, s := range f.spec {
			if s.HTTP != nil {
				f.spec[i] = f.post(s.Name)
			}
		}
	case "add":
		f.added++
		f.spec = append(f.spec, f.post(fmt.Sprintf("extra%d", f.added)))
	case "remove":
		if len(f.spec) > 1 {
			i := r.IntN(len(f.spec))
			f.spec = slices.Delete(slices.Clone(f.spec), i, i+1)
		}
	case "reorder":
		i, j := r.IntN(len(f.spec)), r.IntN(len(f.spec))
		f.spec = slices.Clone(f.spec)
		f.spec[i], f.spec[j] = f.spec[j], f.spec[i]
	}
}

// recreate deletes the policy and creates it again once it is gone: teardowns in flight finish
// first (the policy waits for them), and the objects left are armed again.
func (f *inflight) recreate(ctx context.Context) {
	GinkgoHelper()
	p := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cf"}}
	Expect(k8s.Delete(ctx, p)).To(Succeed())
	Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)) }, 2*time.Minute, 100*time.Millisecond).
		Should(BeTrue(), "the policy was not let go")
	f.createPolicy(ctx)
	for i := f.next; i < f.objects; i++ {
		if obj := f.object(i); !f.unmatched[obj.Name] {
			Eventually(probeFinalizers(ctx, obj), time.Minute, 100*time.Millisecond).Should(ContainElement("teardownpolicy.teardown.dev/cf"))
		}
	}
}

// check waits until every object is gone, then holds each to its oracle: the calls of the
// pipeline its deletion began with, each once, in order; none for an object deleted unmatched.
func (f *inflight) check(ctx context.Context) {
	GinkgoHelper()
	if f.namespaceDeleted {
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: f.ns}, &corev1.Namespace{}))
		},
			3*time.Minute, 500*time.Millisecond).Should(BeTrue(), "the namespace did not go")
	}
	Eventually(func() int {
		var list corev1.ConfigMapList
		_ = k8s.List(ctx, &list, client.InNamespace(f.ns), client.HasLabels{"app"})
		return len(list.Items)
	}, 2*time.Minute, 200*time.Millisecond).Should(BeZero(), "objects left")
	requests := f.srv.snapshot()
	var problems []string
	for i := range f.objects {
		name := f.object(i).Name
		type call struct {
			path string
			at   time.Time
		}
		var calls []call
		for path, rs := range requests {
			if strings.HasPrefix(path, "/"+f.ns+"/") && strings.Contains(path, "/"+name+"/") {
				for _, r := range rs {
					calls = append(calls, call{path, r.at})
				}
			}
		}
		slices.SortFunc(calls, func(a, b call) int { return a.at.Compare(b.at) })
		var got []string
		for _, c := range calls {
			got = append(got, c.path)
		}
		if want := f.expected[name]; !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("%s: called %v, want %v (the pipeline when its deletion began)", name, got, want))
		}
	}
	Expect(problems).To(BeEmpty())
}
