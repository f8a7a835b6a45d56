package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// -step resource: the policy records each deleted target in a ConfigMap of its own, created through
// the API server as a ServiceAccount. The operator-job contender writes the same pipeline as a job
// step, a Job running kubectl as that ServiceAccount, to compare the two ways in one invocation.
const (
	// recordStepName names the step in both forms, so that the operator's step-duration histogram
	// and the teardown.dev/step label read alike.
	recordStepName = "record"
	// recorderName is the ServiceAccount the step acts as, and its Role and RoleBinding.
	recorderName = "bench-recorder"
	// recordSuffix makes target <name>'s record <name>-record, in the target's namespace.
	recordSuffix = "-record"
	kubectlImage = "registry.k8s.io/kubectl:v1.36.3"
)

// checkStep checks -step against the contenders and -namespace.
func (o *options) checkStep() error {
	switch o.step {
	case stepWait, stepHTTP, stepPipeline, stepResource:
	default:
		return fmt.Errorf("-step must be wait, http, pipeline or resource, not %q", o.step)
	}
	if o.step != stepResource && hasContender(o.contenders, contenderJob) {
		return fmt.Errorf("-contenders %s is -step resource's pipeline written as a job step: add -step resource", contenderJob)
	}
	if o.step == stepResource && o.namespace {
		// A namespace being deleted accepts no new object: every record would fail.
		return errors.New("-step resource creates each record in its target's namespace, which a namespace being deleted refuses: leave out -namespace")
	}
	return nil
}

// hasContender reports whether the comma-separated lineup names the contender.
func hasContender(lineup, name string) bool {
	for _, c := range strings.Split(lineup, ",") {
		if strings.TrimSpace(c) == name {
			return true
		}
	}
	return false
}

// recorderNamespace holds the one ServiceAccount: the first target namespace. One, not one per
// namespace, because a ClusterTeardownPolicy's serviceAccountNamespace is written out (not
// interpolated) and a Job's pod runs only as a ServiceAccount of its own namespace; every target
// namespace gets a Role and RoleBinding for it instead of a ClusterRole, so it may write there only.
func recorderNamespace(namespaces []string) string { return namespaces[0] }

// recordStep is -step resource's step: a resource step, or the same pipeline as a job step.
func recordStep(namespaces []string, asJob bool) v1alpha1.Step {
	if asJob {
		return recordJobStep(namespaces)
	}
	r := &v1alpha1.ResourceStep{
		ServiceAccountName: recorderName,
		Action:             v1alpha1.ResourceCreate,
		// No labels: a record is no target (app=bench), and the operator adds its own.
		Manifest: rawObject(map[string]any{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   map[string]any{"name": "${object.metadata.name}" + recordSuffix},
			"data":       map[string]any{"target": "${object.metadata.name}", "uid": "${object.metadata.uid}"},
		}),
		// True at once: what is measured is the impersonated create, the read-back and the record.
		SuccessCondition: "resource.data.target == object.metadata.name",
	}
	if len(namespaces) > 1 { // a ClusterTeardownPolicy must say where its ServiceAccount is
		r.ServiceAccountNamespace = recorderNamespace(namespaces)
	}
	return v1alpha1.Step{Name: recordStepName, Resource: r}
}

// recordJobStep is the record written as a job step. kwok runs no container: its pod completes as
// soon as it runs (kwok-duration 0s), so kubectl never runs; the command is what a real cluster
// would run.
func recordJobStep(namespaces []string) v1alpha1.Step {
	spec := framework.Container(kubectlImage, map[string]string{"teardown.dev/kwok-duration": "0s"},
		"kubectl", "create", "configmap", "${object.metadata.name}"+recordSuffix,
		"--namespace=${object.metadata.namespace}",
		"--from-literal=target=${object.metadata.name}", "--from-literal=uid=${object.metadata.uid}")
	pod := spec["template"].(map[string]any)["spec"].(map[string]any)
	pod["serviceAccountName"] = recorderName
	step := framework.JobStep(recordStepName, spec)
	if len(namespaces) > 1 { // the pod's ServiceAccount is of the Job's namespace
		step.Job.Namespace = recorderNamespace(namespaces)
	}
	return step
}

// rawObject encodes an object written as a map for a step's manifest.
func rawObject(v map[string]any) *runtime.RawExtension {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings always encode
	}
	return &runtime.RawExtension{Raw: raw}
}

