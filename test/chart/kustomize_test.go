package chart_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestKustomizeMatchesChart: config/default (kubectl apply -k) installs what the chart installs
// with its default values, in namespace teardown-system with release name teardown-operator,
// but for the uninstall hook, which kustomize has no way to run.
func TestKustomizeMatchesChart(t *testing.T) {
	out, err := exec.Command("../../bin/kubectl", "kustomize", "../../config/default").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default (make control-plane builds bin/kubectl): %v\n%s", err, out)
	}
	kust := decode(t, string(out))
	chart := render(t)

	var want []string
	for _, k := range chart.kinds() {
		if !strings.Contains(k, "uninstall-drain") {
			want = append(want, k)
		}
	}
	got := slices.DeleteFunc(kust.kinds(), func(k string) bool { return k == "Namespace/"+namespace })
	if !slices.Equal(got, want) {
		t.Fatalf("config/default has %v\nthe chart has %v", got, want)
	}

	kd, cd := mustGet[*appsv1.Deployment](t, kust, "Deployment", release), mustGet[*appsv1.Deployment](t, chart, "Deployment", release)
	if *kd.Spec.Replicas != *cd.Spec.Replicas {
		t.Errorf("replicas: config/default %d, chart %d", *kd.Spec.Replicas, *cd.Spec.Replicas)
	}
	if !spreadsReplicas(kd) || !spreadsReplicas(cd) {
		t.Errorf("replicas spread over nodes: config/default %v, chart %v", spreadsReplicas(kd), spreadsReplicas(cd))
	}
	kp, cp := kd.Spec.Template.Spec, cd.Spec.Template.Spec
	if !equality.Semantic.DeepEqual(kp.SecurityContext, cp.SecurityContext) {
		t.Errorf("pod security context: config/default %+v, chart %+v", kp.SecurityContext, cp.SecurityContext)
	}
	kc, cc := kp.Containers[0], cp.Containers[0]
	// The chart names its namespaces explicitly; config/default lets them default to the pod's.
	chartArgs := slices.DeleteFunc(slices.Clone(cc.Args), func(a string) bool {
		return strings.HasPrefix(a, "--leader-election-namespace=") || strings.HasPrefix(a, "--run-namespace=")
	})
	for _, f := range []struct {
		name      string
		kust, cha any
	}{
		{"image", kc.Image, cc.Image}, {"args", kc.Args, chartArgs}, {"env", kc.Env, cc.Env}, {"ports", kc.Ports, cc.Ports},
		{"resources", kc.Resources, cc.Resources}, {"securityContext", kc.SecurityContext, cc.SecurityContext},
		{"livenessProbe", kc.LivenessProbe, cc.LivenessProbe}, {"readinessProbe", kc.ReadinessProbe, cc.ReadinessProbe},
	} {
		if !equality.Semantic.DeepEqual(f.kust, f.cha) {
			t.Errorf("container %s: config/default %+v, chart %+v", f.name, f.kust, f.cha)
		}
	}
	compareSpecs(t, kust, chart)
}

// compareSpecs compares the RBAC, the CRDs, the Service and the PodDisruptionBudget.
func compareSpecs(t *testing.T, kust, chart *rendered) {
	for _, k := range chart.kinds() {
		kind, name, _ := strings.Cut(k, "/")
		var a, b any
		switch kind {
		case "ClusterRole":
			a, b = mustGet[*rbacv1.ClusterRole](t, kust, kind, name).Rules, mustGet[*rbacv1.ClusterRole](t, chart, kind, name).Rules
		case "Role":
			if strings.Contains(name, "uninstall-drain") {
				continue
			}
			a, b = mustGet[*rbacv1.Role](t, kust, kind, name).Rules, mustGet[*rbacv1.Role](t, chart, kind, name).Rules
		case "CustomResourceDefinition":
			a = mustGet[*apiextensionsv1.CustomResourceDefinition](t, kust, kind, name).Spec
			b = mustGet[*apiextensionsv1.CustomResourceDefinition](t, chart, kind, name).Spec
		case "Service":
			a, b = mustGet[*corev1.Service](t, kust, kind, name).Spec.Ports, mustGet[*corev1.Service](t, chart, kind, name).Spec.Ports
		case "ValidatingAdmissionPolicy":
			a = mustGet[*admissionregistrationv1.ValidatingAdmissionPolicy](t, kust, kind, name).Spec
			b = mustGet[*admissionregistrationv1.ValidatingAdmissionPolicy](t, chart, kind, name).Spec
		case "PodDisruptionBudget":
			a = mustGet[*policyv1.PodDisruptionBudget](t, kust, kind, name).Spec.MaxUnavailable
			b = mustGet[*policyv1.PodDisruptionBudget](t, chart, kind, name).Spec.MaxUnavailable
		default:
			continue
		}
		if !equality.Semantic.DeepEqual(a, b) {
			t.Errorf("%s: config/default %+v\nchart %+v", k, a, b)
		}
	}
}
