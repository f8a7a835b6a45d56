package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/uuid"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// samplesDir holds the policies users copy (samples/*.yaml).
var samplesDir = filepath.Join("..", "..", "samples")

// loadSample reads the objects of one sample file.
func loadSample(path string) []*unstructured.Unstructured {
	raw, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		Expect(err).NotTo(HaveOccurred(), "reading %s", path)
		js, err := yaml.YAMLToJSON(doc)
		Expect(err).NotTo(HaveOccurred(), "parsing %s", path)
		if len(bytes.TrimSpace(js)) == 0 || string(bytes.TrimSpace(js)) == "null" {
			continue // a document holding only comments
		}
		u := &unstructured.Unstructured{}
		Expect(u.UnmarshalJSON(js)).To(Succeed(), "decoding %s", path)
		objs = append(objs, u)
	}
	Expect(objs).NotTo(BeEmpty(), "%s holds no object", path)
	return objs
}

// createSample creates the objects of a sample: namespaced ones in ns, cluster-scoped ones
// cluster-wide (deleted, and waited for, when the spec ends). Unknown fields fail the create, so
// a sample cannot carry a field the CRDs would silently drop. It returns the teardown policies
// it created, typed.
func createSample(ctx context.Context, path, ns string) []client.Object {
	var policies []client.Object
	for _, u := range loadSample(path) {
		Expect(u.GetNamespace()).To(BeEmpty(), "%s: %s %s sets metadata.namespace; samples are applied with -n", path, u.GetKind(), u.GetName())
		var typed client.Object
		switch u.GetKind() {
		case "TeardownPolicy":
			u.SetNamespace(ns)
			typed = &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: u.GetName()}}
		case "ClusterTeardownPolicy":
			typed = &v1alpha1.ClusterTeardownPolicy{ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
		default:
			Fail(path + ": unexpected kind " + u.GetKind() + " in a sample; teach samples_test.go about it")
		}
		Expect(k8s.Create(ctx, u, client.FieldValidation("Strict"))).To(Succeed(), "%s: the API server refused %s %s", path, u.GetKind(), u.GetName())
		if u.GetNamespace() == "" {
			DeferCleanup(func(ctx SpecContext) {
				Expect(client.IgnoreNotFound(k8s.Delete(ctx, typed))).To(Succeed())
				Eventually(gone(ctx, typed), 30*time.Second).Should(BeTrue(), "%s %s was not deleted", u.GetKind(), u.GetName())
			})
		}
		policies = append(policies, typed)
	}
	return policies
}

func samplePath(name string) string { return filepath.Join(samplesDir, name) }

