package integration

import (
	"context"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// The AWS ACK S3 Bucket, as the real CRD (test/testdata/crds/ack-s3-bucket.yaml) serves it. No
// ACK controller runs here: the spec plays its part, with its finalizer on the Bucket and a watch
// that records when ACK would have seen the deletion (and deleted the bucket in AWS).
var ackBucketGVK = schema.GroupVersionKind{Group: "s3.services.k8s.aws", Version: "v1alpha1", Kind: "Bucket"}

// ackFinalizer is the finalizer ACK's S3 controller puts on every Bucket it manages.
const ackFinalizer = "finalizers.s3.services.k8s.aws/Bucket"

// ackBucket returns a Bucket for the S3 bucket bucketName, carrying ACK's finalizer, labelled
// for the sample when optIn.
func ackBucket(ns, name, bucketName string, optIn bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"name": bucketName}}}
	u.SetGroupVersionKind(ackBucketGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	if optIn {
		u.SetLabels(map[string]string{"teardown.dev/archive-on-delete": "true"})
	}
	return u
}

// setACKStatus writes the status ACK writes once it created the bucket in region.
func setACKStatus(ctx context.Context, b *unstructured.Unstructured, region string) {
	GinkgoHelper()
	Eventually(func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Object["status"] = map[string]any{
			"ackResourceMetadata": map[string]any{
				"ownerAccountID": "111122223333",
				"region":         region,
				"arn":            "arn:aws:s3:::" + b.Object["spec"].(map[string]any)["name"].(string),
			},
			"conditions": []any{map[string]any{"type": "ACK.ResourceSynced", "status": "True"}},
		}
		return k8s.Status().Update(ctx, b)
	}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
}

// ackBucketAlive checks that the Bucket exists and is not being deleted.
func ackBucketAlive(ctx context.Context, b *unstructured.Unstructured) {
	GinkgoHelper()
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(ackBucketGVK)
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), live)).To(Succeed())
	Expect(live.GetDeletionTimestamp()).To(BeNil(), "the Bucket must not be terminating: ACK would delete the S3 bucket now")
}

// releaseACKBucket lets a Bucket a failed spec left behind go (break glass, then ACK's part), so
// that the sample's policy, which waits for its objects, can be deleted after it.
func releaseACKBucket(ctx SpecContext, b *unstructured.Unstructured) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(ackBucketGVK)
	Eventually(func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(b), live); err != nil {
			return client.IgnoreNotFound(err)
		}
		ann := live.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[v1alpha1.AnnotationAbandon] = asRequest("spec cleanup")
		live.SetAnnotations(ann)
		live.SetFinalizers(slices.DeleteFunc(live.GetFinalizers(), func(f string) bool { return f == ackFinalizer }))
		if err := k8s.Update(ctx, live); err != nil {
			return err
		}
		return client.IgnoreNotFound(k8s.Delete(ctx, live))
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed())
	Eventually(gone(ctx, b), 20*time.Second).Should(BeTrue())
}

// ackStepJob reads the Job a step of the sample made for a Bucket in teardown-jobs (nil until made).
func ackStepJob(ctx context.Context, b client.Object, step string) func() *batchv1.Job {
	return func() *batchv1.Job {
		var jobs batchv1.JobList
		_ = k8s.List(ctx, &jobs, client.InNamespace("teardown-jobs"),
			client.MatchingLabels{v1alpha1.LabelTargetUID: string(b.GetUID()), v1alpha1.LabelStep: step})
		if len(jobs.Items) != 1 {
			return nil
		}
		return &jobs.Items[0]
	}
}

// envOf maps a container's plain environment variables to their values.
func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

