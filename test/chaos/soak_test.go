package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// The soak's load: soakKinds custom kinds, soakPolicies policies spread over them, objects created
// and deleted at a steady rate.
const (
	soakKinds    = 10
	soakPolicies = 100
	soakGroup    = "soak.teardown.dev"
)

func soakGVK(i int) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: soakGroup, Version: "v1", Kind: fmt.Sprintf("Soak%d", i)}
}

// installSoakKinds creates the soak's CRDs: schemaless namespaced kinds Soak0..Soak9.
func installSoakKinds(ctx context.Context) {
	GinkgoHelper()
	for i := range soakKinds {
		gvk := soakGVK(i)
		plural := strings.ToLower(gvk.Kind) + "s"
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + "." + soakGroup},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: soakGroup, Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: gvk.Kind},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptrTo(true)}}}},
			},
		}
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, crd))).To(Succeed())
		Eventually(func() bool {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(crd), crd)
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true
				}
			}
			return false
		}, time.Minute, 200*time.Millisecond).Should(BeTrue())
	}
}

func ptrTo[T any](v T) *T { return &v }

// sample is one look at the operator during the soak.
type sample struct {
	at                   time.Duration
	rssMiB, heapMiB      float64
	goroutines, queueLen float64
	objects              int
}

// scrape reads the operator's memory (RSS and Go heap in use), goroutines and total workqueue
// depth from its metrics.
func scrape(addr string) (sample, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return sample{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return sample{}, err
	}
	value := func(name string) float64 {
		total := 0.0
		if f := families[name]; f != nil {
			for _, m := range f.GetMetric() {
				total += m.GetGauge().GetValue()
			}
		}
		return total
	}
	return sample{rssMiB: value("process_resident_memory_bytes") / (1 << 20), heapMiB: value("go_memstats_heap_inuse_bytes") / (1 << 20),
		goroutines: value("go_goroutines"), queueLen: value("workqueue_depth")}, nil
}

// freePort returns a loopback address no one listens on now.
func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

// churn creates objects of the soak kinds at rate per second, each selected by a random policy,
// and deletes each after life; it records when each deletion was asked.
type churn struct {
	mu        sync.Mutex
	deletedAt map[string]time.Time
	gvkOf     map[string]schema.GroupVersionKind
	created   int
}

