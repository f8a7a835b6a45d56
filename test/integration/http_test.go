package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/naming"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// httpStep is a step of kind http.
func httpStep(name string, h v1alpha1.HTTPStep) v1alpha1.Step {
	return v1alpha1.Step{Name: name, HTTP: &h}
}

func authFrom(secret, key string) v1alpha1.HTTPHeader {
	return v1alpha1.HTTPHeader{Name: "Authorization", ValueFrom: &v1alpha1.HeaderValueSource{
		SecretKeyRef: &v1alpha1.SecretKeyRef{Name: secret, Key: key}}}
}

// managedDatabase is a target of the ManagedDatabase test kind.
func managedDatabase(ns, name, instanceID string) *unstructured.Unstructured {
	db := &unstructured.Unstructured{}
	db.SetAPIVersion("example.teardown.dev/v1")
	db.SetKind("ManagedDatabase")
	db.SetNamespace(ns)
	db.SetName(name)
	Expect(unstructured.SetNestedField(db.Object, instanceID, "spec", "instanceID")).To(Succeed())
	return db
}

// databaseAPI answers like a cloud database API: maintenance, a snapshot that completes after
// `inProgress` polls (or when complete() is called, if inProgress < 0), and de-provisioning of
// an instance it no longer knows (404).
type databaseAPI struct {
	mu         sync.Mutex
	inProgress int
	polls      int
	completed  bool
}

func (d *databaseAPI) complete() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.completed = true
}

func (d *databaseAPI) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/maintenance"):
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/snapshots"):
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id": "snap-7781", "state": "Pending"}`)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/snapshots/snap-7781"):
		d.mu.Lock()
		d.polls++
		state := "InProgress"
		if d.completed || d.inProgress >= 0 && d.polls > d.inProgress {
			state = "Completed"
		}
		d.mu.Unlock()
		fmt.Fprintf(w, `{"id": "snap-7781", "state": %q}`, state)
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error": "instance not found"}`)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusMethodNotAllowed)
	}
}

// databasePolicy is the managed-database teardown: maintenance mode, a final snapshot, waiting
// for the snapshot, de-provisioning.
func databasePolicy(ns string) *v1alpha1.TeardownPolicy {
	base := api.url(ns, "/v1/instances/${object.spec.instanceID}")
	auth := authFrom("db-api", "token")
	p := namespacedPolicy(ns, "database",
		httpStep("maintenance", v1alpha1.HTTPStep{Method: "POST", URL: base + "/maintenance",
			Headers:  []v1alpha1.HTTPHeader{auth, {Name: "X-Teardown-Target", Value: "${object.metadata.namespace}/${object.metadata.name}"}},
			JSONBody: "{'maintenance': true, 'reason': 'teardown of ' + object.metadata.name}"}),
		httpStep("snapshot", v1alpha1.HTTPStep{Method: "POST", URL: base + "/snapshots",
			Headers: []v1alpha1.HTTPHeader{auth, {Name: "Content-Type", Value: "application/json"}},
			Body:    `{"label": "final-${object.metadata.name}"}`,
			Outputs: map[string]v1alpha1.Expression{"snapshotID": "response.body.id"}}),
		httpStep("await-snapshot", v1alpha1.HTTPStep{URL: base + "/snapshots/${steps.snapshot.outputs.snapshotID}",
			Headers:          []v1alpha1.HTTPHeader{auth},
			SuccessCondition: "response.body.state == 'Completed'",
			Poll:             &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: time.Second}}}),
		httpStep("deprovision", v1alpha1.HTTPStep{Method: "DELETE", URL: base,
			Headers:          []v1alpha1.HTTPHeader{auth},
			SuccessCondition: "response.status in [200, 202, 204, 404]"}),
	)
	p.Spec.Steps[2].Timeout = dur(time.Minute)
	p.Spec.TargetRef = v1alpha1.TargetReference{APIVersion: "example.teardown.dev/v1", Kind: "ManagedDatabase"}
	p.Spec.Selector = nil
	return p
}

