package httpstep

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/teardown-dev/teardown-operator/internal/faultinject"
)

// maxClients bounds the cached clients (one per destination rule, redirect rule and TLS
// material); past it the cache starts afresh.
const maxClients = 128

// clientKey says what a client is made of.
type clientKey struct {
	restricted bool
	follow     bool
	tls        [sha256.Size]byte
}

// tlsMaterial is what a step reads for TLS: PEM bytes, not yet parsed.
type tlsMaterial struct {
	ca         []byte
	cert, key  []byte
	caPath     string
	clientPath string
}

func (m *tlsMaterial) hash() [sha256.Size]byte {
	if m == nil {
		return [sha256.Size]byte{}
	}
	h := sha256.New()
	for _, b := range [][]byte{m.ca, m.cert, m.key} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// clientCache shares clients, and so their connections, between requests of the same kind.
type clientCache struct {
	guard *guard
	// scripted replaces the network when set (Options.Transport).
	scripted http.RoundTripper
	mu       sync.Mutex
	byKey    map[clientKey]*retryablehttp.Client
}

func newClientCache(g *guard, scripted http.RoundTripper) *clientCache {
	return &clientCache{guard: g, scripted: scripted, byKey: map[clientKey]*retryablehttp.Client{}}
}

// get returns a client for requests of a TeardownPolicy (restricted) or not, following
// same-host redirects or not, trusting and presenting the given TLS material.
func (c *clientCache) get(restricted, follow bool, m *tlsMaterial) (*retryablehttp.Client, error) {
	key := clientKey{restricted: restricted, follow: follow, tls: m.hash()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.byKey[key]; ok {
		return cl, nil
	}
	tlsConfig, err := m.config()
	if err != nil {
		return nil, err
	}
	if len(c.byKey) >= maxClients {
		for k, cl := range c.byKey {
			cl.HTTPClient.CloseIdleConnections()
			delete(c.byKey, k)
		}
	}
	cl := c.newClient(restricted, follow, tlsConfig)
	c.byKey[key] = cl
	return cl, nil
}

func (c *clientCache) newClient(restricted, follow bool, tlsConfig *tls.Config) *retryablehttp.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		// No proxy: a proxy would make the destination check meaningless, and environment
		// settings of the operator are not the policy's to use.
		Proxy:                  nil,
		DialContext:            dialNumeric(dialer),
		TLSClientConfig:        tlsConfig,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	if restricted {
		transport.DialContext = c.guard.dial
	}
	var rt http.RoundTripper = transport
	if c.scripted != nil {
		rt = c.scripted
	}
	rt = faultinject.HTTP(rt) // only in a build for the fault suite (tag faultinject)
	hc := &http.Client{
		Transport: rt,
		// No cookie jar: nothing is carried from one request to another.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			return c.checkRedirect(restricted, follow, req, via)
		},
	}
	return &retryablehttp.Client{
		HTTPClient: hc,
		// One try per call: retries happen across reconciles, with the step's backoff and
		// attempts recorded in the run's status.
		RetryMax:     0,
		CheckRetry:   func(context.Context, *http.Response, error) (bool, error) { return false, nil },
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
		Backoff:      retryablehttp.DefaultBackoff,
	}
}

// redirectError says why a redirect was not followed.
type redirectError struct{ msg string }

func (e *redirectError) Error() string { return e.msg }

func (c *clientCache) checkRedirect(restricted, follow bool, req *http.Request, via []*http.Request) error {
	if !follow {
		return http.ErrUseLastResponse
	}
	first := via[0].URL
	if restricted {
		if err := c.guard.checkName(req.URL.Hostname(), portOf(req.URL)); err != nil {
			return &redirectError{fmt.Sprintf("redirect to %s: %v", req.URL.Redacted(), err)}
		}
	}
	if !strings.EqualFold(req.URL.Scheme, first.Scheme) || !strings.EqualFold(req.URL.Hostname(), first.Hostname()) || portOf(req.URL) != portOf(first) {
		return &redirectError{fmt.Sprintf("redirect to %s refused: redirects are followed only to the same scheme, host and port as %s://%s", req.URL.Redacted(), first.Scheme, first.Host)}
	}
	if len(via) > maxRedirects {
		return &redirectError{fmt.Sprintf("stopped after %d redirects", maxRedirects)}
	}
	return nil
}

// config builds the TLS configuration: the step's CAs instead of the system's, and its client
// certificate. Verification is never turned off.
func (m *tlsMaterial) config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if m == nil {
		return cfg, nil
	}
	if len(m.ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(m.ca) {
			return nil, fmt.Errorf("%s: no PEM certificate in the bundle", m.caPath)
		}
		cfg.RootCAs = pool
	}
	if len(m.cert) > 0 || len(m.key) > 0 {
		pair, err := tls.X509KeyPair(m.cert, m.key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.clientPath, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