// makeRecorder creates the ServiceAccount, and in every target namespace its Role and RoleBinding.
func (b *bench) makeRecorder(ctx context.Context) error {
	saNamespace := recorderNamespace(b.namespaces)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saNamespace, Name: recorderName}}
	if err := b.c.Create(ctx, sa); err != nil {
		return err
	}
	return forEach(ctx, len(b.namespaces), b.o.parallel, func(k int) error {
		for _, obj := range recorderRBAC(b.namespaces[k], saNamespace) {
			if err := b.c.Create(ctx, obj); err != nil {
				return err
			}
		}
		return nil
	})
}

// recorderRBAC lets the ServiceAccount create and read back ConfigMaps in namespace ns.
func recorderRBAC(ns, saNamespace string) []client.Object {
	meta := metav1.ObjectMeta{Namespace: ns, Name: recorderName}
	return []client.Object{
		&rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: meta,
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: recorderName},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: recorderName}}},
	}
}

// recordTally is what the record ConfigMaps left after a run say about the deleted targets.
type recordTally struct {
	records    int // in all
	forDeleted int // of a deleted target: at most one each, as its name is the target's
	missing    int // deleted targets with none
	stray      int // of no deleted target
	wrongData  int // of a deleted target, whose data.target is not its name
}

// tallyRecords counts the records among cms; keys are the deleted targets' namespace/name.
func tallyRecords(keys []string, cms []corev1.ConfigMap) recordTally {
	deleted := make(map[string]bool, len(keys))
	for _, k := range keys {
		deleted[k] = true
	}
	var t recordTally
	for _, cm := range cms {
		target, ok := strings.CutSuffix(cm.Name, recordSuffix)
		if !ok || cm.Labels["app"] == "bench" {
			continue // a target, or the namespace's kube-root-ca.crt
		}
		t.records++
		switch {
		case !deleted[cm.Namespace+"/"+target]:
			t.stray++
		case cm.Data["target"] != target:
			t.forDeleted++
			t.wrongData++
		default:
			t.forDeleted++
		}
	}
	t.missing = len(keys) - t.forDeleted
	return t
}

// resourceReport prints -step resource's own figures: the records, or the Jobs of operator-job,
// the operator's measure of the step, and its log's errors.
func (b *bench) resourceReport(ctx context.Context, keys []string) error {
	if b.contender.policy == nil {
		return nil // the peer and the raw floor run no steps
	}
	notTargets, err := labels.NewRequirement("app", selection.NotEquals, []string{"bench"})
	if err != nil {
		return err
	}
	var cms corev1.ConfigMapList
	if err := b.c.List(ctx, &cms, client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*notTargets)}); err != nil {
		return fmt.Errorf("listing the record ConfigMaps: %w", err)
	}
	t := tallyRecords(keys, cms.Items)
	kind := "resource"
	if b.contender.jobStep {
		kind = "job"
		if err := b.jobReport(ctx, len(keys), t.records); err != nil {
			return err
		}
	} else {
		fmt.Printf("  resource step: record ConfigMaps %d for %d deleted targets (expected one each, never more); targets with none: %d; of no deleted target: %d; wrong data: %d\n",
			t.records, len(keys), t.missing, t.stray, t.wrongData)
	}
	printStepDuration(ctx, b.metrics, kind, recordStepName)
	printLogErrors(b.proc.log.Name())
	return nil
}

// jobReport prints the Jobs operator-job made, and says what its figures measure.
func (b *bench) jobReport(ctx context.Context, deleted, records int) error {
	var jobs batchv1.JobList
	if err := b.c.List(ctx, &jobs, client.MatchingLabels{v1alpha1.LabelStep: recordStepName}); err != nil {
		return fmt.Errorf("listing the Jobs: %w", err)
	}
	succeeded := 0
	for _, j := range jobs.Items {
		if j.Status.Succeeded > 0 {
			succeeded++
		}
	}
	fmt.Printf("  job step: %d Jobs for %d deleted targets, %d succeeded; record ConfigMaps %d: kwok runs no container, so kubectl never ran\n",
		len(jobs.Items), deleted, succeeded, records)
	fmt.Println("      these figures are the operator's Job handling (create the Job, the Job controller's pod, kwok's pod lifecycle, the watch, the release), not kubectl's work")
	return nil
}
