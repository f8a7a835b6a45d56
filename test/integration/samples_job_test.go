package integration

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// envtest runs no Job controller: these specs check the Job the operator creates, as the
// kubelet would run it, and then write the status the Job controller would write.

var _ = Describe("Samples with job steps", func() {
	BeforeEach(func(ctx SpecContext) {
		Expect(framework.InstallCRDs(ctx, k8s, exampleCRDs)).To(Succeed())
	})

	It("configmap-grace announces, drains prod ConfigMaps with a Job, skips the rest, settles", configMapGrace)
	It("database-dump-job dumps a postgres database with pg_dump and uploads the dump, with or without a tier", databaseDumpJob)
	It("bucket-empty-job empties a bucket from another namespace while the bucket's namespace is deleted", bucketEmptyJob)
	It("bucket-empty-job does not empty a bucket named just before the delete, too late to drop the finalizer", bucketSwappedBeforeDelete)
})

// runArgs returns a container's command and args as the kubelet runs them: $(NAME) expanded
// from the container's environment (values, and Secret keys read from ns), $$ as $.
func runArgs(ctx context.Context, ns string, c corev1.Container) []string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			sec := &corev1.Secret{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, sec)).To(Succeed(), "container %s: env %s", c.Name, e.Name)
			Expect(sec.Data).To(HaveKey(ref.Key), "container %s: env %s", c.Name, e.Name)
			env[e.Name] = string(sec.Data[ref.Key])
		}
	}
	var out []string
	for _, s := range append(append([]string(nil), c.Command...), c.Args...) {
		out = append(out, expandEnv(s, env))
	}
	return out
}

// expandEnv expands $(NAME) references in s as Kubernetes does: a defined variable is replaced,
// an undefined reference is left as it is, and $$ is a literal $.
func expandEnv(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] != '$' || i+1 == len(s):
			b.WriteByte(s[i])
		case s[i+1] == '$':
			b.WriteByte('$')
			i++
		case s[i+1] == '(' && strings.IndexByte(s[i+2:], ')') >= 0:
			end := i + 2 + strings.IndexByte(s[i+2:], ')')
			if v, ok := env[s[i+2:end]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : end+1])
			}
			i = end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func configMapGrace(ctx SpecContext) {
	ns := newNamespace(ctx)
	p := createSample(ctx, samplePath("configmap-grace.yaml"), ns)[0].(*v1alpha1.TeardownPolicy)
	expectReady(ctx, p, metav1.ConditionTrue)
	prod := configMap(ns, "settings", map[string]string{"teardown.dev/sample": "grace", "tier": "prod"})
	plain := configMap(ns, "scratch", map[string]string{"teardown.dev/sample": "grace"}) // no tier label
	for _, cm := range []*corev1.ConfigMap{prod, plain} {
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		Eventually(finalizers(ctx, cm), 10*time.Second).Should(ContainElement(finalizerOf(p)))
		Expect(k8s.Delete(ctx, cm)).To(Succeed())
	}

	By("the ConfigMap without the tier label skips drain and goes after announce and settle")
	Eventually(gone(ctx, plain), 20*time.Second).Should(BeTrue())
	Expect(runPhase(ctx, plain)()).To(Equal(v1alpha1.RunSucceeded))
	Expect(stepOf(ctx, plain, "drain").Phase).To(Equal(v1alpha1.StepSkipped), "a missing label is a no, not an error")
	Expect(jobOf(ctx, p, plain, "drain", 1)()).To(BeNil())

	By("the prod ConfigMap's drain Job runs busybox with the ConfigMap's name as an argument")
	job := jobOf(ctx, p, prod, "drain", 1)
	Eventually(job, 10*time.Second).ShouldNot(BeNil())
	Expect(stepOf(ctx, prod, "announce").Phase).To(Equal(v1alpha1.StepSucceeded))
	j := job()
	Expect(*j.Spec.BackoffLimit).To(BeZero())
	Expect(j.Spec.Template.Annotations).To(HaveKeyWithValue("teardown.dev/kwok-duration", "3s"))
	c := j.Spec.Template.Spec.Containers[0]
	Expect(c.Image).To(Equal("docker.io/library/busybox:1.36"))
	Expect(runArgs(ctx, ns, c)).To(Equal([]string{"sh", "-c", `echo "draining $1"; sleep 3`, "drain", ns + "/settings"}))
	Consistently(gone(ctx, prod), time.Second).Should(BeFalse(), "the ConfigMap went before its Job finished")

	finishJob(ctx, j, true)
	Eventually(gone(ctx, prod), 15*time.Second).Should(BeTrue())
	run := runFor(ctx, prod)()
	Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
	for _, s := range []string{"announce", "drain", "settle"} {
		Expect(run.Status.Step(s).Phase).To(Equal(v1alpha1.StepSucceeded), "step %s", s)
	}
	Eventually(func() *int32 { return job().Spec.TTLSecondsAfterFinished }, 5*time.Second).Should(HaveValue(Equal(int32(600))))
}

