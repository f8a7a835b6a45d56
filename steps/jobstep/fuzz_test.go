package jobstep

import (
	"context"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/internal/expr"
	"github.com/teardown-dev/teardown-operator/steps"
)

// FuzzJobTemplate compiles a job step whose template.spec is arbitrary bytes (with an arbitrary
// job.namespace and label value), and builds the Job of what compiles. Neither may panic; a Job
// that builds must be one the API server could take from the operator: named, in a namespace,
// labelled for its run, with a container and no selector.
func FuzzJobTemplate(f *testing.F) {
	// The templates, namespaces and labels of the unit tables (unit_test.go).
	specs := []string{
		"",
		validSpec,
		`[1, 2]`,
		`"job"`,
		`{"template":`,
		`null`,
		`{"parallelizm": 2, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "imagePullPolicyy": "Always"}]}}}`,
		`{"backoffLimit": "${object.spec.memory}", "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"suspend": "true", "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"manualSelector": true, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"template": {"spec": {"containers": []}}}`,
		`{"backoffLimit": 1}`,
		`{"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"ttlSecondsAfterFinished": -1, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo ${HOME}"]}]}}}`,
		`{"selector": {}, "template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "${HOME}"}]}}}`,
		`{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"memory": "${object.spec.memory}", "cpu": "100m"}}}]}}}`,
		`{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo $${HOME}"]}]}}}`,
		`{"ttlSecondsAfterFinished": 0, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"ttlSecondsAfterFinished": 600, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"manualSelector": false, "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"template": {"spec": {"restartPolicy": "${'Never'}", "serviceAccountName": "${object.metadata.name}", "containers": [{"name": "c-${object.metadata.name}", "image": "busybox"}]}}}`,
		`{"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"activeDeadlineSeconds": 1000, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`,
		`{"template": {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"memory": "${object.spec.size}"}}}]}}}`,
		`{"template": {"spec": {"containers": [{"name": "c", "image": "${object.spec.image}"}]}}}`,
		`{"backoffLimit": 0, "ttlSecondsAfterFinished": 600, "template": {
			"metadata": {"labels": {"app": "dump-${object.metadata.name}"}, "annotations": {"a": "b"}},
			"spec": {"initContainers": [{"name": "init", "image": "busybox"}], "containers": [
				{"name": "main", "image": "busybox", "command": ["sh", "-c", "echo $${HOME} ${object.metadata.name}"],
				 "env": [{"name": "TEARDOWN_STEP", "value": "mine"}, {"name": "FOO", "value": "${object.metadata.namespace}"}],
				 "resources": {"limits": {"memory": "${object.spec.memory}"}}},
				{"name": "side", "image": "busybox"}]}}}`,
	}
	namespaces := []string{"", policyNS, "other", "${object.metadata.namespace}-jobs", "teardown-jobs", "${object.spec.bad}", "${object.spec.missing}"}
	labels := []string{"", "dump", "${object.metadata.name}", "${object.metadata.labels.owner}", "${ null }", "Not A Label"}
	for i, s := range specs {
		f.Add([]byte(s), namespaces[i%len(namespaces)], labels[i%len(labels)], i%2 == 0)
	}
	env, err := expr.NewEnv()
	if err != nil {
		f.Fatal(err)
	}
	kind := New(nil, nil, nil, nil, Options{})
	f.Fuzz(func(t *testing.T, spec []byte, namespace, label string, namespaced bool) {
		cc := steps.CompileContext{Env: env, Namespaced: namespaced}
		policyNamespace := ""
		if namespaced {
			cc.Namespace, policyNamespace = policyNS, policyNS
		}
		step := &v1alpha1.Step{Name: stepName, Job: &v1alpha1.JobStep{
			Namespace: namespace,
			Template: v1alpha1.JobTemplate{
				Metadata: v1alpha1.JobTemplateMetadata{Labels: map[string]string{"app": label}, Annotations: map[string]string{"note": label}},
				Spec:     runtime.RawExtension{Raw: spec},
			},
		}}
		act, errs := kind.Compile(cc, step, stepPath)
		if len(errs) > 0 {
			if act != nil {
				t.Errorf("Compile returned an action with errors %v", errs)
			}
			return
		}
		a, ok := act.(*action)
		if !ok {
			t.Fatalf("Compile returned %T and no error", act)
		}
		job, err := a.build(context.Background(), testInput(policyNamespace, targetNS))
		if err != nil {
			if job != nil {
				t.Errorf("build returned a Job with an error: %v", err)
			}
			return
		}
		switch {
		case job.Name == "" || job.Namespace == "":
			t.Errorf("Job %q in namespace %q", job.Name, job.Namespace)
		case job.Labels[v1alpha1.LabelRunUID] != string(runUID) || job.Spec.Template.Labels[v1alpha1.LabelRunUID] != string(runUID):
			t.Errorf("Job labels %v, pod labels %v: not labelled for run %s", job.Labels, job.Spec.Template.Labels, runUID)
		case len(job.Spec.Template.Spec.Containers) == 0:
			t.Errorf("Job without a container")
		case job.Spec.Selector != nil:
			t.Errorf("Job with a selector %v", job.Spec.Selector)
		case job.Spec.TTLSecondsAfterFinished != nil:
			t.Errorf("Job with ttlSecondsAfterFinished %d before its outcome is recorded", *job.Spec.TTLSecondsAfterFinished)
		}
		if _, err := json.Marshal(job); err != nil {
			t.Errorf("the Job cannot be encoded: %v", err)
		}
	})
}
