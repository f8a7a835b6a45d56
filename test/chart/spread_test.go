package chart_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestSpreadReplicas: by default the replicas prefer different nodes, never require them (a
// one-node cluster must still run both); the user's own podAntiAffinity or
// topologySpreadConstraints replace that preference, other affinity keeps it, and
// spreadReplicas=false drops it.
func TestSpreadReplicas(t *testing.T) {
	for name, tc := range map[string]struct {
		values                   string
		spread, nodeAffinity     bool
		antiAffinityTerms, zones int // the user's
	}{
		"default": {spread: true},
		"the user's node affinity": {values: `affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [
  {matchExpressions: [{key: node-role.example.com/control, operator: Exists}]}]}}}`, spread: true, nodeAffinity: true},
		"the user's anti-affinity": {values: `affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [
  {weight: 50, podAffinityTerm: {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app.kubernetes.io/name: teardown-operator}}}}]}}`,
			antiAffinityTerms: 1},
		"the user's spread constraints": {values: `topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone,
  whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app.kubernetes.io/name: teardown-operator}}}]`, zones: 1},
		"turned off": {values: "spreadReplicas: false"},
	} {
		t.Run(name, func(t *testing.T) {
			d := mustGet[*appsv1.Deployment](t, renderValues(t, tc.values), "Deployment", release)
			pod := d.Spec.Template.Spec
			if got := spreadsReplicas(d); got != tc.spread {
				t.Errorf("replicas spread over nodes by default: %v, want %v; affinity %+v", got, tc.spread, pod.Affinity)
			}
			if got := pod.Affinity != nil && pod.Affinity.NodeAffinity != nil; got != tc.nodeAffinity {
				t.Errorf("the user's node affinity rendered: %v, want %v", got, tc.nodeAffinity)
			}
			if !tc.spread && tc.antiAffinityTerms == 0 && pod.Affinity != nil {
				t.Errorf("affinity %+v, want none", pod.Affinity)
			}
			if tc.antiAffinityTerms > 0 && len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != tc.antiAffinityTerms {
				t.Errorf("anti-affinity %+v, want the user's alone", pod.Affinity.PodAntiAffinity)
			}
			if len(pod.TopologySpreadConstraints) != tc.zones {
				t.Errorf("topology spread constraints %+v, want %d", pod.TopologySpreadConstraints, tc.zones)
			}
		})
	}
}

// spreadsReplicas says whether a Deployment's pods prefer, and only prefer, nodes without
// another of its replicas: the one anti-affinity term is on kubernetes.io/hostname and selects
// the Deployment's own pods, and nothing is required.
func spreadsReplicas(d *appsv1.Deployment) bool {
	a := d.Spec.Template.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		return false
	}
	preferred := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(preferred) != 1 {
		return false
	}
	term := preferred[0].PodAffinityTerm
	return preferred[0].Weight == 100 && term.TopologyKey == corev1.LabelHostname &&
		equality.Semantic.DeepEqual(term.LabelSelector, d.Spec.Selector)
}
