package metricsauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// scripted is a Reviewer answering from tables, counting its reviews.
type scripted struct {
	users           map[string]authenticationv1.UserInfo // token -> identity
	allowed         map[string]bool                      // username -> may get
	authnErr        error
	authzErr        error
	authns, authzs  int
	lastVerb, lastP string
}

func (s *scripted) Authenticate(_ context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	s.authns++
	u, ok := s.users[token]
	return u, ok, s.authnErr
}

func (s *scripted) Authorize(_ context.Context, u authenticationv1.UserInfo, verb, path string) (bool, error) {
	s.authzs++
	s.lastVerb, s.lastP = verb, path
	return s.allowed[u.Username], s.authzErr
}

func request(h http.Handler, method, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/metrics", nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestGuardAnswers(t *testing.T) {
	prom := authenticationv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus", Groups: []string{"system:serviceaccounts"}}
	dev := authenticationv1.UserInfo{Username: "dev"}
	tests := []struct {
		name           string
		method, auth   string
		authnErr       error
		authzErr       error
		wantCode       int
		wantBody       string
		wantReviews    [2]int // TokenReviews, SubjectAccessReviews
		wantHandlerRan bool
	}{
		{name: "no token", method: "GET", wantCode: 401, wantBody: "bearer token is required"},
		{name: "basic auth is no bearer token", method: "GET", auth: "Basic cHJvbTpwdw==", wantCode: 401},
		{name: "an empty bearer token", method: "GET", auth: "Bearer  ", wantCode: 401},
		{name: "a token the API server does not know", method: "GET", auth: "Bearer forged", wantCode: 401, wantBody: "does not authenticate", wantReviews: [2]int{1, 0}},
		{name: "an identity not allowed", method: "GET", auth: "Bearer dev-token", wantCode: 403, wantBody: "dev may not get /metrics", wantReviews: [2]int{1, 1}},
		{name: "an identity allowed", method: "GET", auth: "bearer prom-token", wantCode: 200, wantBody: "metrics here", wantReviews: [2]int{1, 1}, wantHandlerRan: true},
		{name: "HEAD is a get", method: "HEAD", auth: "Bearer prom-token", wantCode: 200, wantReviews: [2]int{1, 1}, wantHandlerRan: true},
		{name: "POST is refused before any review", method: "POST", auth: "Bearer prom-token", wantCode: 405},
		{name: "the token review fails", method: "GET", auth: "Bearer prom-token", authnErr: errors.New("apiserver down"), wantCode: 500, wantReviews: [2]int{1, 0}},
		{name: "the access review fails", method: "GET", auth: "Bearer prom-token", authzErr: errors.New("apiserver down"), wantCode: 500, wantReviews: [2]int{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &scripted{
				users:    map[string]authenticationv1.UserInfo{"prom-token": prom, "dev-token": dev},
				allowed:  map[string]bool{prom.Username: true},
				authnErr: tt.authnErr, authzErr: tt.authzErr,
			}
			ran := false
			h := NewGuard(r, nil).Wrap(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				ran = true
				_, _ = w.Write([]byte("metrics here"))
			}))
			w := request(h, tt.method, tt.auth)
			if w.Code != tt.wantCode || !strings.Contains(w.Body.String(), tt.wantBody) {
				t.Errorf("got %d %q, want %d containing %q", w.Code, w.Body.String(), tt.wantCode, tt.wantBody)
			}
			if got := [2]int{r.authns, r.authzs}; got != tt.wantReviews {
				t.Errorf("reviews (token, access) = %v, want %v", got, tt.wantReviews)
			}
			if ran != tt.wantHandlerRan {
				t.Errorf("handler ran = %v, want %v", ran, tt.wantHandlerRan)
			}
			if r.authzs > 0 && (r.lastVerb != "get" || r.lastP != "/metrics") {
				t.Errorf("asked %s %s, want get /metrics", r.lastVerb, r.lastP)
			}
		})
	}
}