func (c *churn) run(ctx context.Context, dyn dynamic.Interface, ns string, rate int, life, d time.Duration) {
	defer GinkgoRecover()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		p := rand.IntN(soakPolicies)
		gvk := soakGVK(p % soakKinds)
		name := fmt.Sprintf("o-%06d", i)
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetLabels(map[string]string{"soak-policy": fmt.Sprintf("p%03d", p)})
		gvr := gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind) + "s")
		if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			continue
		}
		c.mu.Lock()
		c.created++
		c.gvkOf[name] = gvk
		c.mu.Unlock()
		wg.Add(1)
		time.AfterFunc(life, func() {
			defer wg.Done()
			c.mu.Lock()
			c.deletedAt[name] = time.Now()
			c.mu.Unlock()
			_ = dyn.Resource(gvr).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	wg.Wait()
}

var _ = Describe("Soak", func() {
	It("holds steady under continuous churn: flat memory and goroutines, every run completes", func(ctx SpecContext) {
		d := sizeDuration("SOAK_DURATION", time.Minute)
		rate := sizeFromEnv("SOAK_RATE", 10)
		installSoakKinds(ctx)
		srv := newFlakyServer()
		srv.steady = true
		DeferCleanup(srv.srv.Close)
		metrics := freePort()
		// Supervised, as its Deployment would: a replica that misses its lease renewals (a
		// starved machine) exits, and the soak counts it.
		flags := []string{"--metrics-bind-address", metrics, "--http-allowed-destinations", strings.TrimPrefix(srv.srv.URL, "http://")}
		if addr := os.Getenv("SOAK_PPROF"); addr != "" {
			flags = append(flags, "--pprof-bind-address", addr) // for a heap profile by hand
		}
		sup := supervise(func() *operator { return startOperator(flags...) })
		DeferCleanup(sup.stop)
		sup.current().waitLeading(time.Minute)
		ns := "soak"
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
		for i := range soakPolicies {
			gvk := soakGVK(i % soakKinds)
			p := framework.NamespacedPolicy(ns, fmt.Sprintf("p%03d", i), framework.WaitStep("settle", time.Duration(i%3)*time.Second),
				v1alpha1.Step{Name: "notify", HTTP: &v1alpha1.HTTPStep{Method: "POST", URL: srv.srv.URL + "/" + ns + "/notify/${object.metadata.name}"}})
			p.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
			p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"soak-policy": p.Name}}
			Expect(k8s.Create(ctx, p)).To(Succeed())
		}

		dyn, err := dynamic.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		var goneMu sync.Mutex
		goneAt := map[string]time.Time{}
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
		for i := range soakKinds {
			gvk := soakGVK(i)
			inf := f.ForResource(gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind) + "s")).Informer()
			_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				if u, ok := obj.(*unstructured.Unstructured); ok {
					goneMu.Lock()
					goneAt[u.GetName()] = time.Now()
					goneMu.Unlock()
				}
			}})
			Expect(err).NotTo(HaveOccurred())
		}
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())

		By(fmt.Sprintf("churning %d objects a second, each deleted 5s after its creation, for %s", rate, d))
		c := &churn{deletedAt: map[string]time.Time{}, gvkOf: map[string]schema.GroupVersionKind{}}
		done := make(chan struct{})
		go func() { c.run(ctx, dyn, ns, rate, 5*time.Second, d); close(done) }()
		var samples []sample
		start, every := time.Now(), max(d/20, 5*time.Second)
		for running := true; running; {
			select {
			case <-done:
				running = false
			case <-time.After(every):
			}
			smp, err := scrape(metrics)
			if err != nil {
				continue // restarting
			}
			c.mu.Lock()
			smp.at, smp.objects = time.Since(start), c.created-len(c.deletedAt)
			c.mu.Unlock()
			samples = append(samples, smp)
		}
		Eventually(func() int {
			goneMu.Lock()
			defer goneMu.Unlock()
			c.mu.Lock()
			defer c.mu.Unlock()
			left := 0
			for name := range c.deletedAt {
				if _, ok := goneAt[name]; !ok {
					left++
				}
			}
			return left
		}, 3*time.Minute, time.Second).Should(BeZero(), "objects left after the churn stopped")

		var runs v1alpha1.TeardownRunList
		Expect(k8s.List(ctx, &runs, client.MatchingLabels{v1alpha1.LabelTargetNamespace: ns})).To(Succeed())
		notDone := 0
		for _, r := range runs.Items {
			if r.Status.Phase != v1alpha1.RunSucceeded {
				notDone++
			}
		}
		Expect(notDone).To(BeZero(), "runs that did not succeed")
		Expect(len(runs.Items)).To(BeNumerically("<=", len(c.deletedAt)), "at most one run per deletion")
		// At the default runHistory a teardown done at once leaves no run: the policies' status
		// counts every teardown that ended, run or not.
		Eventually(func(g Gomega) {
			var policies v1alpha1.TeardownPolicyList
			g.Expect(k8s.List(ctx, &policies, client.InNamespace(ns))).To(Succeed())
			var ended v1alpha1.TeardownCounts
			for _, p := range policies.Items {
				t := p.Status.Teardowns
				ended.Succeeded, ended.Failed, ended.Abandoned = ended.Succeeded+t.Succeeded, ended.Failed+t.Failed, ended.Abandoned+t.Abandoned
			}
			g.Expect(ended).To(Equal(v1alpha1.TeardownCounts{Succeeded: int64(len(c.deletedAt))}), "one teardown per deletion, each succeeded")
		}, 30*time.Second, time.Second).Should(Succeed())
		// Idle: what the operator keeps once the churn is over and its last objects are gone.
		time.Sleep(30 * time.Second)
		if smp, err := scrape(metrics); err == nil {
			smp.at = time.Since(start)
			samples = append(samples, smp)
		}
		var lat []time.Duration
		for name, asked := range c.deletedAt {
			lat = append(lat, goneAt[name].Sub(asked))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		report := soakReport(d, rate, len(c.deletedAt), lat, samples) + fmt.Sprintf("operator restarts: %d\n", sup.count())
		AddReportEntry("soak", report)
		GinkgoWriter.Println(report)
		if d >= 10*time.Minute {
			// Compare from the first sample after the events library's series cache is full (it
			// keeps 6 minutes of events) to the last one taken while churning.
			first, last := settledSamples(samples, d)
			Expect(last.rssMiB).To(BeNumerically("<=", first.rssMiB*1.25+10), "memory grew over the soak:\n%s", report)
			Expect(last.heapMiB).To(BeNumerically("<=", first.heapMiB*1.25+10), "heap in use grew over the soak:\n%s", report)
			Expect(last.goroutines).To(BeNumerically("<=", first.goroutines+50), "goroutines grew over the soak:\n%s", report)
		}
	})
})

// soakReport prints the soak's figures: latency, and the samples over time.
func soakReport(d time.Duration, rate, n int, lat []time.Duration, samples []sample) string {
	var b strings.Builder
	pct := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(10 * time.Millisecond)
	}
	fmt.Fprintf(&b, "soak: %s at %d objects/s over %d kinds and %d policies; %d teardowns, every run Succeeded; delete-to-gone p50 %s, p99 %s, max %s\n",
		d, rate, soakKinds, soakPolicies, n, pct(0.5), pct(0.99), lat[len(lat)-1].Round(10*time.Millisecond))
	fmt.Fprintf(&b, "%8s %9s %10s %11s %12s %8s\n", "time", "RSS MiB", "heap MiB", "goroutines", "queue depth", "objects")
	for _, s := range samples {
		fmt.Fprintf(&b, "%8s %9.1f %10.1f %11.0f %12.0f %8d\n", s.at.Round(time.Second), s.rssMiB, s.heapMiB, s.goroutines, s.queueLen, s.objects)
	}
	return b.String()
}

// sizeDuration reads a positive duration from the environment, or returns def.
func sizeDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// settledSamples returns the first sample taken 8 minutes or more into the churn and the last one
// taken while it lasted.
func settledSamples(samples []sample, d time.Duration) (first, last sample) {
	for _, s := range samples {
		if s.at >= 8*time.Minute && first.at == 0 {
			first = s
		}
		if s.at <= d {
			last = s
		}
	}
	return first, last
}