var _ = Describe("Samples", func() {
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(samplesDir, "*.yaml"))
	if err != nil {
		panic(err)
	}
	BeforeEach(func() {
		// The kinds samples protect that Kubernetes does not serve.
		Expect(framework.InstallCRDs(ctx, k8s, "testdata/examplecrds")).To(Succeed())
	})

	It("exist, each opening with a comment that says what it does", func() {
		Expect(files).NotTo(BeEmpty(), "no samples/*.yaml found")
		for _, f := range files {
			raw, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.HasPrefix(string(raw), "# ")).To(BeTrue(), "%s does not start with a header comment", f)
		}
	})

	for _, f := range files {
		It("admits "+filepath.Base(f)+" and reports it Ready", func() {
			ns := newNamespace(ctx)
			for _, p := range createSample(ctx, f, ns) {
				cond := expectReady(ctx, p, metav1.ConditionTrue)
				Expect(cond.Reason).To(Equal("Protecting"))
			}
		})
	}

	It("parent-waits-for-children holds a parent until its children are gone", func() {
		ns := newNamespace(ctx)
		policies := createSample(ctx, samplePath("parent-waits-for-children.yaml"), ns)
		expectReady(ctx, policies[0], metav1.ConditionTrue)

		parent := configMap(ns, "app", map[string]string{"role": "parent"})
		child := configMap(ns, "app-child", map[string]string{"parent": "app"})
		unrelated := configMap(ns, "other-child", map[string]string{"parent": "other"})
		for _, cm := range []*corev1.ConfigMap{parent, child, unrelated} {
			Expect(k8s.Create(ctx, cm)).To(Succeed())
		}
		Eventually(finalizers(ctx, parent), 10*time.Second).Should(ConsistOf("teardownpolicy.teardown.dev/parent-waits-for-children"))
		Expect(finalizers(ctx, child)()).To(BeEmpty(), "children are not targets")

		Expect(k8s.Delete(ctx, parent)).To(Succeed())
		Eventually(stepPhase(ctx, parent, "wait-for-children"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Consistently(gone(ctx, parent), 2*time.Second).Should(BeFalse(), "the parent went while its child exists")

		By("deleting the child (the child of another parent does not count)")
		Expect(k8s.Delete(ctx, child)).To(Succeed())
		Eventually(gone(ctx, parent), 10*time.Second).Should(BeTrue())
		Expect(runPhase(ctx, parent)()).To(Equal(v1alpha1.RunSucceeded))
	})

	It("managed-database runs its four calls against the database API, keeping the snapshot's id", func() {
		ns := newNamespace(ctx)
		api.handle(ns, (&databaseAPI{inProgress: 2}).serve)
		createSecret(ctx, ns, "db-api", map[string]string{"token": dbToken})
		objs := loadSample(samplePath("managed-database.yaml"))
		Expect(objs).To(HaveLen(1))
		// The sample, pointed at the loopback API and polling every second instead of 15s.
		js, err := objs[0].MarshalJSON()
		Expect(err).NotTo(HaveOccurred())
		js = bytes.ReplaceAll(js, []byte("https://db-api.example.com"), []byte(api.url(ns, "")))
		js = bytes.ReplaceAll(js, []byte(`"interval":"15s"`), []byte(`"interval":"1s"`))
		p := &v1alpha1.TeardownPolicy{}
		Expect(json.Unmarshal(js, p)).To(Succeed())
		p.Namespace = ns
		Expect(k8s.Create(ctx, p, client.FieldValidation("Strict"))).To(Succeed())
		expectReady(ctx, p, metav1.ConditionTrue)

		db := managedDatabase(ns, "orders", "db-42")
		Expect(k8s.Create(ctx, db)).To(Succeed())
		Eventually(finalizers(ctx, db), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		Expect(k8s.Delete(ctx, db)).To(Succeed())
		Eventually(gone(ctx, db), 30*time.Second).Should(BeTrue())
		run := runFor(ctx, db)()
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
		Expect(string(run.Status.Step("snapshot").Outputs["snapshotID"].Raw)).To(Equal(`"snap-7781"`))
		Expect(api.calls(ns, "GET ")()).To(Equal(3))
		Expect(api.calls(ns, "DELETE ")()).To(Equal(1))
	})

	It("statefulset-pod holds StatefulSet pods in selected namespaces until their claims are released", func() {
		selected, other := newNamespace(ctx), newNamespace(ctx)
		update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: selected}}, func(n *corev1.Namespace) {
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels["teardown.dev/statefulset-teardown"] = "enabled"
		})
		policies := createSample(ctx, samplePath("statefulset-pod.yaml"), "")
		expectReady(ctx, policies[0], metav1.ConditionTrue)
		finalizer := "clusterteardownpolicy.teardown.dev/statefulset-pod"

		db := map[string]string{"app.kubernetes.io/component": "database"}
		owned := pod(selected, "db-0", db, "StatefulSet")
		bare := pod(selected, "bare", db, "")
		ofDeployment := pod(selected, "web-abc", db, "ReplicaSet")
		elsewhere := pod(other, "db-0", db, "StatefulSet")
		for _, p := range []*corev1.Pod{owned, bare, ofDeployment, elsewhere} {
			Expect(k8s.Create(ctx, p)).To(Succeed())
		}
		Eventually(finalizers(ctx, owned), 10*time.Second).Should(ConsistOf(finalizer))
		Consistently(finalizers(ctx, bare), 2*time.Second).Should(BeEmpty(), "a Pod no StatefulSet owns is not a target")
		Expect(finalizers(ctx, ofDeployment)()).To(BeEmpty(), "a Pod of a ReplicaSet is not a target")
		Expect(finalizers(ctx, elsewhere)()).To(BeEmpty(), "namespaceSelector must leave other namespaces alone")

		claim := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: selected, Name: "data-db-0", Labels: map[string]string{"storage.example.com/pod": "db-0"}},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		Expect(k8s.Create(ctx, claim)).To(Succeed())

		Expect(k8s.Delete(ctx, owned)).To(Succeed())
		Eventually(stepPhase(ctx, owned, "wait-for-volume-release"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
		Consistently(gone(ctx, owned), 2*time.Second).Should(BeFalse(), "the Pod went before its claim was released")

		By("releasing the claim")
		update(ctx, claim, func(c *corev1.PersistentVolumeClaim) {
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations["storage.example.com/released"] = "true"
		})
		Eventually(gone(ctx, owned), 10*time.Second).Should(BeTrue())
		Expect(runPhase(ctx, owned)()).To(Equal(v1alpha1.RunSucceeded))
		Expect(stepPhase(ctx, owned, "wait-for-volume-release")()).To(Equal(v1alpha1.StepSucceeded))
	})
})

