package main

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/cli/lint"
	"github.com/teardown-dev/teardown-operator/cli/manifest"
)

func TestCheckStep(t *testing.T) {
	for _, tc := range []struct {
		name       string
		step       string
		contenders string
		namespace  bool
		err        bool
	}{
		{name: "resource", step: stepResource, contenders: "peer,operator"},
		{name: "job with resource", step: stepResource, contenders: "peer, operator,operator-job"},
		{name: "job without resource", step: stepWait, contenders: "peer,operator-job", err: true},
		{name: "job with http", step: stepHTTP, contenders: "operator-job", err: true},
		{name: "resource deleting the namespace", step: stepResource, contenders: "operator", namespace: true, err: true},
		{name: "unknown step", step: "resources", contenders: "operator", err: true},
		{name: "a name like operator-job's", step: stepWait, contenders: "operator,operator-all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options{step: tc.step, contenders: tc.contenders, namespace: tc.namespace}
			if err := o.checkStep(); (err != nil) != tc.err {
				t.Errorf("checkStep() = %v, want an error: %v", err, tc.err)
			}
		})
	}
}

// The resource step creates one unlabelled record per target, as bench-recorder; in a cluster
// policy it names the ServiceAccount's namespace.
func TestRecordStep(t *testing.T) {
	one := recordStep([]string{"a"}, false)
	r := one.Resource
	if one.Name != recordStepName || r == nil || r.Action != v1alpha1.ResourceCreate || r.ServiceAccountName != recorderName || r.ServiceAccountNamespace != "" {
		t.Fatalf("one namespace: step %+v, resource %+v", one, r)
	}
	var m struct {
		Kind     string            `json:"kind"`
		Metadata metav1.ObjectMeta `json:"metadata"`
		Data     map[string]string `json:"data"`
	}
	if err := json.Unmarshal(r.Manifest.Raw, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"target": "${object.metadata.name}", "uid": "${object.metadata.uid}"}
	if m.Kind != "ConfigMap" || m.Metadata.Name != "${object.metadata.name}-record" || m.Metadata.Labels != nil || !reflect.DeepEqual(m.Data, want) {
		t.Errorf("manifest %s: want an unlabelled ConfigMap <target>-record with data %v", r.Manifest.Raw, want)
	}
	if r.SuccessCondition != "resource.data.target == object.metadata.name" {
		t.Errorf("successCondition %q", r.SuccessCondition)
	}
	if got := recordStep([]string{"a", "b"}, false).Resource.ServiceAccountNamespace; got != "a" {
		t.Errorf("several namespaces: serviceAccountNamespace %q, want a", got)
	}
}

// The job step runs kubectl as bench-recorder, in the ServiceAccount's namespace, and kwok
// completes its pod.
func TestRecordJobStep(t *testing.T) {
	for _, tc := range []struct {
		namespaces []string
		jobNS      string
	}{{[]string{"a"}, ""}, {[]string{"a", "b"}, "a"}} {
		step := recordStep(tc.namespaces, true)
		if step.Name != recordStepName || step.Job == nil || step.Job.Namespace != tc.jobNS {
			t.Fatalf("%v: step %+v, want a job step in namespace %q", tc.namespaces, step, tc.jobNS)
		}
		var spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		}
		if err := json.Unmarshal(step.Job.Template.Spec.Raw, &spec); err != nil {
			t.Fatal(err)
		}
		pod := spec.Template
		if pod.Spec.ServiceAccountName != recorderName || pod.Annotations["teardown.dev/kwok-duration"] == "" {
			t.Errorf("pod %+v: want ServiceAccount %s and a kwok duration", pod, recorderName)
		}
		if c := pod.Spec.Containers; len(c) != 1 || c[0].Image != kubectlImage || !strings.HasPrefix(strings.Join(c[0].Command, " "), "kubectl create configmap ${object.metadata.name}-record ") {
			t.Errorf("containers %+v: want one running kubectl create configmap", c)
		}
	}
}

// Both forms of the pipeline, in either kind of policy, are what the API server and the operator
// accept (offline: the CRD schema and the operator's compiler).
func TestRecordPoliciesLint(t *testing.T) {
	for _, namespaces := range [][]string{{"a"}, {"a", "b"}} {
		for _, asJob := range []bool{false, true} {
			p, _ := operatorPolicy(namespaces, []v1alpha1.Step{recordStep(namespaces, asJob)}, "")
			kind := "TeardownPolicy"
			if len(namespaces) > 1 {
				kind = "ClusterTeardownPolicy"
			}
			p.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind))
			raw, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := manifest.Parse("bench", raw)
			if err != nil {
				t.Fatal(err)
			}
			l, err := lint.New(lint.Options{}) // one each: a linter refuses a second policy of one name
			if err != nil {
				t.Fatal(err)
			}
			if res := l.Lint(context.Background(), docs); res.Policies != 1 || res.Errors > 0 {
				t.Errorf("%s, job step %v: %d policies, problems %v", kind, asJob, res.Policies, res.Problems)
			}
		}
	}
}

// Each target namespace lets the one ServiceAccount create and read ConfigMaps, and nothing else.
func TestRecorderRBAC(t *testing.T) {
	objs := recorderRBAC("b", "a")
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.Role:
			role = o
		case *rbacv1.RoleBinding:
			binding = o
		}
	}
	if role == nil || binding == nil || role.Namespace != "b" || binding.Namespace != "b" {
		t.Fatalf("objects %v: want a Role and a RoleBinding in b", objs)
	}
	rule := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}}
	if !reflect.DeepEqual(role.Rules, []rbacv1.PolicyRule{rule}) {
		t.Errorf("rules %+v, want %+v", role.Rules, rule)
	}
	subject := rbacv1.Subject{Kind: "ServiceAccount", Namespace: "a", Name: recorderName}
	if binding.RoleRef.Name != role.Name || !slices.Equal(binding.Subjects, []rbacv1.Subject{subject}) {
		t.Errorf("binding %+v, want role %s to %+v", binding, role.Name, subject)
	}
}

func TestTallyRecords(t *testing.T) {
	cm := func(ns, name, target string, labels map[string]string) corev1.ConfigMap {
		return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"target": target}}
	}
	keys := []string{"a/target-00000", "b/target-00001", "a/target-00002"}
	got := tallyRecords(keys, []corev1.ConfigMap{
		cm("a", "target-00000-record", "target-00000", nil),
		cm("b", "target-00001-record", "target-00009", nil),                               // wrong data
		cm("b", "target-00002-record", "target-00002", nil),                               // the wrong namespace
		cm("a", "target-00003-record", "target-00003", map[string]string{"app": "bench"}), // a target
		cm("a", "kube-root-ca.crt", "", nil),
	})
	want := recordTally{records: 3, forDeleted: 2, missing: 1, stray: 1, wrongData: 1}
	if got != want {
		t.Errorf("tally %+v, want %+v", got, want)
	}
}
