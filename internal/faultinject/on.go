//go:build faultinject

package faultinject

import (
	"net/http"
	"os"
	"strings"

	"k8s.io/client-go/rest"
)

// Enabled says whether this binary was built with fault injection.
const Enabled = true

// scope is the namespace whose requests and events count ("" for all).
var scope = os.Getenv(EnvScope)

// Install counts the API server writes of every client built from cfg (or a copy of it) as crash
// points, applies TEARDOWN_WATCH_FAULTS to their watches (read then as JSON, whose stream the
// faults take apart event by event) and TEARDOWN_TIME_TRAVEL to their caches' first lists.
func Install(cfg *rest.Config) error {
	faults, err := ParseWatchFaults(os.Getenv(EnvWatchFaults))
	if err != nil {
		return err
	}
	tt, err := ParseTimeTravel(os.Getenv(EnvTimeTravel))
	if err != nil {
		return err
	}
	if tt != nil {
		j := newJourney(*tt)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &traveller{next: rt, journey: j} })
	}
	if len(faults) > 0 {
		cfg.ContentType = "application/json"
		cfg.AcceptContentTypes = "application/json"
		w := newWatchFaults(faults, scope)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &faultyWatches{next: rt, faults: w} })
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &counted{next: rt, name: apiPoint} })
	return nil
}

// HTTP counts the requests of an http step sent through rt as crash points.
func HTTP(rt http.RoundTripper) http.RoundTripper {
	return &counted{next: rt, name: func(r *http.Request) string { return "http " + r.Method + " " + r.URL.Path }}
}

// inScope reports whether a request path concerns the scope's namespace: /namespaces/<ns>/ in an
// API path, /<ns>/ in an http step's.
func inScope(path string) bool {
	return scope == "" || strings.Contains(path, "/"+scope+"/")
}