const dbToken = "Bearer tok-0123456789abcdef"

func createSecret(ctx context.Context, ns, name string, data map[string]string) {
	Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data})).To(Succeed())
}

// protectDatabase creates the database policy and a database it protects.
func protectDatabase(ctx context.Context, ns string) *unstructured.Unstructured {
	Expect(framework.InstallCRDs(ctx, k8s, exampleCRDs)).To(Succeed())
	createSecret(ctx, ns, "db-api", map[string]string{"token": dbToken})
	p := databasePolicy(ns)
	Expect(k8s.Create(ctx, p)).To(Succeed())
	expectReady(ctx, p, metav1.ConditionTrue)
	db := managedDatabase(ns, "orders", "db-42")
	Expect(k8s.Create(ctx, db)).To(Succeed())
	Eventually(finalizers(ctx, db), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	return db
}

// statusJSON is the run's status as stored, for searching it for secrets.
func statusJSON(run *v1alpha1.TeardownRun) string {
	b, err := json.Marshal(run.Status)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// targetWithURL is a ConfigMap whose data.url an http step calls.
func targetWithURL(ctx context.Context, p *v1alpha1.TeardownPolicy, name, url string) *corev1.ConfigMap {
	cm := configMap(p.Namespace, name, map[string]string{"app": p.Name})
	cm.Data["url"] = url
	Expect(k8s.Create(ctx, cm)).To(Succeed())
	Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	return cm
}

func stepOf(ctx context.Context, target client.Object, step string) *v1alpha1.StepStatus {
	run := runFor(ctx, target)()
	Expect(run).NotTo(BeNil())
	ss := run.Status.Step(step)
	Expect(ss).NotTo(BeNil())
	return ss
}

var _ = Describe("HTTP steps", func() {
	ctx := context.Background()

	It("tears down a managed database: maintenance, final snapshot, polling it, de-provisioning", func() {
		ns := newNamespace(ctx)
		api.handle(ns, (&databaseAPI{inProgress: 3}).serve)
		db := protectDatabase(ctx, ns)
		Expect(k8s.Delete(ctx, db)).To(Succeed())
		Eventually(gone(ctx, db), 30*time.Second).Should(BeTrue())

		run := runFor(ctx, db)()
		Expect(run).NotTo(BeNil())
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded), statusJSON(run))

		By("the server received the calls in order, with the bodies and headers the policy says")
		reqs := api.requests(ns)
		var lines []string
		for _, r := range reqs {
			lines = append(lines, r.Method+" "+r.Path)
		}
		inst := "/" + ns + "/v1/instances/db-42"
		Expect(lines).To(Equal([]string{
			"POST " + inst + "/maintenance",
			"POST " + inst + "/snapshots",
			"GET " + inst + "/snapshots/snap-7781",
			"GET " + inst + "/snapshots/snap-7781",
			"GET " + inst + "/snapshots/snap-7781",
			"GET " + inst + "/snapshots/snap-7781",
			"DELETE " + inst,
		}))
		Expect(reqs[0].Body).To(MatchJSON(`{"maintenance": true, "reason": "teardown of orders"}`))
		Expect(reqs[0].Header.Get("Content-Type")).To(Equal("application/json"))
		Expect(reqs[0].Header.Get("X-Teardown-Target")).To(Equal(ns + "/orders"))
		Expect(reqs[1].Body).To(Equal(`{"label": "final-orders"}`))
		for i := 3; i < 6; i++ {
			Expect(reqs[i].At.Sub(reqs[i-1].At)).To(BeNumerically(">=", 900*time.Millisecond), "polls are an interval apart")
		}
		keys := map[string]string{}
		steps := []string{"maintenance", "snapshot", "await-snapshot", "await-snapshot", "await-snapshot", "await-snapshot", "deprovision"}
		for i, r := range reqs {
			Expect(r.Header.Get("Authorization")).To(Equal(dbToken), "request %d", i)
			Expect(r.Header.Values("Cookie")).To(BeEmpty())
			key := r.Header.Get(httpstep.HeaderIdempotencyKey)
			Expect(key).To(Equal(httpstep.IdempotencyKey(deletionID(run), steps[i], 0)), "request %d", i)
			keys[steps[i]] = key
		}
		Expect(keys).To(HaveLen(4), "one key per step, the same for every poll")

		By("the run keeps the snapshot's ID after the target is gone")
		Expect(string(run.Status.Step("snapshot").Outputs["snapshotID"].Raw)).To(Equal(`"snap-7781"`))
		Expect(run.Status.Step("await-snapshot").Message).To(ContainSubstring("200 OK"))
		Expect(run.Status.Step("deprovision").Message).To(ContainSubstring("404 Not Found"))
		Expect(statusJSON(run)).NotTo(ContainSubstring("tok-0123456789abcdef"))
		Expect(strings.Join(probe().EventNotes(ctx, run)(), "\n")).NotTo(ContainSubstring("tok-0123456789abcdef"))
	})

	It("resumes polling after an operator restart without taking a second snapshot", func() {
		ns := newNamespace(ctx)
		server := &databaseAPI{inProgress: -1}
		api.handle(ns, server.serve)
		db := protectDatabase(ctx, ns)
		Expect(k8s.Delete(ctx, db)).To(Succeed())
		polls := api.calls(ns, "GET ")
		Eventually(polls, 15*time.Second).Should(BeNumerically(">=", 2))

		stopOperator()
		before := polls()
		stopOperator = startOperator()
		Eventually(polls, 15*time.Second).Should(BeNumerically(">=", before+2), "polling resumes after the restart")
		server.complete()
		Eventually(gone(ctx, db), 30*time.Second).Should(BeTrue())

		Expect(api.calls(ns, "POST /"+ns+"/v1/instances/db-42/snapshots")()).To(Equal(1), "the snapshot is taken once")
		Expect(api.calls(ns, "POST /"+ns+"/v1/instances/db-42/maintenance")()).To(Equal(1))
		Expect(api.calls(ns, "DELETE ")()).To(Equal(1))
		run := runFor(ctx, db)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(run.Status.Step("await-snapshot").Attempts).To(Equal(int32(1)), "polls are not attempts")
	})

	It("retries a 503 and then succeeds", func() {
		ns := newNamespace(ctx)
		var calls atomic.Int32
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				http.Error(w, "database is busy", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		step := httpStep("call", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/flaky")})
		step.Retry = &v1alpha1.RetryPolicy{Limit: 3, Backoff: dur(200 * time.Millisecond)}
		cm := protect(ctx, namespacedPolicy(ns, "flaky", step), "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		ss := stepOf(ctx, cm, "call")
		Expect(ss.Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(ss.Attempts).To(Equal(int32(2)))
		Expect(ss.Message).To(ContainSubstring("200 OK"))
		Expect(api.requests(ns)).To(HaveLen(2))
		for _, r := range api.requests(ns) {
			Expect(r.Header.Values("Authorization")).To(BeEmpty(), "no credential the policy does not name")
			Expect(r.Header.Values("Cookie")).To(BeEmpty())
			Expect(r.Header.Values("Proxy-Authorization")).To(BeEmpty())
		}
		Expect(probe().EventNotes(ctx, runFor(ctx, cm)())()).To(ContainElement(And(
			ContainSubstring("StepRetrying"), ContainSubstring("503 Service Unavailable"), ContainSubstring("database is busy"))))
	})

	It("waits as long as a 429's Retry-After says", func() {
		ns := newNamespace(ctx)
		var calls atomic.Int32
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				w.Header().Set("Retry-After", "2")
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		step := httpStep("call", v1alpha1.HTTPStep{Method: "POST", URL: api.url(ns, "/limited")})
		step.Retry = &v1alpha1.RetryPolicy{Limit: 3, Backoff: dur(50 * time.Millisecond)}
		cm := protect(ctx, namespacedPolicy(ns, "limited", step), "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		reqs := api.requests(ns)
		Expect(reqs).To(HaveLen(2))
		Expect(reqs[1].At.Sub(reqs[0].At)).To(BeNumerically(">=", 1900*time.Millisecond), "Retry-After replaces the 50ms backoff")
		Expect(stepOf(ctx, cm, "call").Attempts).To(Equal(int32(2)))
	})

	It("fails at once on a 400, with the status and the body in the step", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "instance db-42 is protected by a deletion lock", http.StatusBadRequest)
		})
		step := httpStep("call", v1alpha1.HTTPStep{Method: "DELETE", URL: api.url(ns, "/locked")})
		step.Retry = &v1alpha1.RetryPolicy{Limit: 3, Backoff: dur(50 * time.Millisecond)}
		cm := protect(ctx, namespacedPolicy(ns, "locked", step), "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 15*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss := stepOf(ctx, cm, "call")
		Expect(ss.Phase).To(Equal(v1alpha1.StepFailed))
		Expect(ss.Attempts).To(Equal(int32(1)), "a 400 is not retried")
		Expect(ss.Message).To(And(ContainSubstring("400 Bad Request"), ContainSubstring("protected by a deletion lock")))
		Consistently(func() int { return len(api.requests(ns)) }, time.Second).Should(Equal(1))
		Expect(gone(ctx, cm)()).To(BeFalse(), "failurePolicy Retain keeps the target")
	})

	It("retries a request that times out", func() {
		ns := newNamespace(ctx)
		var calls atomic.Int32
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				select {
				case <-time.After(3 * time.Second):
				case <-r.Context().Done():
				}
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		step := httpStep("call", v1alpha1.HTTPStep{URL: api.url(ns, "/slow"), Timeout: dur(700 * time.Millisecond)})
		step.Retry = &v1alpha1.RetryPolicy{Limit: 2, Backoff: dur(100 * time.Millisecond)}
		cm := protect(ctx, namespacedPolicy(ns, "slow", step), "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		ss := stepOf(ctx, cm, "call")
		Expect(ss.Attempts).To(Equal(int32(2)))
		Expect(probe().EventNotes(ctx, runFor(ctx, cm)())()).To(ContainElement(
			ContainSubstring("no response within the request timeout of 700ms")))
	})

	It("fails a poll that outlasts the step's timeout, and honours onFailure", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"state": "InProgress"}`)
		})
		poll := func(onFailure v1alpha1.OnFailure) v1alpha1.Step {
			s := httpStep("await", v1alpha1.HTTPStep{URL: api.url(ns, "/never"), SuccessCondition: "response.body.state == 'Completed'",
				Poll: &v1alpha1.HTTPPoll{Interval: metav1.Duration{Duration: time.Second}}})
			s.Timeout, s.OnFailure = dur(3*time.Second), onFailure
			return s
		}
		failing := protect(ctx, namespacedPolicy(ns, "fail", poll(v1alpha1.OnFailureFail), waitStep("after", 0)), "failing")
		continuing := protect(ctx, namespacedPolicy(ns, "continue", poll(v1alpha1.OnFailureContinue), waitStep("after", 0)), "continuing")
		Expect(k8s.Delete(ctx, failing)).To(Succeed())
		Expect(k8s.Delete(ctx, continuing)).To(Succeed())

		Eventually(runPhase(ctx, failing), 15*time.Second).Should(Equal(v1alpha1.RunFailed))
		ss := stepOf(ctx, failing, "await")
		Expect(ss.Phase).To(Equal(v1alpha1.StepFailed))
		Expect(ss.Message).To(And(ContainSubstring("timed out after 3s"), ContainSubstring("successCondition is false")))
		Expect(stepOf(ctx, failing, "after").Phase).To(Equal(v1alpha1.StepSkipped))
		Expect(gone(ctx, failing)()).To(BeFalse())

		Eventually(gone(ctx, continuing), 15*time.Second).Should(BeTrue())
		Expect(stepOf(ctx, continuing, "await").Phase).To(Equal(v1alpha1.StepFailed))
		Expect(stepOf(ctx, continuing, "after").Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(len(api.requests(ns))).To(BeNumerically(">=", 4), "both steps polled")
	})

	It("keeps values from Secrets and Authorization headers out of status and events", func() {
		ns := newNamespace(ctx)
		createSecret(ctx, ns, "creds", map[string]string{"key": "s3cr3t-value-123"})
		echo := func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if strings.HasSuffix(r.URL.Path, "/reject") {
				w.WriteHeader(http.StatusForbidden)
			}
			_ = json.NewEncoder(w).Encode(map[string]string{"key": r.Header.Get("X-Api-Key"), "auth": r.Header.Get("Authorization")})
		}
		api.handle(ns, echo)
		headers := []v1alpha1.HTTPHeader{
			{Name: "X-Api-Key", ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: &v1alpha1.SecretKeyRef{Name: "creds", Key: "key"}}},
			{Name: "Authorization", Value: "Bearer literal-token-456"},
		}
		p := namespacedPolicy(ns, "secretive",
			httpStep("echo", v1alpha1.HTTPStep{URL: api.url(ns, "/echo"), Headers: headers,
				Outputs: map[string]v1alpha1.Expression{"key": "response.body.key", "auth": "response.body.auth", "both": "[response.body.key, response.body.auth]"}}),
			httpStep("reject", v1alpha1.HTTPStep{URL: api.url(ns, "/reject"), Headers: headers}))
		cm := protect(ctx, p, "target")
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(runPhase(ctx, cm), 15*time.Second).Should(Equal(v1alpha1.RunFailed))

		reqs := api.requests(ns)
		Expect(reqs).To(HaveLen(2))
		Expect(reqs[0].Header.Get("X-Api-Key")).To(Equal("s3cr3t-value-123"), "the server gets the secret")
		run := runFor(ctx, cm)()
		status := statusJSON(run)
		Expect(status).NotTo(ContainSubstring("s3cr3t-value-123"))
		Expect(status).NotTo(ContainSubstring("literal-token-456"))
		Expect(string(run.Status.Step("echo").Outputs["key"].Raw)).To(Equal(`"[redacted]"`))
		Expect(string(run.Status.Step("echo").Outputs["auth"].Raw)).To(Equal(`"[redacted]"`))
		Expect(run.Status.Step("reject").Message).To(And(ContainSubstring("403 Forbidden"), ContainSubstring("[redacted]")))
		for _, obj := range []client.Object{run, cm} {
			// Events are recorded after the status write: wait for the failure's.
			notes := func() string { return strings.Join(probe().EventNotes(ctx, obj)(), "\n") }
			Eventually(notes, 5*time.Second).Should(ContainSubstring("403 Forbidden"))
			Expect(notes()).NotTo(Or(ContainSubstring("s3cr3t-value-123"), ContainSubstring("literal-token-456")))
		}
	})

	It("refuses loopback, metadata and redirected destinations for a TeardownPolicy, but allows the allow-listed server", func() {
		ns := newNamespace(ctx)
		api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/redirect") {
				http.Redirect(w, r, forbidden.url(ns, "/after-redirect"), http.StatusFound)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		forbidden.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		_, forbiddenPort, err := net.SplitHostPort(forbidden.srv.Listener.Addr().String())
		Expect(err).NotTo(HaveOccurred())

		p := namespacedPolicy(ns, "egress", httpStep("call", v1alpha1.HTTPStep{URL: "${object.data.url}", FollowRedirects: true}))
		p.Spec.FailurePolicy = v1alpha1.FailurePolicyRelease
		p.Spec.RunHistory = v1alpha1.RunHistoryAll // the allowed call succeeds at once: its run is read
		Expect(k8s.Create(ctx, p)).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)
		cases := map[string]struct{ url, want string }{
			"allowed":   {api.url(ns, "/ok"), ""},
			"loopback":  {forbidden.url(ns, "/direct"), "loopback address"},
			"metadata":  {"http://169.254.169.254/latest/meta-data/", "link-local address"},
			"gcp":       {"http://metadata.google.internal/computeMetadata/v1/", "cloud metadata host name"},
			"localhost": {"http://localhost:" + forbiddenPort + "/" + ns + "/by-name", "loopback address"},
			"redirect":  {api.url(ns, "/redirect"), "loopback address"},
		}
		targets := map[string]*corev1.ConfigMap{}
		for name, c := range cases {
			targets[name] = targetWithURL(ctx, p, name, c.url)
		}
		for _, cm := range targets {
			Expect(k8s.Delete(ctx, cm)).To(Succeed())
		}
		for name, c := range cases {
			Eventually(gone(ctx, targets[name]), 15*time.Second).Should(BeTrue(), name)
			ss := stepOf(ctx, targets[name], "call")
			if c.want == "" {
				Expect(ss.Phase).To(Equal(v1alpha1.StepSucceeded), name+": "+ss.Message)
				continue
			}
			Expect(ss.Phase).To(Equal(v1alpha1.StepFailed), name)
			Expect(ss.Attempts).To(Equal(int32(1)), name)
			Expect(ss.Message).To(And(ContainSubstring("refused"), ContainSubstring(c.want), ContainSubstring("--http-allowed-destinations")), name)
		}
		Expect(stepOf(ctx, targets["redirect"], "call").Message).To(ContainSubstring("redirect to " + forbidden.url(ns, "/after-redirect")))
		Expect(forbidden.requests(ns)).To(BeEmpty(), "nothing reached the refused server")

		By("a literal refused URL makes the policy not Ready, naming the field")
		bad := namespacedPolicy(ns, "metadata", httpStep("call", v1alpha1.HTTPStep{URL: "http://169.254.169.254/latest/meta-data/"}))
		Expect(k8s.Create(ctx, bad)).To(Succeed())
		cond := expectReady(ctx, bad, metav1.ConditionFalse)
		Expect(cond.Message).To(And(ContainSubstring("spec.steps[0].http.url"), ContainSubstring("link-local address")))
	})

	It("lets a ClusterTeardownPolicy reach any destination, reading Secrets in the namespace it names", func() {
		ns := newNamespace(ctx)
		createSecret(ctx, ns, "creds", map[string]string{"token": "Bearer cluster-token-789"})
		forbidden.handle(ns, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
		auth := authFrom("creds", "token")
		auth.ValueFrom.SecretKeyRef.Namespace = "${object.metadata.namespace}"
		cp := framework.ClusterPolicy("egress-"+ns, "cluster-egress", ns, httpStep("call", v1alpha1.HTTPStep{
			Method: "POST", URL: forbidden.url(ns, "/internal"), Headers: []v1alpha1.HTTPHeader{auth}}))
		cp.Spec.RunHistory = v1alpha1.RunHistoryAll // the call succeeds at once: its run is read
		Expect(k8s.Create(ctx, cp)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cp))).To(Succeed()) })
		expectReady(ctx, cp, metav1.ConditionTrue)
		cm := configMap(ns, "target", map[string]string{"app": "cluster-egress"})
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement("clusterteardownpolicy.teardown.dev/" + cp.Name))
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
		Eventually(gone(ctx, cm), 15*time.Second).Should(BeTrue())
		reqs := forbidden.requests(ns)
		Expect(reqs).To(HaveLen(1))
		Expect(reqs[0].Header.Get("Authorization")).To(Equal("Bearer cluster-token-789"))
		Expect(stepOf(ctx, cm, "call").Message).To(ContainSubstring("202 Accepted"))
	})
})

// deletionID is what a run's side effects are keyed on: its target's UID and its policy.
func deletionID(run *v1alpha1.TeardownRun) string {
	ref := run.Spec.PolicyRef
	return naming.DeletionID(ref.Kind, ref.Namespace, ref.Name, run.Spec.Target.UID)
}
