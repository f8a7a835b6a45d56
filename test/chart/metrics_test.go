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
	eng, err := engine.Setup(context.Background(), mgr, engine.Options{RunNamespace: "teardown-system"}, builtin.Kinds(builtin.Options{})...)
	if err != nil {
		return fmt.Errorf("setting the engine up: %w", err)
	}
	eng.Shutdown()
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
	var gathered []string
	for {
		families, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			return err
		}
		gathered = gathered[:0]
		for _, f := range families {
			gathered = append(gathered, f.GetName())
		}
		if probeReconciled(families) {
			for _, f := range families {
				kind := single
				if f.GetType() == dto.MetricType_HISTOGRAM {
					kind = histogram
				}
				m[f.GetName()] = kind
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the probe controller did not reconcile in 30s; the registry had %v", gathered)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// probeReconciled says whether the families show the probe controller's reconcile done: its
// success counted and its time observed. Both are required of the probe's own series, not of the
// families alone, so that a series left by anything else in the process cannot end the wait early.
func probeReconciled(families []*dto.MetricFamily) bool {
	var counted, timed bool
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if !hasLabel(s, "controller", "monitoring-test") {
				continue
			}
			switch f.GetName() {
			case "controller_runtime_reconcile_total":
				counted = counted || hasLabel(s, "result", "success") && s.GetCounter().GetValue() > 0
			case "controller_runtime_reconcile_time_seconds":
				timed = timed || s.GetHistogram().GetSampleCount() > 0
			}
		}
	}
	return counted && timed
}

func hasLabel(s *dto.Metric, name, value string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
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
