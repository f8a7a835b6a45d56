package chart_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestMonitoringDashboard(t *testing.T) {
	d, _ := readDashboard(t)
	if d.UID != "teardown-operator" || d.Title != "teardown-operator" {
		t.Errorf("uid %q, title %q: want teardown-operator for both (links and provisioning use them)", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want a current dashboard schema", d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "datasource" && v.Query != "prometheus" {
			t.Errorf("variable %s chooses %v data sources, want prometheus", v.Name, v.Query)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "namespace": "query", "policy": "query"} {
		if vars[name] != typ {
			t.Errorf("variable %s: type %q, want %q", name, vars[name], typ)
		}
	}
	ids := map[int]string{}
	panels := allPanels(d.Panels)
	for _, p := range panels {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d is missing or also %q's", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" || refs[q.RefID] {
				t.Errorf("panel %q: query %q has no expression or a duplicate refId", p.Title, q.RefID)
			}
			refs[q.RefID] = true
			if !strings.Contains(q.Expr, `namespace="$namespace"`) {
				t.Errorf("panel %q: query %s does not filter on $namespace", p.Title, q.Expr)
			}
		}
	}
	if len(panels) < 10 {
		t.Errorf("only %d panels", len(panels))
	}
}

func TestMonitoringMetricNames(t *testing.T) {
	m := operatorExports(t)
	_, dash := readDashboard(t)
	rules, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	for file, text := range map[string]string{dashboardFile: dash, prometheusRuleFile: string(rules)} {
		names := metricRefs(text)
		if len(names) == 0 {
			t.Errorf("%s uses no metric", file)
		}
		for _, name := range names {
			if err := m.check(name); err != nil {
				t.Errorf("%s: %v", file, err)
			}
		}
	}
	// The dashboard shows every metric of the engine.
	used := metricRefs(dash)
	for _, name := range m.engineMetrics() {
		if !slices.ContainsFunc(used, func(u string) bool {
			return u == name || slices.Contains(histogramSeries, strings.TrimPrefix(u, name))
		}) {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}

// The check rejects what is not served, so that a misspelt query fails the test above.
func TestMonitoringMetricCheckRejectsUnknownNames(t *testing.T) {
	m := operatorExports(t)
	for _, name := range []string{"teardown_runs_active", "teardown_step_failures_total", "teardown_pipeline_duration_seconds_bucket",
		"teardown_step_duration_seconds_count", "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
		"controller_runtime_reconcile_time_seconds_bucket", "workqueue_depth", "workqueue_queue_duration_seconds_bucket"} {
		if err := m.check(name); err != nil {
			t.Errorf("%s is served, but: %v", name, err)
		}
	}
	for _, name := range []string{"teardown_step_failure_total", "teardown_runs_active_bucket", "teardown_step_failures_total_count",
		"teardown_pipeline_duration_seconds_total", "controller_runtime_reconciles_total", "controller_runtime_reconcile_total_bucket",
		"workqueue_dept", "workqueue_depth_sum"} {
		if m.check(name) == nil {
			t.Errorf("%s is not served, yet passes the check", name)
		}
	}
	if got := metricRefs(`sum(rate(teardown_step_failures_total{policy="teardown_x"}[5m])) / workqueue_depth`); !slices.Equal(got,
		[]string{"teardown_step_failures_total", "teardown_x", "workqueue_depth"}) {
		t.Errorf("metricRefs = %v", got)
	}
}

// Every alert links to its section of docs/operating.md.
func TestMonitoringRunbookAnchors(t *testing.T) {
	rules, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(operatingDoc)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if heading, ok := strings.CutPrefix(line, "#"); ok {
			anchors[githubAnchor(strings.TrimLeft(heading, "#"))] = true
		}
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`).FindAllStringSubmatch(string(rules), -1)
	links := regexp.MustCompile(`(?m)^\s*runbook_url: .*#(\S+)$`).FindAllStringSubmatch(string(rules), -1)
	if !strings.Contains(string(rules), "https://github.com/teardown-dev/teardown-operator/blob/main/docs/operating.md") {
		t.Errorf("%s does not link to docs/operating.md", prometheusRuleFile)
	}
	if len(alerts) == 0 || len(links) != len(alerts) {
		t.Fatalf("%d alerts, %d runbook links: want one each", len(alerts), len(links))
	}
	for i, l := range links {
		if !anchors[l[1]] {
			t.Errorf("alert %s links to #%s, which no heading of %s makes", alerts[i][1], l[1], operatingDoc)
		}
		if l[1] != strings.ToLower(alerts[i][1]) {
			t.Errorf("alert %s links to #%s, want its own section", alerts[i][1], l[1])
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The rendered chart scrapes the metrics Service it alerts on, and ships the dashboard as it is.
func TestMonitoringRendered(t *testing.T) {
	r := render(t, "--set", "metrics.serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true",
		"--set", "prometheusRule.labels.release=kube-prometheus-stack")
	var svc *corev1.Service
	for _, o := range r.objects {
		if s, ok := o.(*corev1.Service); ok && s.Labels["app.kubernetes.io/component"] == "metrics" {
			svc = s
		}
	}
	if svc == nil {
		t.Fatalf("no metrics Service; have %v", r.kinds())
	}
	var rule *unstructured.Unstructured
	dashboards := 0
	for _, o := range r.objects {
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "PrometheusRule" {
			rule = u
		}
		if c, ok := o.(*corev1.ConfigMap); ok && c.Labels["grafana_dashboard"] == "1" {
			raw, err := os.ReadFile(dashboardFile)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Data["teardown-operator.json"]; got != strings.TrimSpace(string(raw)) {
				t.Errorf("ConfigMap %s does not hold %s as it is", c.Name, dashboardFile)
			}
			dashboards++
		}
	}
	if rule == nil || dashboards != 1 {
		t.Fatalf("PrometheusRule or dashboard ConfigMap not rendered; have %v", r.kinds())
	}
	if rule.GetLabels()["release"] != "kube-prometheus-stack" || rule.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("PrometheusRule labels %v: want the chart's and prometheusRule.labels", rule.GetLabels())
	}
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	selector := fmt.Sprintf(`{job=%q, namespace=%q}`, svc.Name, svc.Namespace)
	exprs := 0
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, rl := range rules {
			rl := rl.(map[string]any)
			expr, _ := rl["expr"].(string)
			exprs++
			if !strings.Contains(expr, selector) {
				t.Errorf("alert %v: %s does not select the metrics Service's series %s", rl["alert"], expr, selector)
			}
			for _, name := range metricRefs(expr) {
				if err := operatorExports(t).check(name); err != nil {
					t.Errorf("alert %v: %v", rl["alert"], err)
				}
			}
			if labels, _ := rl["labels"].(map[string]any); labels["severity"] == nil {
				t.Errorf("alert %v has no severity", rl["alert"])
			}
		}
	}
	if exprs == 0 {
		t.Error("the PrometheusRule has no rule")
	}
	tpl, err := os.ReadFile(dashboardTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tpl), `.Files.Get "files/grafana-dashboard.json"`) {
		t.Errorf("%s does not read files/grafana-dashboard.json", dashboardTemplate)
	}
}