func databaseDumpJob(ctx SpecContext) {
	ns := newNamespace(ctx)
	p := createSample(ctx, samplePath("database-dump-job.yaml"), ns)[0].(*v1alpha1.TeardownPolicy)
	expectReady(ctx, p, metav1.ConditionTrue)
	large := exampleObject(ns, "ManagedDatabase", "orders", map[string]any{"instanceID": "db-42", "engine": "postgres", "tier": "large"})
	plain := exampleObject(ns, "ManagedDatabase", "billing", map[string]any{"instanceID": "db-43", "engine": "postgres"})
	noEngine := exampleObject(ns, "ManagedDatabase", "cache", map[string]any{"instanceID": "db-44"})
	for _, db := range []*unstructured.Unstructured{large, plain, noEngine} {
		// The Secret the database's own operator would create for it.
		createSecret(ctx, ns, db.GetName()+"-db", map[string]string{"url": "postgresql://backup@" + db.GetName() + "-db:5432/app"})
		Expect(k8s.Create(ctx, db)).To(Succeed())
	}
	Eventually(finalizers(ctx, large), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	Eventually(finalizers(ctx, plain), 10*time.Second).Should(ContainElement(finalizerOf(p)))
	expectUnprotected(ctx, noEngine, "a database without spec.engine is not a postgres database")

	jobs := map[*unstructured.Unstructured]func() *batchv1.Job{}
	for db, memory := range map[*unstructured.Unstructured]string{large: "4Gi", plain: "1Gi"} {
		Expect(k8s.Delete(ctx, db)).To(Succeed())
		jobs[db] = jobOf(ctx, p, db, "final-dump", 1)
		Eventually(jobs[db], 10*time.Second).ShouldNot(BeNil(), "no Job for %s: %v", db.GetName(), stepPhase(ctx, db, "final-dump")())
		expectDumpJob(ctx, jobs[db](), db, memory)
	}
	for db, job := range jobs {
		finishJob(ctx, job(), true)
		Eventually(gone(ctx, db), 10*time.Second).Should(BeTrue())
		Expect(runPhase(ctx, db)()).To(Equal(v1alpha1.RunSucceeded))
		Eventually(func() *int32 { return job().Spec.TTLSecondsAfterFinished }, 5*time.Second).Should(HaveValue(Equal(int32(86400))))
	}
}

// expectDumpJob checks the Job of database-dump-job for db: pg_dump into the shared volume, then
// the upload of that file, each run without a shell and with every $(NAME) defined.
func expectDumpJob(ctx context.Context, job *batchv1.Job, db *unstructured.Unstructured, memory string) {
	ns, name := db.GetNamespace(), db.GetName()
	run := runFor(ctx, db)()
	Expect(run).NotTo(BeNil())
	Expect(job.Annotations).To(HaveKeyWithValue("example.com/database", ns+"/"+name))
	Expect(*job.Spec.ActiveDeadlineSeconds).To(BeNumerically("~", 3570, 5), "the step timeout less a 30s margin")
	pod := job.Spec.Template.Spec
	Expect(pod.ServiceAccountName).To(Equal("db-backup"))
	Expect(pod.Volumes).To(HaveLen(1))
	Expect(pod.Volumes[0].EmptyDir).NotTo(BeNil())
	Expect(pod.InitContainers).To(HaveLen(1))
	Expect(pod.Containers).To(HaveLen(1))

	dump, upload := pod.InitContainers[0], pod.Containers[0]
	Expect(dump.Image).To(Equal("docker.io/library/postgres:16"))
	Expect(runArgs(ctx, ns, dump)).To(Equal([]string{
		"pg_dump", "--format=custom", "--file=/backup/db.dump", "--dbname=postgresql://backup@" + name + "-db:5432/app",
	}))
	Expect(dump.Resources.Limits.Memory().String()).To(Equal(memory))
	Expect(upload.Image).To(Equal("docker.io/amazon/aws-cli:2.17.0"))
	Expect(runArgs(ctx, ns, upload)).To(Equal([]string{
		"aws", "s3", "cp", "/backup/db.dump", "s3://example-backups/" + ns + "/" + name + "/" + string(run.UID) + ".dump",
	}))
	for _, c := range []corev1.Container{dump, upload} {
		Expect(c.VolumeMounts).To(ConsistOf(And(HaveField("Name", pod.Volumes[0].Name), HaveField("MountPath", "/backup"))), "container %s", c.Name)
	}
}

// bucket returns a Bucket the sample empties when its namespace and spec say so.
func bucket(ns, name string, spec map[string]any) *unstructured.Unstructured {
	b := exampleObject(ns, "Bucket", name, spec)
	b.SetLabels(map[string]string{"teardown.dev/empty-on-delete": "true"})
	return b
}

// bucketJobs lists the Jobs made in teardown-jobs for a Bucket.
func bucketJobs(ctx context.Context, b client.Object) func() []batchv1.Job {
	return func() []batchv1.Job {
		var jobs batchv1.JobList
		_ = k8s.List(ctx, &jobs, client.InNamespace("teardown-jobs"), client.MatchingLabels{v1alpha1.LabelTargetUID: string(b.GetUID())})
		return jobs.Items
	}
}

func bucketEmptyJob(ctx SpecContext) {
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown-jobs"}}))).To(Succeed())
	expectReady(ctx, createSample(ctx, samplePath("bucket-empty-job.yaml"), "")[0], metav1.ConditionTrue)
	ns := newNamespace(ctx)
	assets := bucket(ns, "assets", map[string]any{"bucketName": ns + "-assets"})
	logs := bucket(ns, "logs", map[string]any{"bucketName": ns + "-logs", "region": "eu-west-1"})
	Expect(k8s.Create(ctx, assets)).To(Succeed())
	Expect(k8s.Create(ctx, logs)).To(Succeed())
	finalizer := "clusterteardownpolicy.teardown.dev/bucket-empty-job"
	Eventually(finalizers(ctx, assets), 10*time.Second).Should(ContainElement(finalizer))
	Eventually(finalizers(ctx, logs), 10*time.Second).Should(ContainElement(finalizer))

	By("Buckets naming a bucket of another namespace, or none, are not protected (nor emptied)")
	for name, spec := range map[string]map[string]any{
		"foreign":       {"bucketName": "billing-prod-invoices"},
		"longer-prefix": {"bucketName": ns + "-eu-assets"}, // namespace <ns>-eu's bucket "assets"
		"no-spec":       nil,
	} {
		b := bucket(ns, name, spec)
		Expect(k8s.Create(ctx, b)).To(Succeed())
		expectUnprotected(ctx, b, "Bucket "+name)
		Expect(k8s.Delete(ctx, b)).To(Succeed())
	}

	By("deleting the namespace (envtest has no namespace controller: the test deletes the buckets itself)")
	Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	for b, region := range map[*unstructured.Unstructured]string{assets: "us-east-1", logs: "eu-west-1"} {
		Expect(k8s.Delete(ctx, b)).To(Succeed())
		Eventually(bucketJobs(ctx, b), 10*time.Second).Should(HaveLen(1))
		j := &bucketJobs(ctx, b)()[0]
		Expect(j.Spec.Template.Spec.ServiceAccountName).To(Equal("bucket-cleaner"))
		c := j.Spec.Template.Spec.Containers[0]
		Expect(c.Image).To(Equal("docker.io/amazon/aws-cli:2.17.0"))
		Expect(runArgs(ctx, "teardown-jobs", c)).To(Equal([]string{"aws", "s3", "rm", "s3://" + ns + "-" + b.GetName(), "--recursive", "--region", region}))
		finishJob(ctx, j, true)
		Eventually(gone(ctx, b), 10*time.Second).Should(BeTrue())
		run := runFor(ctx, b)()
		Expect(run.Namespace).To(Equal(runNamespace))
		Expect(run.Status.Phase).To(Equal(v1alpha1.RunSucceeded))
	}
}

func bucketSwappedBeforeDelete(ctx SpecContext) {
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "teardown-jobs"}}))).To(Succeed())
	expectReady(ctx, createSample(ctx, samplePath("bucket-empty-job.yaml"), "")[0], metav1.ConditionTrue)
	ns := newNamespace(ctx)
	b := bucket(ns, "assets", map[string]any{"bucketName": ns + "-assets"})
	Expect(k8s.Create(ctx, b)).To(Succeed())
	Eventually(finalizers(ctx, b), 10*time.Second).Should(ContainElement("clusterteardownpolicy.teardown.dev/bucket-empty-job"))

	By("renaming the bucket to another namespace's and deleting the Bucket before the operator sees the change")
	stopOperator()
	update(ctx, b, func(u *unstructured.Unstructured) {
		Expect(unstructured.SetNestedField(u.Object, "billing-prod-invoices", "spec", "bucketName")).To(Succeed())
	})
	Expect(k8s.Delete(ctx, b)).To(Succeed())
	stopOperator = startOperator()

	By("the run sees the Bucket as it was when its deletion began, and when skips the step")
	Eventually(stepPhase(ctx, b, "empty"), 10*time.Second).Should(Equal(v1alpha1.StepSkipped),
		func() string {
			return fmt.Sprintf("the step ran, with %d Jobs, for a bucket of another namespace", len(bucketJobs(ctx, b)()))
		})
	Expect(bucketJobs(ctx, b)()).To(BeEmpty(), "a Job was made to empty another namespace's bucket")
	Expect(stepOf(ctx, b, "empty").Message).To(HavePrefix("when is false"))
	Eventually(gone(ctx, b), 10*time.Second).Should(BeTrue())
	Expect(runPhase(ctx, b)()).To(Equal(v1alpha1.RunSucceeded))
}
