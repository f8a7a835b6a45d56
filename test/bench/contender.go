package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/test/framework"
)

// Contenders, by name.
const (
	// contenderRaw is the floor: the benchmark creates each object with a finalizer, deletes it
	// and releases it itself, with no controller.
	contenderRaw = "raw"
	// contenderPeer is a controller written by hand in the textbook pattern (test/bench/peer).
	contenderPeer = "peer"
	// contenderOperator is teardown-operator at its defaults (runHistory SkipImmediateSuccess: no
	// TeardownRun for a teardown whose every step is done at once).
	contenderOperator = "operator"
	// contenderAll is teardown-operator in the audit mode: a TeardownRun for every deletion
	// (spec.runHistory All).
	contenderAll = "operator-all"
	// contenderJob is teardown-operator at its defaults with -step resource's pipeline written as a
	// job step (a Job running kubectl): not in the default lineup, and only with -step resource.
	contenderJob = "operator-job"
	// contenderLate is teardown-operator at its defaults but --admission-arming=false: it arms
	// each object after its creation, as on a cluster without MutatingAdmissionPolicy.
	contenderLate = "operator-late"
)

// rawFinalizer is the finalizer the raw contender's objects are created with.
const rawFinalizer = "bench.example.com/raw"

// contender is one way of holding objects until their teardown is done.
type contender struct {
	name string
	// start runs the contender's process; nil for the raw floor.
	start func(o options, kubeconfig string, modeArgs []string) (*process, error)
	// policy is the teardown-operator policy's runHistory; nil for the others.
	policy *v1alpha1.RunHistory
	// jobStep writes -step resource's pipeline as a job step instead (operator-job).
	jobStep bool
	// args are flags the contender's process gets besides the benchmark's own.
	args []string
	// arm makes the contender protect the app=bench ConfigMaps of the namespaces.
	arm func(ctx context.Context, c client.Client, namespaces []string, steps []v1alpha1.Step) error
	// ready reports whether it is ready to protect them; nil: as soon as it is armed.
	ready func(ctx context.Context, c client.Client, namespaces []string) (bool, error)
	// protected counts the objects it protects.
	protected func(ctx context.Context, c client.Client, namespaces []string) (int, error)
}

func contenders() map[string]contender {
	none := func(context.Context, client.Client, []string, []v1alpha1.Step) error { return nil }
	job := operatorContender(contenderJob, "")
	job.jobStep = true
	late := operatorContender(contenderLate, "")
	late.args = []string{"--admission-arming=false"}
	return map[string]contender{
		contenderRaw:      {name: contenderRaw, arm: none, protected: finalizedBy(rawFinalizer)},
		contenderPeer:     {name: contenderPeer, start: startPeer, arm: none, protected: finalizedBy("peer.example.com/cleanup")},
		contenderOperator: operatorContender(contenderOperator, ""),
		contenderAll:      operatorContender(contenderAll, v1alpha1.RunHistoryAll),
		contenderJob:      job,
		contenderLate:     late,
	}
}

// policySteps are the operator policy's steps for -step. They name the local server's address and,
// with -step resource, the targets' namespaces, so they are built once both exist.
func (b *bench) policySteps() []v1alpha1.Step {
	switch b.o.step {
	case stepHTTP:
		return []v1alpha1.Step{httpStep(b.ep.addr())}
	case stepPipeline:
		return []v1alpha1.Step{framework.WaitStep("before", 0), httpStep(b.ep.addr()), framework.WaitStep("after", 0)}
	case stepResource:
		return []v1alpha1.Step{recordStep(b.namespaces, b.contender.jobStep)}
	}
	return []v1alpha1.Step{framework.WaitStep("noop", 0)}
}