var _ = Describe("Sample ack-bucket-two-phase", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
		installDeletionGuardPolicy(ctx)
		restartOperatorAsServiceAccount(ctx)
	})

	It("archives then empties an ACK Bucket's S3 bucket while the Bucket is alive, and deletes the Bucket only then", func() {
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown-jobs"}}))).To(Succeed())
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "teardown-jobs", Name: "s3-archiver"}}))).To(Succeed())
		policy := createSample(ctx, samplePath("ack-bucket-two-phase.yaml"), "")[0]
		expectReady(ctx, policy, metav1.ConditionTrue)
		finalizer := "clusterteardownpolicy.teardown.dev/ack-bucket-two-phase"

		ns := newNamespace(ctx)
		ack := startRacingController(ctx, ns, ackBucketGVK, nil)
		bucketName := ns + "-assets"
		b := ackBucket(ns, "assets", bucketName, true)
		b.SetFinalizers([]string{ackFinalizer}) // ACK's own, as its controller adds it
		Expect(k8s.Create(ctx, b, client.FieldValidation("Strict"))).To(Succeed(), "the real ACK CRD refused the Bucket")
		DeferCleanup(releaseACKBucket, b)
		setACKStatus(ctx, b, "eu-west-1")
		Eventually(finalizers(ctx, b), 10*time.Second).Should(ConsistOf(ackFinalizer, finalizer))
		Eventually(func() map[string]string { return labelsOf(ctx, b) }, 10*time.Second).
			Should(HaveKeyWithValue(v1alpha1.LabelDeletionGuard, v1alpha1.GuardDenyAlways))

		By("Buckets naming another namespace's bucket, or not opted in, are not protected")
		for name, u := range map[string]*unstructured.Unstructured{
			"longer-prefix": ackBucket(ns, "longer-prefix", ns+"-eu-assets", true), // namespace <ns>-eu's bucket "assets"
			"foreign":       ackBucket(ns, "foreign", "billing-prod-invoices", true),
			"no-label":      ackBucket(ns, "no-label", ns+"-logs", false),
		} {
			Expect(k8s.Create(ctx, u)).To(Succeed())
			expectUnprotected(ctx, u, "Bucket "+name)
			Expect(labelsOf(ctx, u)).NotTo(HaveKey(v1alpha1.LabelDeletionGuard), "Bucket %s", name)
			Expect(k8s.Delete(ctx, u)).To(Succeed(), "a plain delete of the unprotected Bucket %s", name)
		}

		By("a plain delete is refused, saying how to request it")
		Eventually(func() error { return k8s.Delete(ctx, b, client.DryRunAll) }, 10*time.Second).
			Should(MatchError(ContainSubstring("kubectl teardown delete bucket.s3.services.k8s.aws/assets -n " + ns + " --reason")))
		err := k8s.Delete(ctx, b)
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("ClusterTeardownPolicy/ack-bucket-two-phase"))
		Expect(err.Error()).To(ContainSubstring(v1alpha1.AnnotationDeleteRequested))
		ackBucketAlive(ctx, b)

		By("a request runs archive in teardown-jobs, with the Bucket alive")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), b)).To(Succeed())
		requestDelete(ctx, b, "alice: shop closed, INC-4312")
		archive := ackStepJob(ctx, b, "archive")
		Eventually(archive, 10*time.Second).ShouldNot(BeNil(), "no archive Job: %v", stepPhase(ctx, b, "archive")())
		j := archive()
		Expect(j.Spec.Template.Spec.ServiceAccountName).To(Equal("s3-archiver"))
		c := j.Spec.Template.Spec.Containers[0]
		Expect(c.Image).To(Equal("docker.io/amazon/aws-cli:2.17.0"))
		Expect(runArgs(ctx, "teardown-jobs", c)).To(Equal([]string{
			"aws", "s3", "sync", "s3://" + bucketName, "s3://example-teardown-archive/" + bucketName + "/",
			"--source-region", "eu-west-1", "--region", "us-east-1",
		}))
		Expect(envOf(c)).To(And(
			HaveKeyWithValue("TEARDOWN_TARGET_API_VERSION", "s3.services.k8s.aws/v1alpha1"),
			HaveKeyWithValue("TEARDOWN_TARGET_KIND", "Bucket"),
			HaveKeyWithValue("TEARDOWN_TARGET_NAMESPACE", ns),
			HaveKeyWithValue("TEARDOWN_TARGET_NAME", "assets"),
			HaveKeyWithValue("TEARDOWN_TARGET_UID", string(b.GetUID())),
			HaveKeyWithValue("TEARDOWN_STEP", "archive"),
		))
		run := runFor(ctx, b)()
		Expect(run).NotTo(BeNil())
		Expect(run.Spec.Trigger).To(Equal(v1alpha1.TriggerDeleteRequest))
		Expect(run.Status.RequestedBy).To(ContainSubstring(`"alice: shop closed, INC-4312"`))
		Consistently(func(g Gomega) {
			g.Expect(ackStepJob(ctx, b, "empty")()).To(BeNil(), "the bucket is emptied before its archive finished")
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(ackBucketGVK)
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), live)).To(Succeed())
			g.Expect(live.GetDeletionTimestamp()).To(BeNil(), "the Bucket is terminating while archive runs")
		}, time.Second, 100*time.Millisecond).Should(Succeed())

		By("once archive succeeded, empty runs, the Bucket still alive")
		finishJob(ctx, j, true)
		empty := ackStepJob(ctx, b, "empty")
		Eventually(empty, 10*time.Second).ShouldNot(BeNil(), "no empty Job: %v", stepPhase(ctx, b, "empty")())
		// The Job is made first, then the run's status records it (and archive's success).
		Eventually(stepPhase(ctx, b, "archive"), 5*time.Second).Should(Equal(v1alpha1.StepSucceeded))
		Eventually(stepPhase(ctx, b, "empty"), 5*time.Second).Should(Equal(v1alpha1.StepRunning))
		j = empty()
		Expect(j.Spec.Template.Spec.ServiceAccountName).To(Equal("s3-archiver"))
		c = j.Spec.Template.Spec.Containers[0]
		Expect(c.Image).To(Equal("docker.io/amazon/aws-cli:2.17.0"))
		Expect(runArgs(ctx, "teardown-jobs", c)).To(Equal([]string{
			"aws", "s3", "rm", "s3://" + bucketName, "--recursive", "--region", "eu-west-1",
		}))
		Expect(envOf(c)).To(And(HaveKeyWithValue("TEARDOWN_TARGET_NAME", "assets"), HaveKeyWithValue("TEARDOWN_STEP", "empty")))
		Consistently(stepPhase(ctx, b, "empty"), time.Second, 100*time.Millisecond).Should(Equal(v1alpha1.StepRunning))
		ackBucketAlive(ctx, b)
		Expect(ack.destroyedAt("assets").IsZero()).To(BeTrue(), "ACK saw a deletion before both steps succeeded")

		By("once empty succeeded the operator deletes the Bucket, and only then would ACK delete the bucket")
		emptied := time.Now()
		finishJob(ctx, j, true)
		Eventually(func() time.Time { return ack.destroyedAt("assets") }, 15*time.Second).ShouldNot(BeZero())
		Expect(ack.destroyedAt("assets")).To(BeTemporally(">=", emptied))
		Eventually(finalizers(ctx, b), 10*time.Second).Should(Equal([]string{ackFinalizer}), "only ACK's finalizer is left")
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(ackBucketGVK)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(b), live)).To(Succeed())
		Expect(live.GetDeletionTimestamp()).NotTo(BeNil())
		Expect(live.GetUID()).To(Equal(b.GetUID()))

		By("ACK deletes the bucket and removes its finalizer: the Bucket is gone")
		patch := client.MergeFromWithOptions(live.DeepCopy(), client.MergeFromWithOptimisticLock{})
		live.SetFinalizers(nil)
		Expect(k8s.Patch(ctx, live, patch)).To(Succeed())
		Eventually(gone(ctx, b), 10*time.Second).Should(BeTrue())

		done := runFor(ctx, b)()
		Expect(done.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		for _, s := range []string{"archive", "empty"} {
			Expect(done.Status.Step(s).Phase).To(Equal(v1alpha1.StepSucceeded), "step %s", s)
		}
		Expect(done.Status.Step("empty").CompletionTime.Time).To(BeTemporally("<=", ack.destroyedAt("assets").Add(time.Second)))
	})
})
