package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// endpoint is a real HTTP server on loopback standing in for an external API. Each test routes
// the paths under its own namespace ("/<ns>/...") to its handler and reads what was received.
type endpoint struct {
	srv      *httptest.Server
	mu       sync.Mutex
	handlers map[string]http.HandlerFunc
	received map[string][]received
}

// received is one request as the server saw it.
type received struct {
	Method, Path string
	Header       http.Header
	Body         string
	At           time.Time
}

func newEndpoint() *endpoint {
	e := &endpoint{handlers: map[string]http.HandlerFunc{}, received: map[string][]received{}}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	route, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	e.mu.Lock()
	e.received[route] = append(e.received[route], received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: string(body), At: time.Now()})
	h := e.handlers[route]
	e.mu.Unlock()
	if h == nil {
		http.Error(w, "no handler for "+route, http.StatusNotFound)
		return
	}
	h(w, r)
}

// handle routes "/<route>/..." to h.
func (e *endpoint) handle(route string, h http.HandlerFunc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handlers[route] = h
}

// url is the URL of path under route.
func (e *endpoint) url(route, path string) string {
	return e.srv.URL + "/" + route + path
}

// requests returns what the route has received so far.
func (e *endpoint) requests(route string) []received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]received(nil), e.received[route]...)
}

// calls returns a function counting the requests to route whose "METHOD path" has the prefix.
func (e *endpoint) calls(route, prefix string) func() int {
	return func() int {
		n := 0
		for _, r := range e.requests(route) {
			if strings.HasPrefix(r.Method+" "+r.Path, prefix) {
				n++
			}
		}
		return n
	}
}
