package main

import (
	"crypto/tls"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMetricsServerOptions: the metrics endpoint is HTTPS behind authentication and authorization
// unless --metrics-secure=false says otherwise, and a certificate directory that lacks its files
// stops the operator at start instead of leaving it on a self-signed certificate.
func TestMetricsServerOptions(t *testing.T) {
	certs := t.TempDir()
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(certs, name), []byte("pem"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range map[string]struct {
		args              []string
		wantAddr, wantErr string
		wantSecure        bool
		wantCertDir       string
	}{
		"secure by default": {wantAddr: ":8443", wantSecure: true},
		"plain HTTP":        {args: []string{"--metrics-secure=false", "--metrics-bind-address=127.0.0.1:8080"}, wantAddr: "127.0.0.1:8080"},
		"disabled":          {args: []string{"--metrics-bind-address=0"}, wantAddr: "0", wantSecure: true},
		"certificate given": {args: []string{"--metrics-cert-dir=" + certs}, wantAddr: ":8443", wantSecure: true, wantCertDir: certs},
		"certificate file missing": {args: []string{"--metrics-cert-dir=" + certs, "--metrics-cert-name=cert.pem"},
			wantErr: "--metrics-cert-dir: stat " + filepath.Join(certs, "cert.pem")},
		"certificate over plain HTTP": {args: []string{"--metrics-cert-dir=" + certs, "--metrics-secure=false"},
			wantErr: "--metrics-cert-dir needs --metrics-secure"},
	} {
		t.Run(name, func(t *testing.T) {
			var m metricsFlags
			fs := flag.NewFlagSet("teardown-operator", flag.ContinueOnError)
			m.bind(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			opts, err := m.serverOptions()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opts.BindAddress != tc.wantAddr || opts.SecureServing != tc.wantSecure || opts.CertDir != tc.wantCertDir {
				t.Errorf("bind address %q, secure %v, cert dir %q; want %q, %v, %q",
					opts.BindAddress, opts.SecureServing, opts.CertDir, tc.wantAddr, tc.wantSecure, tc.wantCertDir)
			}
			if (opts.FilterProvider != nil) != tc.wantSecure {
				t.Errorf("authentication and authorization filter set: %v, want %v", opts.FilterProvider != nil, tc.wantSecure)
			}
			if tc.wantSecure {
				cfg := &tls.Config{NextProtos: []string{"h2"}}
				for _, o := range opts.TLSOpts {
					o(cfg)
				}
				if !slices.Equal(cfg.NextProtos, []string{"http/1.1"}) {
					t.Errorf("TLS protocols %v, want http/1.1 only", cfg.NextProtos)
				}
			}
		})
	}
}
