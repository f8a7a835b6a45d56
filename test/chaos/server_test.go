package chaos

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// flakyServer stands for the external APIs of the pipelines: it answers each request at random
// with 200, 503, 429 with Retry-After, or 200 after a pause, and records every request.
type flakyServer struct {
	srv *httptest.Server
	// steady answers every request with 200 at once (the soak's load, not a fault).
	steady bool
	// arrived, if set, is called with each request's path as it arrives, before the answer.
	arrived func(path string)
	mu      sync.Mutex
	// requests by path ("/<policy>/<step>/<object>"), in arrival order.
	requests map[string][]request
}

type request struct {
	key    string    // Idempotency-Key
	at     time.Time // when it arrived (an answer may come seconds later)
	status int
}

func newFlakyServer() *flakyServer {
	s := &flakyServer{requests: map[string][]request{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

func (s *flakyServer) serve(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	if s.arrived != nil {
		s.arrived(r.URL.Path)
	}
	status := http.StatusOK
	n := rand.IntN(100)
	if s.steady {
		n = 100
	}
	switch {
	case n < 15:
		status = http.StatusServiceUnavailable
	case n < 25:
		w.Header().Set("Retry-After", strconv.Itoa(1))
		status = http.StatusTooManyRequests
	case n < 40:
		time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond) // slow
	}
	s.mu.Lock()
	s.requests[r.URL.Path] = append(s.requests[r.URL.Path], request{key: r.Header.Get("Idempotency-Key"), at: arrived, status: status})
	s.mu.Unlock()
	w.WriteHeader(status)
}

// snapshot returns what the server received, by path.
func (s *flakyServer) snapshot() map[string][]request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]request, len(s.requests))
	for k, v := range s.requests {
		out[k] = append([]request(nil), v...)
	}
	return out
}
