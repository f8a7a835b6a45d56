package integration

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
)

// lagProxy stands between the operator and the API server. Reads and writes pass at once; the
// events of the watches it lags arrive late, each by its watch's lag and in order: the operator's
// caches are behind the API server, as they are while watches catch up after an API server restart.
type lagProxy struct {
	srv *httptest.Server
}

// newLagProxy proxies to the API server upstream names, lagging each watch by lagOf it.
func newLagProxy(upstream *rest.Config, lagOf func(*http.Request) time.Duration) *lagProxy {
	GinkgoHelper()
	transport, err := rest.TransportFor(upstream)
	Expect(err).NotTo(HaveOccurred())
	target, err := url.Parse(upstream.Host)
	Expect(err).NotTo(HaveOccurred())
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1, // watch events as they come (late)
		ModifyResponse: func(resp *http.Response) error {
			if lag := lagOf(resp.Request); lag > 0 && resp.Request.URL.Query().Get("watch") == "true" {
				resp.Body = newLaggedBody(resp.Body, lag)
			}
			return nil
		},
	}
	return &lagProxy{srv: httptest.NewServer(rp)}
}

// config is how the operator reaches the API server through the proxy (which authenticates).
func (p *lagProxy) config() *rest.Config {
	return &rest.Config{Host: p.srv.URL, QPS: cfg.QPS, Burst: cfg.Burst}
}

func (p *lagProxy) close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}

// laggedBody hands on what its upstream body says lag after it said it.
type laggedBody struct {
	upstream io.ReadCloser
	chunks   chan laggedChunk
	done     chan struct{}
	close    sync.Once
	pending  []byte
	err      error
}

type laggedChunk struct {
	due  time.Time
	data []byte
	err  error
}

func newLaggedBody(upstream io.ReadCloser, lag time.Duration) *laggedBody {
	b := &laggedBody{upstream: upstream, chunks: make(chan laggedChunk, 4096), done: make(chan struct{})}
	go func() {
		defer close(b.chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := upstream.Read(buf)
			select {
			case b.chunks <- laggedChunk{due: time.Now().Add(lag), data: buf[:n], err: err}:
			case <-b.done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return b
}

func (b *laggedBody) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		c, ok := <-b.chunks
		if !ok {
			return 0, io.EOF
		}
		select {
		case <-time.After(time.Until(c.due)):
		case <-b.done:
			return 0, io.ErrClosedPipe
		}
		b.pending, b.err = c.data, c.err
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

func (b *laggedBody) Close() error {
	b.close.Do(func() { close(b.done) })
	return b.upstream.Close()
}

var _ = Describe("Caches that lag behind the API server", func() {
	ctx := context.Background()

	It("never take an older run for the latest, before or after the run is settled", func() {
		// The objects' events come later than the runs': when the first event of the run
		// reaches the cache, the cache still shows its object held, deleting.
		const runLag, targetLag = 3 * time.Second, 6 * time.Second
		proxy := newLagProxy(cfg, func(r *http.Request) time.Duration {
			switch {
			case strings.HasSuffix(r.URL.Path, "/teardownruns"):
				return runLag
			case strings.HasSuffix(r.URL.Path, "/configmaps"):
				return targetLag
			}
			return 0
		})
		DeferCleanup(proxy.close)
		stopOperator()
		stopOperator = startOperatorOn(proxy.config(), func(*engine.Options) {})
		DeferCleanup(func() {
			stopOperator()
			stopOperator = startOperator()
		})

		By("a call that answers after its reconcile let it go: the run ends and is settled before the run cache has seen it created")
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, _ *http.Request) {
			time.Sleep(time.Second)
			w.WriteHeader(http.StatusOK)
		})
		p := namespacedPolicy(ns, "notify", v1alpha1.Step{Name: "notify",
			HTTP: &v1alpha1.HTTPStep{Method: http.MethodPost, URL: api.url(ns, "/notify/${object.metadata.name}")}})
		cm := protect(ctx, p, "late")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), targetLag+runLag).Should(BeTrue())
		Expect(runPhase(ctx, cm)()).To(Equal(v1alpha1.RunSucceeded))

		By("the run's and the object's events arrive late: none of them is taken for the run's state")
		Consistently(api.calls(ns, "POST /"+ns+"/notify/late"), targetLag+runLag, 200*time.Millisecond).Should(Equal(1),
			"the step was called again from a version of the run older than its recorded success")
	})
})