// operatorContender is teardown-operator with a policy keeping the given run history ("": the
// field left out, the default).
func operatorContender(name string, history v1alpha1.RunHistory) contender {
	return contender{name: name, start: startOperator, policy: &history, protected: operatorProtected(),
		arm: func(ctx context.Context, c client.Client, namespaces []string, steps []v1alpha1.Step) error {
			p, _ := operatorPolicy(namespaces, steps, history)
			return c.Create(ctx, p)
		},
		ready: func(ctx context.Context, c client.Client, namespaces []string) (bool, error) {
			st, err := operatorStatus(ctx, c, namespaces)
			return err == nil && apimeta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady), err
		}}
}

// benchNamespace labels the targets' namespaces, for the cluster policy's namespaceSelector.
var benchNamespace = map[string]string{"bench.teardown.dev/targets": "true"}

// operatorPolicy is the operator contenders' policy, and its status: a TeardownPolicy in the
// targets' namespace, or, when they are spread over several, one ClusterTeardownPolicy with the
// same spec that selects those namespaces.
func operatorPolicy(namespaces []string, steps []v1alpha1.Step, history v1alpha1.RunHistory) (client.Object, *v1alpha1.TeardownPolicyStatus) {
	p := framework.NamespacedPolicy(namespaces[0], "bench", steps...)
	p.Spec.RunHistory = history
	if len(namespaces) == 1 {
		return p, &p.Status
	}
	cp := &v1alpha1.ClusterTeardownPolicy{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Spec: v1alpha1.ClusterTeardownPolicySpec{
		TeardownPolicySpec: p.Spec, NamespaceSelector: &metav1.LabelSelector{MatchLabels: benchNamespace}}}
	return cp, &cp.Status
}

// operatorStatus reads the status of the operator contenders' policy.
func operatorStatus(ctx context.Context, c client.Client, namespaces []string) (*v1alpha1.TeardownPolicyStatus, error) {
	p, st := operatorPolicy(namespaces, nil, "")
	return st, c.Get(ctx, client.ObjectKeyFromObject(p), p)
}

// operatorProtected counts the targets carrying the operator policy's finalizer, listed as the
// other contenders' are: its status recounts at most once a second, and an object the API server
// armed at its creation is protected when the create returns.
func operatorProtected() func(ctx context.Context, c client.Client, namespaces []string) (int, error) {
	count := map[bool]func(context.Context, client.Client, []string) (int, error){
		false: finalizedBy("teardownpolicy.teardown.dev/bench"), true: finalizedBy("clusterteardownpolicy.teardown.dev/bench")}
	return func(ctx context.Context, c client.Client, namespaces []string) (int, error) {
		return count[len(namespaces) > 1](ctx, c, namespaces)
	}
}

// finalizedBy counts the targets, in every namespace, that carry a finalizer.
func finalizedBy(finalizer string) func(ctx context.Context, c client.Client, _ []string) (int, error) {
	return func(ctx context.Context, c client.Client, _ []string) (int, error) {
		list := configMapList()
		if err := c.List(ctx, list, targetLabels); err != nil {
			return 0, err
		}
		n := 0
		for _, cm := range list.Items {
			for _, f := range cm.Finalizers {
				if f == finalizer {
					n++
				}
			}
		}
		return n, nil
	}
}

// newTarget is the i-th target; the raw floor's carry their finalizer from the start.
func newTarget(contender, ns string, i int) *corev1.ConfigMap {
	cm := framework.ConfigMap(ns, name(i), map[string]string{"app": "bench"})
	if contender == contenderRaw {
		cm.Finalizers = []string{rawFinalizer}
	}
	return cm
}

// startPeer builds and runs the hand-written controller.
func startPeer(o options, kubeconfig string, _ []string) (*process, error) {
	bin := filepath.Join(o.root, "bin", "bench-peer")
	// Built as the operator is for release (make build), so that both binaries map alike.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./test/bench/peer")
	build.Dir = o.root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the peer controller: %v: %s", err, out)
	}
	return startProcess(filepath.Join(o.root, "bin", "bench-peer.log"), bin, "--kubeconfig", kubeconfig)
}
