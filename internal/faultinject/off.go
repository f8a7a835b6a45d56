//go:build !faultinject

package faultinject

import (
	"net/http"

	"k8s.io/client-go/rest"
)

// Enabled says whether this binary was built with fault injection.
const Enabled = false

// Install does nothing in a build without fault injection.
func Install(*rest.Config) error { return nil }

// HTTP returns rt as it is in a build without fault injection.
func HTTP(rt http.RoundTripper) http.RoundTripper { return rt }
