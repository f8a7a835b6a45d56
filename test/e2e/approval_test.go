package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// fakeDatabaseAPI is a local cloud database API for samples/managed-database.yaml, and the chat
// webhook its finally step posts to, which keeps every message.
type fakeDatabaseAPI struct {
	srv  *httptest.Server
	mu   sync.Mutex
	chat []string
}

func newFakeDatabaseAPI() *fakeDatabaseAPI {
	f := &fakeDatabaseAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case strings.HasPrefix(r.URL.Path, "/chat"):
			f.mu.Lock()
			f.chat = append(f.chat, string(body))
			f.mu.Unlock()
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/snapshots"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id": "snap-1"}`))
		case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/snapshots/"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id": "snap-1", "state": "Completed"}`))
		default: // maintenance, deprovision
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	return f
}

// messages returns the chat messages that mention text.
func (f *fakeDatabaseAPI) messages(text string) func() []string {
	return func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []string
		for _, m := range f.chat {
			if strings.Contains(m, text) {
				out = append(out, m)
			}
		}
		return out
	}
}

var _ = Describe("Approval and finally steps on a real control plane", func() {
	ctx := context.Background()

	It("tears a database down once a DBA approves with the plugin, keeps it on a rejection, and tells the chat once each", func() {
		fake := newFakeDatabaseAPI()
		DeferCleanup(fake.srv.Close)
		By("running the operator allowed to call the local API, with the admission policies and user roles installed")
		stopOperator()
		startOperatorArgs("--http-allowed-destinations", strings.TrimPrefix(fake.srv.URL, "http://"))
		DeferCleanup(func() { stopOperator(); startOperator() })
		Expect(framework.InstallAdmissionPolicies(ctx, k8s, root)).To(Succeed())
		Expect(framework.AwaitApprovalsTrusted(ctx, k8s)).To(Succeed())
		installYAML(ctx, filepath.Join(root, "config", "rbac", "user_roles.yaml"))
		Expect(framework.InstallCRDs(ctx, k8s, filepath.Join(root, "samples", "crds"))).To(Succeed())

		ns := newNamespace(ctx, "approve")
		for name, token := range map[string]string{"db-api": "Bearer db", "chat-webhook": "Bearer chat"} {
			Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"token": token}})).To(Succeed())
		}
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dba-approves"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "teardown-operator-approver"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "dba"}}})).To(Succeed())
		p := sampleWithURLs(ns, "managed-database.yaml", "https://db-api.example.com", fake.srv.URL,
			"https://chat.example.com/hooks/teardown", fake.srv.URL+"/chat")
		Eventually(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				return string(c.Status)
			}
			return ""
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("True"))

		deleteAndWaitForApproval := func(name string) (*unstructured.Unstructured, *v1alpha1.TeardownRun) {
			db := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.teardown.dev/v1", "kind": "ManagedDatabase",
				"metadata": map[string]any{"namespace": ns, "name": name}, "spec": map[string]any{"instanceID": "db-" + name}}}
			Expect(k8s.Create(ctx, db)).To(Succeed())
			Eventually(probe.Finalizers(ctx, db), 15*time.Second).Should(ContainElement("teardownpolicy.teardown.dev/managed-database"))
			Expect(k8s.Delete(ctx, db)).To(Succeed())
			Eventually(probe.StepPhase(ctx, db, "dba-approval"), 30*time.Second).Should(Equal(v1alpha1.StepRunning))
			return db, probe.RunFor(ctx, db)()
		}

		By("approving: the database goes, and the chat hears it once")
		orders, run := deleteAndWaitForApproval("orders")
		Consistently(probe.Gone(ctx, orders), 2*time.Second).Should(BeFalse(), "nothing goes before the approval")
		out, errOut, code := kubectlTeardown("approve", run.Name, "-n", ns, "--reason", "snapshot snap-1 checked", "--as", "dba-alice", "--as-group", "dba")
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(ContainSubstring("counted: step dba-approval is Succeeded: approved by dba-alice"))
		Eventually(probe.Gone(ctx, orders), 30*time.Second).Should(BeTrue())
		Eventually(fake.messages("(" + ns + "/orders)")).Should(HaveLen(1))
		Consistently(fake.messages("("+ns+"/orders)"), 3*time.Second).Should(HaveLen(1), "exactly one message")
		Expect(fake.messages("(" + ns + "/orders)")()[0]).To(MatchJSON(`{"text": "Teardown of database db-orders (` + ns + `/orders) Succeeded: all steps done; final snapshot snap-1; approved by dba-alice"}`))
		run = probe.RunFor(ctx, orders)()
		d := run.Status.Step("dba-approval").Approval.Decisions
		Expect(d).To(HaveLen(1))
		Expect(d[0].Approver.Username).To(Equal("dba-alice"))
		Expect(d[0].Approver.Groups).To(ContainElement("dba"))

		By("rejecting: the database stays, and the chat hears of the failure once")
		users, run := deleteAndWaitForApproval("users")
		_, errOut, code = kubectlTeardown("reject", run.Name, "-n", ns, "--reason", "restore test failed", "--as", "dba-bob", "--as-group", "dba")
		Expect(code).To(Equal(0), errOut)
		Eventually(probe.RunPhase(ctx, users), 30*time.Second).Should(Equal(v1alpha1.RunFailed))
		Eventually(fake.messages("(" + ns + "/users)")).Should(HaveLen(1))
		Consistently(fake.messages("("+ns+"/users)"), 3*time.Second).Should(HaveLen(1), "exactly one message")
		var msg struct{ Text string }
		Expect(json.Unmarshal([]byte(fake.messages("(" + ns + "/users)")()[0]), &msg)).To(Succeed())
		Expect(msg.Text).To(Equal("Teardown of database db-users (" + ns + "/users) Failed: step dba-approval failed: rejected by dba-bob: restore test failed; final snapshot snap-1"))
		Expect(probe.Gone(ctx, users)()).To(BeFalse(), "failurePolicy Retain keeps the database")
		Expect(probe.Finalizers(ctx, users)()).To(ContainElement("teardownpolicy.teardown.dev/managed-database"))
	})
})

// sampleWithURLs creates a sample's one TeardownPolicy in ns with URLs replaced (pairs of old
// and new), as a user points a sample at their own APIs.
func sampleWithURLs(ns, file string, urls ...string) *v1alpha1.TeardownPolicy {
	raw, err := os.ReadFile(filepath.Join(root, "samples", file))
	Expect(err).NotTo(HaveOccurred())
	for i := 0; i+1 < len(urls); i += 2 {
		Expect(bytes.Contains(raw, []byte(urls[i]))).To(BeTrue(), "%s does not call %s", file, urls[i])
		raw = bytes.ReplaceAll(raw, []byte(urls[i]), []byte(urls[i+1]))
	}
	p := &v1alpha1.TeardownPolicy{}
	Expect(utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(p)).To(Succeed())
	p.Namespace = ns
	Expect(k8s.Create(context.Background(), p)).To(Succeed())
	return p
}
