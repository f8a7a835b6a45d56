// Package chart holds the tests of the Helm chart in charts/teardown-operator (package chart_test):
// what it renders with bin/helm (or $HELM) for default and full values, that config/default stays
// equivalent to it, its production defaults (metrics over HTTPS for authorized scrapers only, the
// replicas spread over nodes, a pod template that a new chart version alone leaves as it was), and
// its monitoring: that the Grafana dashboard and the PrometheusRule query only metrics the operator
// serves (the engine's, and controller-runtime's workqueue and reconcile metrics), and that every
// alert links to its section of docs/operating.md.
package chart
