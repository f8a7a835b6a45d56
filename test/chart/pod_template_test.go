package chart_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPodTemplateStableAcrossChartVersions: a new chart version alone leaves the operator's pod
// template as it was, byte for byte, so that upgrading the chart does not roll the Deployment (a
// leader change, and a pause in teardowns, for nothing); the Deployment's own labels do carry the
// new version. A new image does change the template, or an upgrade would never reach the pods.
func TestPodTemplateStableAcrossChartVersions(t *testing.T) {
	bumped := filepath.Join(t.TempDir(), "teardown-operator")
	if err := os.CopyFS(bumped, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	chartFile := filepath.Join(bumped, "Chart.yaml")
	raw, err := os.ReadFile(chartFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("\nversion: 0.1.0\n")) {
		t.Fatalf("Chart.yaml has no line version: 0.1.0 to change:\n%s", raw)
	}
	if err := os.WriteFile(chartFile, bytes.Replace(raw, []byte("\nversion: 0.1.0\n"), []byte("\nversion: 0.2.0\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}

	meta, template := renderDeployment(t, chartDir)
	bumpedMeta, bumpedTemplate := renderDeployment(t, bumped)
	if !strings.Contains(meta, "helm.sh/chart: teardown-operator-0.1.0\n") || !strings.Contains(bumpedMeta, "helm.sh/chart: teardown-operator-0.2.0\n") {
		t.Fatalf("the Deployment's labels do not carry the chart's version:\n%s\n%s", meta, bumpedMeta)
	}
	if template != bumpedTemplate {
		t.Errorf("the pod template changed with the chart's version:\n%s\n%s", template, bumpedTemplate)
	}
	podMeta, _, _ := strings.Cut(template, "\n    spec:\n")
	if strings.Contains(podMeta, "helm.sh/chart") || strings.Contains(podMeta, "version") {
		t.Errorf("the pod template's metadata names a version:\n%s", podMeta)
	}
	if _, newImage := renderDeployment(t, chartDir, "--set", "image.tag=0.1.1"); newImage == template {
		t.Error("the pod template stayed the same with a new image tag")
	}
}

// renderDeployment renders the chart in dir and returns the operator's Deployment as helm
// writes it: the text before its pod template, and the pod template.
func renderDeployment(t *testing.T, dir string, args ...string) (meta, template string) {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, dir, "--namespace", namespace, "--show-only", "templates/deployment.yaml"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	meta, template, ok := strings.Cut(out, "\n  template:\n")
	if !ok {
		t.Fatalf("no pod template in the Deployment:\n%s", out)
	}
	return meta, template
}
