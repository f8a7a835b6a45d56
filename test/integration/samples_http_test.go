package integration

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps/approval"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

var _ = Describe("Samples with http steps", func() {
	BeforeEach(func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, exampleCRDs)).To(Succeed())
	})

	It("managed-database runs its four calls against the database API, keeping the snapshot's id, waits for a DBA, and tells the chat once", managedDatabaseSample)
})

// createHTTPSample creates the one TeardownPolicy of a sample in ns, as written but for base,
// the URL of the API it calls, which becomes the route of ns on the suite's loopback endpoint
// (as a user points a sample at their own API), and for others: more URLs it calls, each to the
// path given under that route.
func createHTTPSample(ctx context.Context, file, base, ns string, others ...string) *v1alpha1.TeardownPolicy {
	objs := loadSample(samplePath(file))
	Expect(objs).To(HaveLen(1))
	js, err := objs[0].MarshalJSON()
	Expect(err).NotTo(HaveOccurred())
	for i := 0; i+1 < len(others); i += 2 {
		Expect(bytes.Contains(js, []byte(others[i]))).To(BeTrue(), "%s does not call %s", file, others[i])
		js = bytes.ReplaceAll(js, []byte(others[i]), []byte(api.url(ns, others[i+1])))
	}
	Expect(bytes.Contains(js, []byte(base))).To(BeTrue(), "%s does not call %s", file, base)
	js = bytes.ReplaceAll(js, []byte(base), []byte(api.url(ns, "")))
	u := &unstructured.Unstructured{}
	Expect(u.UnmarshalJSON(js)).To(Succeed())
	Expect(u.GetKind()).To(Equal("TeardownPolicy"))
	u.SetNamespace(ns)
	Expect(k8s.Create(ctx, u, client.FieldValidation("Strict"))).To(Succeed())
	p := &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: u.GetName()}}
	expectReady(ctx, p, metav1.ConditionTrue)
	return p
}

func managedDatabaseSample(ctx SpecContext) {
	ns := newNamespace(ctx)
	// The snapshot is in progress at the first poll and completed at the second.
	dbAPI := &databaseAPI{inProgress: 1}
	api.handle(ns, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/"+ns+"/chat") {
			w.WriteHeader(http.StatusOK) // the chat's webhook
			return
		}
		dbAPI.serve(w, r)
	})
	createSecret(ctx, ns, "db-api", map[string]string{"token": dbToken})
	createSecret(ctx, ns, "chat-webhook", map[string]string{"token": "Bearer chat-token"})
	root := filepath.Join("..", "..")
	Expect(framework.InstallAdmissionPolicies(ctx, k8s, root)).To(Succeed())
	Expect(framework.InstallUserRoles(ctx, k8s, root)).To(Succeed())
	Expect(framework.AwaitApprovalsTrusted(ctx, k8s)).To(Succeed())
	p := createHTTPSample(ctx, "managed-database.yaml", "https://db-api.example.com", ns, "https://chat.example.com/hooks/teardown", "/chat")

	db := exampleObject(ns, "ManagedDatabase", "orders", map[string]any{"instanceID": "db-42", "engine": "postgres"})
	noSpec := exampleObject(ns, "ManagedDatabase", "pending", nil)
	pathy := exampleObject(ns, "ManagedDatabase", "pathy", map[string]any{"instanceID": "db-42/../../admin"})
	for _, o := range []*unstructured.Unstructured{db, noSpec, pathy} {
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
	Eventually(finalizers(ctx, db), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	expectUnprotected(ctx, noSpec, "a database without spec.instanceID has nothing to tear down")
	expectUnprotected(ctx, pathy, "an instanceID that would change the URL's path is not used")

	Expect(k8s.Delete(ctx, db)).To(Succeed())
	Eventually(stepPhase(ctx, db, "dba-approval"), 45*time.Second).Should(Equal(v1alpha1.StepRunning))
	Consistently(gone(ctx, db), 2*time.Second).Should(BeFalse(), "nothing is de-provisioned before a DBA approves")
	dba := personOf("dana", "dba")
	grant(ctx, ns, "teardown-operator-approver", dba.name)
	run := runFor(ctx, db)()
	Expect(run.Status.Step("dba-approval").Approval.Request).To(Equal("final snapshot snap-7781 of database db-42 (" + ns + "/orders) is complete; approve de-provisioning it?"))
	Expect(dba.client.Create(ctx, approval.Answer(run, "dba-approval", 1, v1alpha1.Approve, "snapshot checked", v1alpha1.Approver{Username: dba.name, Groups: dba.groups}))).To(Succeed())
	Eventually(gone(ctx, db), 15*time.Second).Should(BeTrue())
	run = runFor(ctx, db)()
	Expect(run).NotTo(BeNil())
	Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded), statusJSON(run))
	for _, s := range []string{"maintenance", "snapshot", "await-snapshot", "dba-approval", "deprovision", "announce"} {
		Expect(run.Status.Step(s).Phase).To(Equal(v1alpha1.StepSucceeded), "step %s", s)
	}
	Expect(string(run.Status.Step("snapshot").Outputs["snapshotID"].Raw)).To(Equal(`"snap-7781"`))
	Expect(run.Status.Step("deprovision").Message).To(ContainSubstring("404 Not Found"), "404 counts as done")
	expectDatabaseCalls(ns, run)
}

// expectDatabaseCalls checks the requests the managed-database sample made, as the API saw them.
func expectDatabaseCalls(ns string, run *v1alpha1.TeardownRun) {
	var reqs, chat []received
	for _, r := range api.requests(ns) {
		if strings.HasPrefix(r.Path, "/"+ns+"/chat") {
			chat = append(chat, r)
			continue
		}
		reqs = append(reqs, r)
	}
	Expect(chat).To(HaveLen(1), "the chat hears once")
	Expect(chat[0].Body).To(MatchJSON(`{"text": "Teardown of database db-42 (` + ns + `/orders) Succeeded: all steps done; final snapshot snap-7781; approved by dana"}`))
	Expect(chat[0].Header.Get("Authorization")).To(Equal("Bearer chat-token"))
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
		"DELETE " + inst,
	}))
	Expect(reqs[0].Body).To(MatchJSON(`{"maintenance": true, "reason": "teardown of ` + ns + `/orders"}`))
	Expect(reqs[0].Header.Get("Content-Type")).To(Equal("application/json"))
	Expect(reqs[1].Body).To(MatchJSON(`{"label": "final-orders"}`))
	Expect(reqs[1].Header.Get("Content-Type")).To(Equal("application/json"))
	Expect(reqs[3].At.Sub(reqs[2].At)).To(BeNumerically(">=", 14*time.Second), "the sample polls every 15s")
	steps := []string{"maintenance", "snapshot", "await-snapshot", "await-snapshot", "deprovision"}
	for i, r := range reqs {
		Expect(r.Header.Get("Authorization")).To(Equal(dbToken), "request %d", i)
		Expect(r.Header.Get(httpstep.HeaderIdempotencyKey)).To(Equal(httpstep.IdempotencyKey(deletionID(run), steps[i], 0)), "request %d", i)
	}
}
