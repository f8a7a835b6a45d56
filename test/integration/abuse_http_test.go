package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
)

// Resource abuse by the APIs http steps call: a huge body, no answer, a trickle.
var _ = Describe("Resource abuse by an http API", func() {
	ctx := context.Background()

	It("reads at most 1 MiB of a 1 GiB response, fails the step saying so, and keeps the operator's memory bounded", func() {
		ns := newNamespace(ctx)
		const gib = 1 << 30
		var written atomic.Int64
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(gib))
			w.WriteHeader(http.StatusOK)
			chunk := []byte(strings.Repeat(`"aaaaaaaaaaaaaa",`, 64<<10/16)[:64<<10])
			for n := 0; n < gib; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return // the client hung up
				}
				written.Add(int64(len(chunk)))
			}
		})
		cm := protect(ctx, namespacedPolicy(ns, "huge", httpStep("fetch", v1alpha1.HTTPStep{URL: api.url(ns, "/huge"),
			Outputs: map[string]v1alpha1.Expression{"size": "size(response.body)"}})), "target")

		before := heapInuse()
		peak := atomic.Uint64{}
		peak.Store(before)
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if h := heapInuse(); h > peak.Load() {
					peak.Store(h)
				}
			}
		}()
		var allocBefore runtime.MemStats
		runtime.ReadMemStats(&allocBefore)
		start := time.Now()
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(stepPhase(ctx, cm, "fetch"), 30*time.Second).Should(Equal(v1alpha1.StepFailed))
		took := time.Since(start)
		close(stop)
		<-sampled
		var allocAfter runtime.MemStats
		runtime.ReadMemStats(&allocAfter)

		ss := stepOf(ctx, cm, "fetch")
		Expect(ss.Message).To(And(HavePrefix("GET "+api.url(ns, "/huge")+": 200 OK: "),
			ContainSubstring(fmt.Sprintf("the response body is larger than %d bytes (1 MiB), the most a step reads", httpstep.MaxBodyBytes))))
		Expect(ss.Attempts).To(Equal(int32(1)), "not retried: the same answer would come again")
		Expect(runPhase(ctx, cm)()).To(Equal(v1alpha1.RunFailed))
		Expect(took).To(BeNumerically("<", 20*time.Second))

		growth := int64(peak.Load()) - int64(before)
		allocated := allocAfter.TotalAlloc - allocBefore.TotalAlloc
		AddReportEntry("1 GiB response", fmt.Sprintf("step failed %s after the delete; server wrote %d MiB before the client hung up; "+
			"peak heap in use grew %d MiB; %d MiB allocated meanwhile by the whole process",
			took.Round(time.Millisecond), written.Load()>>20, growth>>20, allocated>>20))
		Expect(growth).To(BeNumerically("<", 200<<20), "the body is not buffered")
		Expect(allocated).To(BeNumerically("<", 512<<20), "the body is not read to its end")
		Eventually(written.Load, 10*time.Second).Should(BeNumerically("<", 256<<20), "the client stops reading")
	})

	It("fails a step whose server never answers at the step's timeout and at the request's, without holding a worker", func() {
		ns := newNamespace(ctx)
		release := make(chan struct{})
		DeferCleanup(func() { close(release) })
		var hung atomic.Int32
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			hung.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		stepTimeout := httpStep("call", v1alpha1.HTTPStep{URL: api.url(ns, "/step-timeout"), Timeout: dur(httpstep.MaxTimeout)})
		stepTimeout.Timeout = dur(10 * time.Second)
		requestTimeout := httpStep("call", v1alpha1.HTTPStep{URL: api.url(ns, "/request-timeout"), Timeout: dur(2 * time.Second)})
		requestTimeout.Retry = &v1alpha1.RetryPolicy{Limit: 1, Backoff: dur(100 * time.Millisecond)}

		stepPolicy := namespacedPolicy(ns, "step-timeout", stepTimeout)
		var hanging []*corev1.ConfigMap
		// More requests in flight than the operator has workers of each kind (4 in this suite).
		for i := range 8 {
			hanging = append(hanging, protect(ctx, stepPolicy, fmt.Sprintf("hanging-%d", i)))
		}
		perRequest := protect(ctx, namespacedPolicy(ns, "request-timeout", requestTimeout), "per-request")
		quick := protect(ctx, namespacedPolicy(ns, "quick", waitStep("instant", 0)), "quick")

		start := time.Now()
		for _, cm := range append(hanging, perRequest) {
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
		}
		Eventually(hung.Load, 10*time.Second).Should(BeNumerically(">=", 9), "every request is in flight")
		Expect(k8s.Delete(ctx, quick)).To(Succeed())
		Eventually(gone(ctx, quick), 10*time.Second).Should(BeTrue(), "workers are free while 9 requests hang")
		quickTook := time.Since(start)
		Expect(stepPhase(ctx, hanging[0], "call")()).To(Equal(v1alpha1.StepRunning), "the hanging requests were in flight meanwhile")
		Expect(stepOf(ctx, hanging[0], "call").Message).To(ContainSubstring("waiting for the response"))

		for _, cm := range hanging {
			Eventually(runPhase(ctx, cm), 20*time.Second).Should(Equal(v1alpha1.RunFailed), cm.Name)
			ss := stepOf(ctx, cm, "call")
			Expect(ss.Message).To(And(HavePrefix("timed out after 10s (1 attempts); last: GET "+api.url(ns, "/step-timeout")),
				ContainSubstring("waiting for the response")), cm.Name)
			Expect(ss.CompletionTime.Sub(ss.StartTime.Time)).To(BeNumerically("<", 15*time.Second), cm.Name)
		}
		Eventually(runPhase(ctx, perRequest), 20*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss := stepOf(ctx, perRequest, "call")
		Expect(ss.Attempts).To(Equal(int32(2)))
		Expect(ss.Message).To(Equal("GET " + api.url(ns, "/request-timeout") + ": no response within the request timeout of 2s (after 2 attempts)"))
		AddReportEntry("server that never answers", fmt.Sprintf("another teardown done %s after 9 hanging requests started; the steps failed at their timeouts",
			quickTook.Round(time.Millisecond)))
	})

	It("bounds a server that trickles a byte a second by the request timeout, saying what came", func() {
		ns := newNamespace(ctx)
		release := make(chan struct{})
		DeferCleanup(func() { close(release) })
		trickle := func(w *bufio.Writer, flush func() error, data string) {
			for i := 0; ; i++ {
				if w.WriteByte(data[i%len(data)]) != nil || w.Flush() != nil || flush() != nil {
					return
				}
				select {
				case <-release:
					return
				case <-time.After(time.Second):
				}
			}
		}
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/body") {
				// The status and headers at once, then the body a byte a second.
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				rc := http.NewResponseController(w)
				trickle(bufio.NewWriter(w), rc.Flush, `{"state": "`+strings.Repeat("a", 1000))
				return
			}
			// The status line itself a byte a second.
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			trickle(buf.Writer, func() error { return nil }, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
		})
		body := httpStep("call", v1alpha1.HTTPStep{URL: api.url(ns, "/body"), Timeout: dur(3 * time.Second)})
		head := httpStep("call", v1alpha1.HTTPStep{URL: api.url(ns, "/head"), Timeout: dur(3 * time.Second)})
		head.Timeout = dur(20 * time.Second) // the step's own timeout is not what ends it
		bodyTarget := protect(ctx, namespacedPolicy(ns, "body", body), "body")
		headTarget := protect(ctx, namespacedPolicy(ns, "head", head), "head")
		Expect(k8s.Delete(ctx, bodyTarget)).To(Succeed())
		Expect(k8s.Delete(ctx, headTarget)).To(Succeed())

		Eventually(runPhase(ctx, bodyTarget), 20*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss := stepOf(ctx, bodyTarget, "call")
		Expect(ss.Message).To(MatchRegexp(`^GET %s: 200 OK: the response body did not end within the request timeout of 3s \(\d+ bytes read\)$`,
			regexp.QuoteMeta(api.url(ns, "/body"))))
		Expect(ss.CompletionTime.Sub(ss.StartTime.Time)).To(BeNumerically("<", 10*time.Second))

		Eventually(runPhase(ctx, headTarget), 20*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss = stepOf(ctx, headTarget, "call")
		Expect(ss.Message).To(Equal("GET " + api.url(ns, "/head") + ": no response within the request timeout of 3s"))
		Expect(ss.CompletionTime.Sub(ss.StartTime.Time)).To(BeNumerically("<", 10*time.Second))
	})
})
