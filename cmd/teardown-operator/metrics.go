package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/teardown-dev/teardown-operator/internal/metricsauth"
)

// The metrics endpoint is secure by default, as kubebuilder scaffolds it today: HTTPS, and every
// request authenticated by its bearer token (a TokenReview) and authorized for get on the
// non-resource URL /metrics (a SubjectAccessReview), which the ClusterRole
// teardown-operator-metrics-reader grants (internal/metricsauth). The metrics name every policy
// and step and count what each protects: more than any pod that can reach the port should learn.

// metricsFlags are the metrics endpoint's flags.
type metricsFlags struct {
	addr              string
	secure            bool
	certDir           string
	certName, keyName string
}

// bind defines the metrics flags in fs.
func (m *metricsFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&m.secure, "metrics-secure", true,
		"Serve metrics over HTTPS, only to clients whose bearer token the API server authenticates and whose identity may get the non-resource URL /metrics "+
			"(ClusterRole teardown-operator-metrics-reader); false serves plain HTTP to anyone who reaches the address.")
	fs.StringVar(&m.certDir, "metrics-cert-dir", "",
		"Directory holding the metrics endpoint's certificate and key (a cert-manager Certificate's Secret, mounted), reloaded when they change; "+
			"empty serves a self-signed certificate made at start.")
	fs.StringVar(&m.certName, "metrics-cert-name", "tls.crt", "File name of the metrics certificate in --metrics-cert-dir.")
	fs.StringVar(&m.keyName, "metrics-cert-key", "tls.key", "File name of the metrics key in --metrics-cert-dir.")
}

// serverOptions returns the metrics server's options.
func (m metricsFlags) serverOptions() (metricsserver.Options, error) {
	opts := metricsserver.Options{BindAddress: m.addr, SecureServing: m.secure}
	if !m.secure {
		if m.certDir != "" {
			return opts, errors.New("--metrics-cert-dir needs --metrics-secure: plain HTTP serves no certificate")
		}
		return opts, nil
	}
	opts.FilterProvider = metricsauth.FilterProvider
	opts.TLSOpts = []func(*tls.Config){http1Only}
	if m.certDir == "" {
		return opts, nil // controller-runtime makes a self-signed certificate when the server starts
	}
	// controller-runtime falls back to a self-signed certificate when these files are missing:
	// a mistyped path or a Secret not mounted would then go unnoticed until a scrape that
	// verifies the certificate fails.
	for _, name := range []string{m.certName, m.keyName} {
		if _, err := os.Stat(filepath.Join(m.certDir, name)); err != nil {
			return opts, fmt.Errorf("--metrics-cert-dir: %w", err)
		}
	}
	opts.CertDir, opts.CertName, opts.KeyName = m.certDir, m.certName, m.keyName
	return opts, nil
}

// http1Only keeps HTTP/2 off the metrics endpoint, as kubebuilder does: Prometheus scrapes over
// HTTP/1.1, and HTTP/2's stream-cancellation and rapid-reset floods (GHSA-qppj-fm5r-hxr3,
// GHSA-4374-p667-p6c8) would reach the server before any request is authenticated.
func http1Only(c *tls.Config) {
	c.NextProtos = []string{"http/1.1"}
}
