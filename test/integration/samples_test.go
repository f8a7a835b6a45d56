package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

var (
	// samplesDir holds the policies users copy (samples/*.yaml).
	samplesDir = filepath.Join("..", "..", "samples")
	// exampleCRDs holds the custom resources samples protect that Kubernetes does not serve
	// (samples/crds/*.yaml).
	exampleCRDs = filepath.Join(samplesDir, "crds")
	// upstreamCRDs holds copies of the published CRDs of other projects' operators that samples
	// protect or create (CloudNativePG, AWS ACK, Strimzi, external-snapshotter, Velero):
	// test/testdata/crds, each naming its source.
	upstreamCRDs = filepath.Join("..", "testdata", "crds")
)

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

// createSample creates the objects of a sample (its policies, and the ServiceAccounts, Roles and
// RoleBindings its resource steps act as): namespaced ones in ns, cluster-scoped ones
// cluster-wide (deleted, and waited for, when the spec ends). Unknown fields fail the create, so
// a sample cannot carry a field the CRDs would silently drop. It returns the teardown policies
// it created, typed.
func createSample(ctx context.Context, path, ns string) []client.Object {
	var policies []client.Object
	for _, u := range loadSample(path) {
		var typed client.Object
		switch kind := u.GetKind(); {
		case u.GetNamespace() != "" && (kind == "ServiceAccount" || kind == "Role" || kind == "RoleBinding"):
			// A cluster policy's ServiceAccount, in a namespace of its own (Velero's, say).
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: u.GetNamespace()}}
			Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, ns))).To(Succeed())
		case u.GetNamespace() != "":
			Fail(fmt.Sprintf("%s: %s %s sets metadata.namespace; samples are applied with -n", path, kind, u.GetName()))
		}
		switch u.GetKind() {
		case "TeardownPolicy":
			u.SetNamespace(ns)
			typed = &v1alpha1.TeardownPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: u.GetName()}}
		case "ClusterTeardownPolicy":
			typed = &v1alpha1.ClusterTeardownPolicy{ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}
		case "ServiceAccount", "Role", "RoleBinding":
			// What a resource step acts as, shipped with its policy.
			if u.GetNamespace() == "" {
				u.SetNamespace(ns)
			}
			Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, u, client.FieldValidation("Strict")))).To(Succeed(), "%s: the API server refused %s %s", path, u.GetKind(), u.GetName())
			continue
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

// headerOf returns the comment lines a file opens with.
func headerOf(raw []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// exampleKinds maps the kinds samples/crds/*.yaml define to their files (samples/crds/x.yaml).
func exampleKinds() map[schema.GroupVersionKind]string {
	return crdKinds(exampleCRDs, "samples/crds/")
}

// crdKinds maps the kinds the CRDs in dir define to their files, named prefix + file name.
func crdKinds(dir, prefix string) map[schema.GroupVersionKind]string {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).NotTo(BeEmpty(), "no CRDs in %s", dir)
	out := map[schema.GroupVersionKind]string{}
	for _, f := range files {
		for _, u := range loadSample(f) {
			group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
			versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
			for _, v := range versions {
				out[schema.GroupVersionKind{Group: group, Version: v.(map[string]any)["name"].(string), Kind: kind}] = prefix + filepath.Base(f)
			}
		}
	}
	return out
}

// expectCRDNamed checks that a sample whose policies target a kind Kubernetes does not serve
// says so in its header: naming the CRD file in samples/crds that defines it, or, for the kind of
// another project's operator (upstream), its API group, whose operator installs the CRD.
func expectCRDNamed(f string, kinds, upstream map[schema.GroupVersionKind]string) {
	raw, err := os.ReadFile(f)
	Expect(err).NotTo(HaveOccurred())
	header := headerOf(raw)
	for _, u := range loadSample(f) {
		if k := u.GetKind(); k != "TeardownPolicy" && k != "ClusterTeardownPolicy" {
			continue // what a resource step acts as
		}
		apiVersion, _, _ := unstructured.NestedString(u.Object, "spec", "targetRef", "apiVersion")
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "targetRef", "kind")
		gv, err := schema.ParseGroupVersion(apiVersion)
		Expect(err).NotTo(HaveOccurred(), "%s: targetRef.apiVersion", f)
		gvk := gv.WithKind(kind)
		if scheme.Recognizes(gvk) {
			continue // served by Kubernetes itself
		}
		if _, ok := upstream[gvk]; ok {
			Expect(header).To(ContainSubstring(gvk.Group), "%s targets %s: its header must name the project whose operator serves it", f, gvk)
			continue
		}
		crd, ok := kinds[gvk]
		Expect(ok).To(BeTrue(), "%s targets %s, which neither Kubernetes nor samples/crds defines", f, gvk)
		Expect(header).To(ContainSubstring(crd), "%s targets the custom resource %s: its header must say to install %s", f, gvk, crd)
		Expect(header).To(ContainSubstring("kubectl apply -f "+crd), "%s: its Try it must install %s", f, crd)
	}
}

