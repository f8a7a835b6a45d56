package integration

import (
	"bytes"
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

var _ = Describe("Samples with http steps", func() {
	BeforeEach(func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, exampleCRDs)).To(Succeed())
	})

	It("managed-database runs its four calls against the database API, keeping the snapshot's id", managedDatabaseSample)
})

// createHTTPSample creates the one TeardownPolicy of a sample in ns, as written but for base,
// the URL of the API it calls, which becomes the route of ns on the suite's loopback endpoint
// (as a user points a sample at their own API).
func createHTTPSample(ctx context.Context, file, base, ns string) *v1alpha1.TeardownPolicy {
	objs := loadSample(samplePath(file))
	Expect(objs).To(HaveLen(1))
	js, err := objs[0].MarshalJSON()
	Expect(err).NotTo(HaveOccurred())
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
	api.handle(ns, (&databaseAPI{inProgress: 1}).serve)
	createSecret(ctx, ns, "db-api", map[string]string{"token": dbToken})
	p := createHTTPSample(ctx, "managed-database.yaml", "https://db-api.example.com", ns)

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
	Eventually(gone(ctx, db), 45*time.Second).Should(BeTrue())
	run := runFor(ctx, db)()
	Expect(run).NotTo(BeNil())
	Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded), statusJSON(run))
	for _, s := range []string{"maintenance", "snapshot", "await-snapshot", "deprovision"} {
		Expect(run.Status.Step(s).Phase).To(Equal(v1alpha1.StepSucceeded), "step %s", s)
	}
	Expect(string(run.Status.Step("snapshot").Outputs["snapshotID"].Raw)).To(Equal(`"snap-7781"`))
	Expect(run.Status.Step("deprovision").Message).To(ContainSubstring("404 Not Found"), "404 counts as done")
	expectDatabaseCalls(ns, run)
}

// expectDatabaseCalls checks the requests the managed-database sample made, as the API saw them.
func expectDatabaseCalls(ns string, run *v1alpha1.TeardownRun) {
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