func TestGuardCachesAnswers(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &scripted{
		users:   map[string]authenticationv1.UserInfo{"prom": {Username: "prom"}, "dev": {Username: "dev"}},
		allowed: map[string]bool{"prom": true},
	}
	h := NewGuard(r, func() time.Time { return now }).Wrap(logr.Discard(), http.NotFoundHandler())
	steps := []struct {
		after       time.Duration
		auth        string
		wantCode    int
		wantReviews [2]int // totals so far
	}{
		{0, "Bearer prom", 404, [2]int{1, 1}},
		{50 * time.Second, "Bearer prom", 404, [2]int{1, 1}},  // both answers kept
		{11 * time.Second, "Bearer prom", 404, [2]int{2, 1}},  // the token again after a minute; the verdict kept 5
		{0, "Bearer forged", 401, [2]int{3, 1}},               // unknown
		{9 * time.Second, "Bearer forged", 401, [2]int{3, 1}}, // kept 10 s
		{2 * time.Second, "Bearer forged", 401, [2]int{4, 1}}, // asked again
		{0, "Bearer dev", 403, [2]int{5, 2}},                  // denied
		{29 * time.Second, "Bearer dev", 403, [2]int{5, 2}},   // kept 30 s
		{2 * time.Second, "Bearer dev", 403, [2]int{5, 3}},    // asked again
		{5 * time.Minute, "Bearer prom", 404, [2]int{6, 4}},   // the allowed verdict expired too
	}
	for i, s := range steps {
		now = now.Add(s.after)
		w := request(h, "GET", s.auth)
		if w.Code != s.wantCode {
			t.Errorf("step %d: code %d, want %d", i, w.Code, s.wantCode)
		}
		if got := [2]int{r.authns, r.authzs}; got != s.wantReviews {
			t.Errorf("step %d: reviews %v, want %v", i, got, s.wantReviews)
		}
	}
}

func TestCacheIsBounded(t *testing.T) {
	var c cache[int, bool]
	now := time.Now()
	for i := 0; i < 3*maxEntries; i++ {
		c.put(i, true, now, time.Minute)
		if len(c.entries) > maxEntries {
			t.Fatalf("%d entries after %d puts, more than %d", len(c.entries), i+1, maxEntries)
		}
	}
	if len(c.entries) < maxEntries/2 {
		t.Errorf("%d entries left: a full cache drops a quarter, not everything", len(c.entries))
	}
	if _, ok := c.get(3*maxEntries-1, now); !ok {
		t.Error("the last entry put is not kept")
	}
	if _, ok := c.get(3*maxEntries-1, now.Add(time.Minute)); ok {
		t.Error("an entry is kept past its time")
	}
}

// blocking is a Reviewer whose reviews wait until released.
type blocking struct{ release chan struct{} }

func (b blocking) Authenticate(context.Context, string) (authenticationv1.UserInfo, bool, error) {
	<-b.release
	return authenticationv1.UserInfo{}, false, nil
}

func (b blocking) Authorize(context.Context, authenticationv1.UserInfo, string, string) (bool, error) {
	return false, nil
}

func TestGuardBoundsReviewsInFlight(t *testing.T) {
	b := blocking{release: make(chan struct{})}
	g := NewGuard(b, nil)
	h := g.Wrap(logr.Discard(), http.NotFoundHandler())
	done := make(chan int, maxReviews)
	for i := 0; i < maxReviews; i++ {
		go func() { done <- request(h, "GET", "Bearer made-up-"+strings.Repeat("x", i)).Code }()
	}
	for deadline := time.Now().Add(5 * time.Second); len(g.reviews) < maxReviews; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d reviews in flight after 5s, want %d", len(g.reviews), maxReviews)
		}
	}
	w := request(h, "GET", "Bearer one-more")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("with %d reviews in flight another request got %d (Retry-After %q), want 503 with Retry-After", maxReviews, w.Code, w.Header().Get("Retry-After"))
	}
	close(b.release)
	for i := 0; i < maxReviews; i++ {
		if code := <-done; code != http.StatusUnauthorized {
			t.Errorf("a review in flight ended %d, want 401", code)
		}
	}
}

func TestIdentityKeyIsUnambiguous(t *testing.T) {
	a := authenticationv1.UserInfo{Username: "u", Extra: map[string]authenticationv1.ExtraValue{"k": {"a b"}}}
	b := authenticationv1.UserInfo{Username: "u", Extra: map[string]authenticationv1.ExtraValue{"k": {"a", "b"}}}
	if identityKey(a) == identityKey(b) {
		t.Errorf("two identities share the key %s", identityKey(a))
	}
}