var _ = Describe("Job samples", func() {
	ctx := context.Background()
	BeforeEach(func() {
		Expect(framework.InstallCRDs(ctx, k8s, "testdata/examplecrds")).To(Succeed())
	})

	It("database-dump-job runs pg_dump as a Job before a postgres database goes", func() {
		ns := newNamespace(ctx)
		policies := createSample(ctx, samplePath("database-dump-job.yaml"), ns)
		p := policies[0].(*v1alpha1.TeardownPolicy)
		expectReady(ctx, p, metav1.ConditionTrue)
		db := managedDatabase(ns, "orders", "db-42")
		Expect(unstructured.SetNestedField(db.Object, "postgres", "spec", "engine")).To(Succeed())
		Expect(unstructured.SetNestedField(db.Object, "large", "spec", "tier")).To(Succeed())
		Expect(k8s.Create(ctx, db)).To(Succeed())
		Eventually(finalizers(ctx, db), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		Expect(k8s.Delete(ctx, db)).To(Succeed())

		job := jobOf(ctx, p, db, "final-dump", 1)
		Eventually(job, 10*time.Second).ShouldNot(BeNil())
		pod := job().Spec.Template.Spec
		Expect(pod.ServiceAccountName).To(Equal("db-backup"))
		c := pod.Containers[0]
		Expect(c.Command[2]).To(Equal(`pg_dump --no-owner "${DATABASE_URL}" | gzip | aws s3 cp - "s3://example-backups/${TEARDOWN_TARGET_NAMESPACE}/${TEARDOWN_TARGET_NAME}/${TEARDOWN_RUN_UID}.sql.gz"`))
		Expect(c.Env).To(ContainElement(And(HaveField("Name", "TEARDOWN_TARGET_NAME"), HaveField("Value", "orders"))))
		Expect(c.Env).To(ContainElement(HaveField("ValueFrom.SecretKeyRef.Name", "orders-db")))
		Expect(c.Resources.Limits.Memory().String()).To(Equal("4Gi"))
		Expect(*job().Spec.ActiveDeadlineSeconds).To(BeNumerically("~", 3570, 5), "the step timeout less a 30s margin")
		Expect(job().Annotations).To(HaveKeyWithValue("example.com/database", ns+"/orders"))

		finishJob(ctx, job(), true)
		Eventually(gone(ctx, db), 10*time.Second).Should(BeTrue())
		Expect(runPhase(ctx, db)()).To(Equal(v1alpha1.RunSucceeded))
		Eventually(func() *int32 { return job().Spec.TTLSecondsAfterFinished }, 5*time.Second).Should(HaveValue(Equal(int32(86400))))
	})

	It("bucket-empty-job empties a bucket from another namespace while the bucket's namespace is deleted", func() {
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown-jobs"}}))).To(Succeed())
		policies := createSample(ctx, samplePath("bucket-empty-job.yaml"), "")
		expectReady(ctx, policies[0], metav1.ConditionTrue)
		ns := newNamespace(ctx)
		bucket := &unstructured.Unstructured{}
		bucket.SetAPIVersion("example.teardown.dev/v1")
		bucket.SetKind("Bucket")
		bucket.SetNamespace(ns)
		bucket.SetName("assets")
		bucket.SetLabels(map[string]string{"teardown.dev/empty-on-delete": "true"})
		Expect(unstructured.SetNestedField(bucket.Object, ns+"-assets", "spec", "bucketName")).To(Succeed())
		Expect(k8s.Create(ctx, bucket)).To(Succeed())
		Eventually(finalizers(ctx, bucket), 10*time.Second).Should(ContainElement("clusterteardownpolicy.teardown.dev/bucket-empty-job"))

		By("a Bucket naming a bucket outside its namespace's prefix is not protected (nor emptied)")
		foreign := bucket.DeepCopy()
		foreign.SetName("foreign")
		foreign.SetResourceVersion("")
		Expect(unstructured.SetNestedField(foreign.Object, "billing-prod-invoices", "spec", "bucketName")).To(Succeed())
		Expect(k8s.Create(ctx, foreign)).To(Succeed())
		Consistently(finalizers(ctx, foreign), 2*time.Second).Should(BeEmpty())
		Expect(k8s.Delete(ctx, foreign)).To(Succeed())

		By("deleting the namespace (envtest has no namespace controller: the test deletes the bucket itself)")
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(k8s.Delete(ctx, bucket)).To(Succeed())
		var jobs batchv1.JobList
		Eventually(func() []batchv1.Job {
			_ = k8s.List(ctx, &jobs, client.InNamespace("teardown-jobs"), client.MatchingLabels{engine.LabelTargetUID: string(bucket.GetUID())})
			return jobs.Items
		}, 10*time.Second).Should(HaveLen(1))
		j := &jobs.Items[0]
		Expect(j.Spec.Template.Spec.ServiceAccountName).To(Equal("bucket-cleaner"))
		Expect(j.Spec.Template.Spec.Containers[0].Args).To(Equal([]string{"s3", "rm", "s3://" + ns + "-assets", "--recursive", "--region", "us-east-1"}))
		finishJob(ctx, j, true)
		Eventually(gone(ctx, bucket), 10*time.Second).Should(BeTrue())
		run := runFor(ctx, bucket)()
		Expect(run.Namespace).To(Equal(runNamespace))
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
	})
})

// pod returns a Pod owned by a (made-up) controller of ownerKind, or by none when it is empty.
func pod(ns, name string, labels map[string]string, ownerKind string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "example.invalid/db"}}},
	}
	if ownerKind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: ownerKind, Name: strings.TrimSuffix(name, "-0"), UID: uuid.NewUUID(), Controller: ptr.To(true),
		}}
	}
	return p
}
