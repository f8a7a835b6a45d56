package chart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/steps/builtin"
)

// The monitoring files of the chart, relative to this package.
var (
	dashboardFile      = filepath.Join("..", "..", "charts", "teardown-operator", "files", "grafana-dashboard.json")
	dashboardTemplate  = filepath.Join("..", "..", "charts", "teardown-operator", "templates", "grafana-dashboard.yaml")
	prometheusRuleFile = filepath.Join("..", "..", "charts", "teardown-operator", "templates", "prometheusrule.yaml")
	operatingDoc       = filepath.Join("..", "..", "docs", "operating.md")
)

// metricRef matches a name of the operator's metrics or of controller-runtime's in a query.
var metricRef = regexp.MustCompile(`\b(?:teardown|controller_runtime|workqueue)_[a-z0-9_]*[a-z0-9]\b`)

// descName reads a metric's name from its Desc, which has no getter: a Desc prints as
// Desc{fqName: "name", help: ...}.
var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// histogramSeries are the suffixes of a histogram's series.
var histogramSeries = []string{"_bucket", "_count", "_sum"}

// metricKind is what a metric is, as far as its series go.
type metricKind int

const (
	single    metricKind = iota // counter, gauge: one series per label set, named as the metric
	histogram                   // series name_bucket, name_count and name_sum
)

// operatorMetrics maps each metric the operator serves to its kind: the engine's, and
// controller-runtime's (workqueue, reconcile), all in controller-runtime's registry.
type operatorMetrics map[string]metricKind

var (
	exportedOnce sync.Once
	exported     operatorMetrics
	exportedErr  error
)

// operatorExports returns the metrics the operator serves.
func operatorExports(t *testing.T) operatorMetrics {
	t.Helper()
	exportedOnce.Do(func() {
		ctrllog.SetLogger(logr.Discard())
		exported = operatorMetrics{}
		if exportedErr = exported.addEngine(); exportedErr == nil {
			exportedErr = exported.addControllerRuntime()
		}
	})
	if exportedErr != nil {
		t.Fatal(exportedErr)
	}
	return exported
}

// addEngine sets the engine up as the operator binary does (against no API server: nothing is
// started) and adds the metrics it registers. They have no series until the engine observes
// something, so they are read from the collectors it registers.
func (m operatorMetrics) addEngine() error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	// A static mapper: the manager and the engine resolve kinds when they are set up, and no API
	// server answers here.
	mapper := meta.NewDefaultRESTMapper(nil)
	for gvk := range scheme.AllKnownTypes() {
		mapper.Add(gvk, meta.RESTScopeNamespace)
	}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  engine.CacheOptions(builtin.CacheOptions()),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		MapperProvider:         func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil },
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("creating a manager: %w", err)
	}
	rec := &recorder{RegistererGatherer: ctrlmetrics.Registry}
	ctrlmetrics.Registry = rec
	defer func() { ctrlmetrics.Registry = rec.RegistererGatherer }()
	if _, err := engine.Setup(context.Background(), mgr, engine.Options{RunNamespace: "teardown-system"}, builtin.Kinds(builtin.Options{})...); err != nil {
		return fmt.Errorf("setting the engine up: %w", err)
	}
	for _, c := range rec.collectors {
		kind := single
		if _, ok := c.(*prometheus.HistogramVec); ok {
			kind = histogram
		}
		for _, name := range describedNames(c) {
			m[name] = kind
		}
	}
	if len(m) == 0 {
		return errors.New("the engine registered no metric")
	}
	return nil
}

// recorder passes registrations on to a registry and keeps the collectors.
type recorder struct {
	ctrlmetrics.RegistererGatherer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.RegistererGatherer.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// describedNames returns the names of the metrics a collector describes.
func describedNames(c prometheus.Collector) []string {
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	var names []string
	for d := range descs {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// addControllerRuntime adds the metrics controller-runtime serves for every controller: it runs
// a controller through one reconcile, so that its reconcile and workqueue metrics have series,
// and gathers the registry.
func (m operatorMetrics) addControllerRuntime() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := controller.NewUnmanaged("monitoring-test", controller.Options{
		Reconciler:         reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }),
		SkipNameValidation: ptr.To(true),
	})
	if err != nil {
		return err
	}
	events := make(chan event.GenericEvent, 1)
	events <- event.GenericEvent{Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}}
	if err := c.Watch(source.Channel(events, &handler.EnqueueRequestForObject{})); err != nil {
		return err
	}
	started := make(chan error, 1)
	go func() { started <- c.Start(ctx) }()
	defer func() { cancel(); <-started }()
	for {
		families, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			return err
		}
		reconciled := false
		for _, f := range families {
			kind := single
			if f.GetType() == dto.MetricType_HISTOGRAM {
				kind = histogram
			}
			m[f.GetName()] = kind
			if f.GetName() == "controller_runtime_reconcile_time_seconds" {
				reconciled = true
			}
		}
		if reconciled {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("the probe controller did not reconcile")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// check says whether the operator serves a series of this name.
func (m operatorMetrics) check(name string) error {
	if _, ok := m[name]; ok {
		return nil
	}
	for _, suffix := range histogramSeries {
		base, found := strings.CutSuffix(name, suffix)
		if kind, ok := m[base]; found && ok {
			if kind != histogram {
				return fmt.Errorf("%s: %s is not a histogram", name, base)
			}
			return nil
		}
	}
	return fmt.Errorf("%s is not a metric of the operator", name)
}

// engineMetrics lists the engine's metrics.
func (m operatorMetrics) engineMetrics() []string {
	var names []string
	for name := range m {
		if strings.HasPrefix(name, "teardown_") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// metricRefs returns the metric names a text uses, in order, each once.
func metricRefs(text string) []string {
	var names []string
	for _, name := range metricRef.FindAllString(text, -1) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) (*dashboard, string) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dec.More() {
		t.Fatalf("%s: more than one JSON value", dashboardFile)
	}
	return &d, string(raw)
}

// allPanels lists the panels, those in rows included.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

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
