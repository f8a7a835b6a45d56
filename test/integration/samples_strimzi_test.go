package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// The Strimzi KafkaTopic, as the real CRD (test/testdata/crds/strimzi-kafkatopic.yaml) serves it
// at v1. No Strimzi runs here: the spec plays its Topic Operator, with its finalizer on every
// KafkaTopic and a watch that records when it would have deleted the topic in Kafka.
var strimziTopicGVK = schema.GroupVersionKind{Group: "kafka.strimzi.io", Version: "v1", Kind: "KafkaTopic"}

// strimziFinalizer is the finalizer Strimzi's Topic Operator puts on every KafkaTopic it manages.
const strimziFinalizer = "strimzi.io/topic-operator"

// strimziTopic returns a KafkaTopic of the Kafka cluster my-cluster carrying the Topic
// Operator's finalizer, labelled for the sample when optIn.
func strimziTopic(ns, name string, optIn bool, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(strimziTopicGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	labels := map[string]string{"strimzi.io/cluster": "my-cluster"}
	if optIn {
		labels["teardown.dev/export-on-delete"] = "true"
	}
	u.SetLabels(labels)
	u.SetFinalizers([]string{strimziFinalizer})
	return u
}

// removeStrimziFinalizer takes the Topic Operator's finalizer off a KafkaTopic, retrying on conflicts
// with the teardown operator, which removes its own at about the same time.
func removeStrimziFinalizer(ctx context.Context, key client.ObjectKey) {
	for range 50 {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(strimziTopicGVK)
		if err := k8s.Get(ctx, key, live); err != nil {
			return // gone
		}
		var keep []string
		for _, f := range live.GetFinalizers() {
			if f != strimziFinalizer {
				keep = append(keep, f)
			}
		}
		if len(keep) == len(live.GetFinalizers()) {
			return
		}
		patch := client.MergeFromWithOptions(live.DeepCopy(), client.MergeFromWithOptimisticLock{})
		live.SetFinalizers(keep)
		if err := k8s.Patch(ctx, live, patch); err == nil || apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// strimziTopicAlive checks that the KafkaTopic exists and is not being deleted.
func strimziTopicAlive(ctx context.Context, t *unstructured.Unstructured) {
	GinkgoHelper()
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(strimziTopicGVK)
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(t), live)).To(Succeed())
	Expect(live.GetDeletionTimestamp()).To(BeNil(), "the KafkaTopic must not be terminating: Strimzi would delete the topic in Kafka now")
}

// strimziRegistry is the consumers' registry the sample notifies, on the suite's endpoint under
// ns: a POST registers the retirement of a topic (its consumers not yet done), a GET of it says
// they have all acknowledged.
func strimziRegistry(ns string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /" + ns + "/v1/topic-retirements":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id": "ret-1", "state": "Pending", "consumers": ["billing", "search"]}`))
		case "GET /" + ns + "/v1/topic-retirements/ret-1":
			_, _ = w.Write([]byte(`{"id": "ret-1", "state": "Acknowledged"}`))
		default:
			http.Error(w, `{"error": "no such route"}`, http.StatusNotFound)
		}
	}
}

var _ = Describe("Sample strimzi-topic-two-phase", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
		installDeletionGuardPolicy(ctx)
		restartOperatorAsServiceAccount(ctx)
	})

	It("refuses a plain delete of a KafkaTopic, and on request notifies its consumers and exports their offsets before Strimzi sees a deletion", func() {
		ns := newNamespace(ctx)
		topicOperator := startRacingController(ctx, ns, strimziTopicGVK, removeStrimziFinalizer)
		api.handle(ns, strimziRegistry(ns))
		createSecret(ctx, ns, "consumer-registry", map[string]string{"token": "Bearer registry-token-4711"})
		p := createHTTPSample(ctx, "strimzi-topic-two-phase.yaml", "https://consumers.example.internal", ns)

		orders := strimziTopic(ns, "orders", true, map[string]any{"topicName": "orders.v1", "partitions": int64(6), "replicas": int64(3)})
		scratch := strimziTopic(ns, "scratch", false, map[string]any{"partitions": int64(1)})
		sneaky := strimziTopic(ns, "sneaky", true, map[string]any{"topicName": "../billing/orders"})
		legacy := strimziTopic(ns, "legacy", true, map[string]any{"partitions": int64(1)})
		legacy.SetAnnotations(map[string]string{"strimzi.io/managed": "false"})
		for _, t := range []*unstructured.Unstructured{orders, scratch, sneaky, legacy} {
			Expect(k8s.Create(ctx, t, client.FieldValidation("Strict"))).To(Succeed(), "the KafkaTopic CRD refused %s", t.GetName())
		}
		Eventually(finalizers(ctx, orders), 10*time.Second).Should(ConsistOf(strimziFinalizer, finalizerOf(p)))
		Eventually(func() map[string]string { return labelsOf(ctx, orders) }, 10*time.Second).
			Should(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways))

		By("KafkaTopics not labelled for it, with a topic name that would change a path, or that Strimzi does not manage, are not protected")
		for _, t := range []*unstructured.Unstructured{scratch, sneaky, legacy} {
			Consistently(finalizers(ctx, t), 2*time.Second).Should(ConsistOf(strimziFinalizer), t.GetName())
			Expect(eventReasons(ctx, t)()).NotTo(ContainElement(v1alpha1.ReasonMatchFailed), "%s: the match must not fail to evaluate", t.GetName())
			Expect(labelsOf(ctx, t)).NotTo(HaveKey(v1alpha1.LabelDeletionGuard), t.GetName())
		}
		Expect(k8s.Delete(ctx, scratch)).To(Succeed(), "an unprotected KafkaTopic is deleted as usual")
		Eventually(gone(ctx, scratch), 10*time.Second).Should(BeTrue())

		By("a plain delete of the protected KafkaTopic is refused, saying how to request it")
		Eventually(func() error { return k8s.Delete(ctx, orders, client.DryRunAll) }, 10*time.Second).
			Should(MatchError(ContainSubstring("kubectl teardown delete kafkatopic.kafka.strimzi.io/orders -n " + ns + " --reason")))
		err := k8s.Delete(ctx, orders)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(v1alpha1.AnnotationDeleteRequested))
		strimziTopicAlive(ctx, orders)
		Expect(api.requests(ns)).To(BeEmpty(), "a refused delete runs nothing")

		By("a request notifies the consumers and starts the export while the KafkaTopic is alive")
		requestDelete(ctx, orders, "alice: orders.v1 retired, INC-4312")
		job := jobOf(ctx, p, orders, "export-offsets", 1)
		Eventually(job, 15*time.Second).ShouldNot(BeNil(), "no export Job: %v", stepPhase(ctx, orders, "notify-consumers")())
		strimziTopicAlive(ctx, orders)
		Expect(topicOperator.destroyedAt("orders").IsZero()).To(BeTrue(), "Strimzi saw a deletion before the steps succeeded")
		run := runFor(ctx, orders)()
		Expect(run).NotTo(BeNil())
		Expect(run.Spec.Trigger).To(Equal(v1alpha1.TriggerDeleteRequest))
		Expect(run.Status.RequestedBy).To(ContainSubstring(`"alice: orders.v1 retired, INC-4312"`))
		Expect(run.Status.Step("notify-consumers").Phase).To(Equal(v1alpha1.StepSucceeded))
		Expect(string(run.Status.Step("notify-consumers").Outputs["retirementID"].Raw)).To(Equal(`"ret-1"`))
		Expect(run.Status.Step("await-acknowledgements").Phase).To(Equal(v1alpha1.StepSucceeded))
		expectStrimziRegistryCalls(ns, run)

		By("the export Job runs the Strimzi image's kafka-consumer-groups.sh with the topic and cluster as data, into the claim")
		expectStrimziExportJob(ctx, job(), run)
		Consistently(gone(ctx, orders), time.Second).Should(BeFalse(), "the KafkaTopic went before its export finished")
		strimziTopicAlive(ctx, orders)

		By("once the export succeeded the operator deletes the KafkaTopic, and only then does Strimzi act")
		finishJob(ctx, job(), true)
		Eventually(gone(ctx, orders), 15*time.Second).Should(BeTrue())
		deleted := topicOperator.destroyedAt("orders")
		Expect(deleted).NotTo(BeZero())
		done := runFor(ctx, orders)()
		Expect(done.Status.Phase).To(Equal(v1alpha1.RunSucceeded), statusJSON(done))
		for _, s := range []string{"notify-consumers", "await-acknowledgements", "export-offsets"} {
			Expect(done.Status.Step(s).Phase).To(Equal(v1alpha1.StepSucceeded), "step %s", s)
		}
		exported := done.Status.Step("export-offsets").CompletionTime.Time
		Expect(deleted).To(BeTemporally(">=", exported.Truncate(time.Second)), "the KafkaTopic was being deleted before the export succeeded")
		Expect(api.requests(ns)[0].At).To(BeTemporally("<", deleted))
		Expect(eventReasons(ctx, done)()).To(ContainElements(v1alpha1.ReasonDeleteRequested, v1alpha1.ReasonSucceeded))
		Expect(eventReasons(ctx, done)()).NotTo(ContainElement(v1alpha1.ReasonDeleteFailed), "the DELETE of a kind outside the operator's scheme is no failure")
		Eventually(func() *int32 { return job().Spec.TTLSecondsAfterFinished }, 5*time.Second).Should(HaveValue(Equal(int32(86400))))
	})
})

// expectStrimziRegistryCalls checks what the registry received: the retirement, with the topic
// and cluster in its body, then one look at it.
func expectStrimziRegistryCalls(ns string, run *v1alpha1.TeardownRun) {
	GinkgoHelper()
	reqs := api.requests(ns)
	var lines []string
	for _, r := range reqs {
		lines = append(lines, r.Method+" "+r.Path)
	}
	Expect(lines).To(Equal([]string{
		"POST /" + ns + "/v1/topic-retirements",
		"GET /" + ns + "/v1/topic-retirements/ret-1",
	}))
	Expect(reqs[0].Body).To(MatchJSON(`{"cluster": "my-cluster", "namespace": "` + ns + `", "kafkaTopic": "orders", "topic": "orders.v1"}`))
	Expect(reqs[0].Header.Get("Content-Type")).To(Equal("application/json"))
	for i, step := range []string{"notify-consumers", "await-acknowledgements"} {
		Expect(reqs[i].Header.Get("Authorization")).To(Equal("Bearer registry-token-4711"), "request %d", i)
		Expect(reqs[i].Header.Get(httpstep.HeaderIdempotencyKey)).To(Equal(httpstep.IdempotencyKey(deletionID(run), step, 0)), "request %d", i)
	}
}

// expectStrimziExportJob checks the export Job of the sample for the KafkaTopic orders (topic
// orders.v1 of my-cluster), and runs its script as the kubelet would, with bash, against a
// stand-in for kafka-consumer-groups.sh.
func expectStrimziExportJob(ctx context.Context, job *batchv1.Job, run *v1alpha1.TeardownRun) {
	GinkgoHelper()
	ns := job.Namespace
	Expect(job.Annotations).To(HaveKeyWithValue("example.com/kafka-topic", ns+"/orders"))
	Expect(*job.Spec.ActiveDeadlineSeconds).To(BeNumerically("~", 870, 5), "the step's 15m less a 30s margin")
	pod := job.Spec.Template.Spec
	Expect(pod.AutomountServiceAccountToken).To(HaveValue(BeFalse()), "the Job needs no Kubernetes API token")
	Expect(pod.Volumes).To(HaveLen(1))
	Expect(pod.Volumes[0].PersistentVolumeClaim).NotTo(BeNil())
	Expect(pod.Volumes[0].PersistentVolumeClaim.ClaimName).To(Equal("kafka-offset-exports"))
	Expect(pod.Containers).To(HaveLen(1))
	c := pod.Containers[0]
	Expect(c.Image).To(Equal("quay.io/strimzi/kafka:0.49.1-kafka-4.1.1"))
	Expect(c.VolumeMounts).To(ConsistOf(And(HaveField("Name", pod.Volumes[0].Name), HaveField("MountPath", "/exports"))))

	env := containerEnv(c)
	Expect(env).To(HaveKeyWithValue("KAFKA_CLUSTER", "my-cluster"))
	Expect(env).To(HaveKeyWithValue("TOPIC", "orders.v1"))
	Expect(env).To(HaveKeyWithValue("BOOTSTRAP", "my-cluster-kafka-bootstrap:9092"))
	Expect(env).To(HaveKeyWithValue("EXPORT_DIR", "/exports"))
	Expect(env).To(HaveKeyWithValue("TEARDOWN_RUN_UID", string(run.UID)))
	args := runArgs(ctx, ns, c)
	Expect(args).To(HaveLen(3))
	Expect(args[:2]).To(Equal([]string{"/bin/bash", "-c"}))
	script := args[2]
	Expect(script).To(HavePrefix("set -euo pipefail\n"))
	for _, value := range []string{"orders", "my-cluster"} {
		Expect(script).NotTo(ContainSubstring(value), "a value of the KafkaTopic is part of the script")
	}

	By("running the Job's script with bash against a stand-in kafka-consumer-groups.sh")
	describe := "\n" +
		"GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID\n" +
		"billing         orders.v1       0          41              42              1               -               -               -\n" +
		"billing         orders.v1       1          17              17              0               -               -               -\n" +
		"billing         payments        0          5               5               0               -               -               -\n" +
		"\n" +
		"GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID\n" +
		"search          orders.v1       0          40              42              2               consumer-1-ab   /10.1.2.3       consumer-1\n" +
		"search          orders.v10      0          3               3               0               -               -               -\n"
	dir, code := runStrimziExportScript(args, env, describe)
	Expect(code).To(Equal(0))
	Expect(os.ReadFile(filepath.Join(dir, "kafka", "args"))).To(Equal([]byte("--bootstrap-server my-cluster-kafka-bootstrap:9092 --describe --all-groups --offsets\n")))
	csv, err := os.ReadFile(filepath.Join(dir, "exports", "my-cluster", "orders.v1", string(run.UID)+".csv"))
	Expect(err).NotTo(HaveOccurred())
	Expect(string(csv)).To(Equal("group,topic,partition,current-offset,log-end-offset,lag\n" +
		"billing,orders.v1,0,41,42,1\n" +
		"billing,orders.v1,1,17,17,0\n" +
		"search,orders.v1,0,40,42,2\n"))

	By("the script fails when kafka-consumer-groups.sh reports an error (it exits 0 when it does)")
	dir, code = runStrimziExportScript(args, env, "\nError: Executing consumer group command failed due to org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment. Call: listGroups\n")
	Expect(code).NotTo(Equal(0))
	Expect(filepath.Join(dir, "exports", "my-cluster", "orders.v1", string(run.UID)+".csv")).NotTo(BeAnExistingFile(), "a failed export left a file that looks complete")

	By("the script refuses a topic name that would change the path (should one reach it)")
	bad := map[string]string{}
	for k, v := range env {
		bad[k] = v
	}
	bad["TOPIC"] = "../billing"
	dir, code = runStrimziExportScript(args, bad, describe)
	Expect(code).To(Equal(2))
	Expect(filepath.Join(dir, "kafka", "args")).NotTo(BeAnExistingFile(), "kafka-consumer-groups.sh ran for a refused topic name")
}

// containerEnv returns a container's plain environment as the kubelet sets it: each value with
// the $(NAME) references to the variables before it expanded.
func containerEnv(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = expandEnv(e.Value, env)
		}
	}
	return env
}

// runStrimziExportScript runs the export Job's command line (args, as the kubelet would run it)
// in a temporary directory standing for the pod: KAFKA_HOME holds a kafka-consumer-groups.sh that
// records its arguments and prints describe, EXPORT_DIR is the claim. It returns the directory
// and the exit code.
func runStrimziExportScript(args []string, env map[string]string, describe string) (string, int) {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	for _, d := range []string{"kafka/bin", "exports", "tmp"} {
		Expect(os.MkdirAll(filepath.Join(dir, d), 0o755)).To(Succeed())
	}
	Expect(os.WriteFile(filepath.Join(dir, "kafka", "describe"), []byte(describe), 0o644)).To(Succeed())
	tool := "#!/bin/bash\necho \"$*\" >\"$KAFKA_HOME/args\"\ncat \"$KAFKA_HOME/describe\"\n"
	Expect(os.WriteFile(filepath.Join(dir, "kafka", "bin", "kafka-consumer-groups.sh"), []byte(tool), 0o755)).To(Succeed())

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "KAFKA_HOME="+filepath.Join(dir, "kafka"), "EXPORT_DIR="+filepath.Join(dir, "exports"), "TMPDIR="+filepath.Join(dir, "tmp"))
	out, err := cmd.CombinedOutput()
	GinkgoWriter.Printf("export script output:\n%s\n", out)
	if exit, ok := err.(*exec.ExitError); ok {
		return dir, exit.ExitCode()
	}
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.TrimSpace(string(out))).NotTo(BeEmpty())
	return dir, 0
}