// expectUnprotected checks that a policy's match leaves obj alone, without an evaluation error.
func expectUnprotected(ctx context.Context, obj client.Object, why string) {
	Consistently(finalizers(ctx, obj), 2*time.Second).Should(BeEmpty(), why)
	Expect(eventReasons(ctx, obj)()).NotTo(ContainElement(v1alpha1.ReasonMatchFailed), "%s: the match must not fail to evaluate", why)
}

var _ = Describe("Samples", func() {
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(samplesDir, "*.yaml"))
	if err != nil {
		panic(err)
	}
	BeforeEach(func() {
		// The kinds samples protect that Kubernetes does not serve: examples of our own, and
		// the real CRDs of other projects' operators.
		Expect(framework.InstallCRDs(ctx, k8s, exampleCRDs)).To(Succeed())
		Expect(framework.InstallCRDs(ctx, k8s, upstreamCRDs)).To(Succeed())
	})

	It("exist, each opening with a comment that says what it does and which CRD it needs", func() {
		Expect(files).NotTo(BeEmpty(), "no samples/*.yaml found")
		kinds, upstream := exampleKinds(), crdKinds(upstreamCRDs, "test/testdata/crds/")
		for _, f := range files {
			raw, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.HasPrefix(string(raw), "# ")).To(BeTrue(), "%s does not start with a header comment", f)
			expectCRDNamed(f, kinds, upstream)
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

	It("parent-waits-for-children holds a parent until its children are gone", parentWaitsForChildren)
	It("statefulset-pod holds StatefulSet pods in selected namespaces until their claims are released", statefulSetPod)
})

func parentWaitsForChildren(ctx SpecContext) {
	ns := newNamespace(ctx)
	policies := createSample(ctx, samplePath("parent-waits-for-children.yaml"), ns)
	expectReady(ctx, policies[0], metav1.ConditionTrue)

	parent := configMap(ns, "app", map[string]string{"role": "parent"})
	child := configMap(ns, "app-child", map[string]string{"parent": "app"})
	unrelated := configMap(ns, "other-child", map[string]string{"parent": "other"})
	longName := configMap(ns, strings.Repeat("p", 70), map[string]string{"role": "parent"})
	for _, cm := range []*corev1.ConfigMap{parent, child, unrelated, longName} {
		Expect(k8s.Create(ctx, cm)).To(Succeed())
	}
	Eventually(finalizers(ctx, parent), 10*time.Second).Should(ConsistOf("teardownpolicy.teardown.dev/parent-waits-for-children"))
	Expect(finalizers(ctx, child)()).To(BeEmpty(), "children are not targets")
	expectUnprotected(ctx, longName, "a parent whose name cannot be a label value can have no children")

	Expect(k8s.Delete(ctx, parent)).To(Succeed())
	Eventually(stepPhase(ctx, parent, "wait-for-children"), 10*time.Second).Should(Equal(v1alpha1.StepRunning))
	Consistently(gone(ctx, parent), 2*time.Second).Should(BeFalse(), "the parent went while its child exists")
	Expect(stepOf(ctx, parent, "wait-for-children").Message).To(Equal("waiting for size(children) == 0: children: 1 (app-child)"))

	By("deleting the child (the child of another parent does not count)")
	Expect(k8s.Delete(ctx, child)).To(Succeed())
	Eventually(gone(ctx, parent), 10*time.Second).Should(BeTrue())
	Expect(runPhase(ctx, parent)()).To(Equal(v1alpha1.RunSucceeded))
	Expect(stepOf(ctx, parent, "wait-for-children").Phase).To(Equal(v1alpha1.StepSucceeded))
	Expect(gone(ctx, unrelated)()).To(BeFalse())
}

func statefulSetPod(ctx SpecContext) {
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
	expectUnprotected(ctx, bare, "a Pod no StatefulSet owns (no ownerReferences at all) is not a target")
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
	Consistently(gone(ctx, owned), 2*time.Second).Should(BeFalse(), "the Pod went before its claim (without annotations) was released")

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
}

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

// exampleObject returns an object of a kind samples/crds defines, with spec (none when nil).
func exampleObject(ns, kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion("example.teardown.dev/v1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}
