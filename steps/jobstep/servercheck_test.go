package jobstep

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// TestPlaceholderJob: the Job a server check sends is the step's, with placeholders for ${...},
// in the namespace it would go to.
func TestPlaceholderJob(t *testing.T) {
	spec := podSpec(`"restartPolicy": "${object.data.policy}"`, container("dump", "${object.data.image}", ""))
	meta := v1alpha1.JobTemplateMetadata{Labels: map[string]string{"app": "dump", "db": "${object.metadata.name}"}}
	tests := map[string]struct {
		namespaced bool
		job        v1alpha1.JobStep
		wantNS     string
	}{
		"TeardownPolicy: its own namespace":                         {namespaced: true, wantNS: policyNS},
		"cluster policy naming a namespace":                         {job: v1alpha1.JobStep{Namespace: "backups"}, wantNS: "backups"},
		"cluster policy rendering its namespace: the run namespace": {job: v1alpha1.JobStep{Namespace: "${object.metadata.namespace}"}, wantNS: "teardown-system"},
		"cluster policy naming none: the run namespace":             {wantNS: "teardown-system"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.job.Template.Metadata = meta
			a := compileAction(t, tc.namespaced, tc.job, spec)
			job, err := a.placeholderJob(context.Background(), "teardown-system")
			if err != nil {
				t.Fatal(err)
			}
			if job.Namespace != tc.wantNS || job.Name != "" || job.GenerateName != dryRunName+"-" {
				t.Errorf("Job %s/%s (generateName %q), want namespace %s and a generated name", job.Namespace, job.Name, job.GenerateName, tc.wantNS)
			}
			c := job.Spec.Template.Spec.Containers[0]
			if c.Image != placeholder || job.Spec.Template.Spec.RestartPolicy != placeholder {
				t.Errorf("image %q, restartPolicy %q: want the placeholder", c.Image, job.Spec.Template.Spec.RestartPolicy)
			}
			if job.Labels["app"] != "dump" || job.Labels["db"] != placeholder || job.Labels[v1alpha1.LabelStep] != stepName {
				t.Errorf("labels %v", job.Labels)
			}
			if len(job.OwnerReferences) != 0 {
				t.Errorf("ownerReferences %v: no run exists", job.OwnerReferences)
			}
		})
	}
}

// TestRefusals: the API server's causes at their paths in the policy, in its words, but those on
// values known only at run time.
func TestRefusals(t *testing.T) {
	spec := `{"template": {"metadata": {"annotations": {"a": "b"}}, "spec": {"restartPolicy": "${object.data.policy}",
		"nodeSelector": {"disk": "${object.data.disk}"}, "volumes": [{"name": "${object.metadata.name}", "emptyDir": {}}],
		"containers": [{"name": "dump", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/d"}],
		"resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "${object.data.limit}"}}}]}}}`
	a := compileAction(t, false, v1alpha1.JobStep{}, spec)
	pod := field.NewPath("spec", "template", "spec")
	err := apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "x", field.ErrorList{
		field.Required(pod.Child("containers").Index(0).Child("image"), ""),
		field.Forbidden(pod.Child("volumes").Index(0).Child("secret"), "may not specify more than 1 volume type"),
		field.NotSupported(pod.Child("restartPolicy"), "0", []string{"OnFailure", "Never"}),
		field.Invalid(pod.Child("nodeSelector").Key("disk"), "0", "rendered"),
		field.Invalid(field.NewPath("metadata", "name"), "x", "too long"),
		// Judged against values the placeholders stand for: the limit, the volume's name.
		field.Invalid(pod.Child("containers").Index(0).Child("resources", "requests"), "256Mi", "must be less than or equal to memory limit of 0"),
		field.NotFound(pod.Child("containers").Index(0).Child("volumeMounts").Index(0).Child("name"), "data"),
	})
	got := a.refusals(err)
	want := []string{
		"spec.steps[0].job.template.spec.template.spec.containers[0].image: Required value: (the API server's answer to a dry-run create of the step's Job)",
		"spec.steps[0].job.template.spec.template.spec.volumes[0].secret: Forbidden: may not specify more than 1 volume type (the API server's answer to a dry-run create of the step's Job)",
		`spec.steps[0].job: Invalid value: "x": too long (the API server's answer to a dry-run create of the step's Job)`,
	}
	if len(got) != len(want) {
		t.Fatalf("refusals = %v, want %d", got, len(want))
	}
	for i := range want {
		if got[i].Error() != want[i] {
			t.Errorf("refusal %d:\n got %s\nwant %s", i, got[i].Error(), want[i])
		}
	}
}

func TestTreePath(t *testing.T) {
	for in, want := range map[string]string{
		"spec.template.spec.containers[0].image":        "spec.template.spec.containers[0].image",
		"spec.template.spec.nodeSelector[disk]":         "spec.template.spec.nodeSelector.disk",
		"spec.template.spec.containers[1].resources[x]": "spec.template.spec.containers[1].resources.x",
		"spec.broken[": "spec.broken[",
	} {
		if got := treePath(in); got != want {
			t.Errorf("treePath(%s) = %s, want %s", in, got, want)
		}
	}
}
