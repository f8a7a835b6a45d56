//go:build faultinject

package faultinject

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TimeTravel serves a process's first view of the cluster from a point in the past, as Sieve's
// "time travel" does with a lagging API server: the first list of each resource its caches make is
// read at resourceVersion RV (etcd keeps it until compaction), and the watch that follows that
// list, which the API server answers from RV on, is held for Hold. For that long the caches show
// the cluster as it was at RV; then they catch up.
type TimeTravel struct {
	RV   string
	Hold time.Duration
}

// ParseTimeTravel reads "<resourceVersion>:<duration>", for example "41234:10s"; "" is none.
func ParseTimeTravel(s string) (*TimeTravel, error) {
	if s == "" {
		return nil, nil
	}
	rv, hold, ok := strings.Cut(s, ":")
	if _, err := strconv.ParseUint(rv, 10, 64); !ok || err != nil || rv == "0" {
		return nil, fmt.Errorf("%s: %q: want <resourceVersion>:<duration>, the resourceVersion a positive integer", EnvTimeTravel, s)
	}
	d, err := time.ParseDuration(hold)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("%s: %q: hold %q is not a positive Go duration", EnvTimeTravel, s, hold)
	}
	return &TimeTravel{RV: rv, Hold: d}, nil
}

// journey is a TimeTravel under way, shared by the transports of all the process's clients.
type journey struct {
	tt TimeTravel
	mu sync.Mutex
	// stage per cache (see cacheOf): absent before its first list, listed once that list was sent
	// to the past, caught up once the watch after it was held.
	stage map[string]int
}

func newJourney(tt TimeTravel) *journey { return &journey{tt: tt, stage: map[string]int{}} }

// traveller applies a journey to the requests of one transport.
type traveller struct {
	next http.RoundTripper
	*journey
}

const (
	listed = iota + 1
	caughtUp
)

// WrappedRoundTripper lets client-go's transport debugging see past the traveller.
func (t *traveller) WrappedRoundTripper() http.RoundTripper { return t.next }

func (t *traveller) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return t.next.RoundTrip(req)
	}
	q := req.URL.Query()
	resource, name := resourceOf(req.URL.Path)
	watching := q.Get("watch") == "true" || q.Get("watch") == "1"
	if name != "" && !watching {
		return t.next.RoundTrip(req) // a read of one object: never cached, never stale
	}
	cache := cacheOf(req, resource)
	switch stage := t.stageOf(cache); {
	case stage == 0 && watching && q.Get("sendInitialEvents") == "true":
		// A cache's first view as a stream (WatchListClient) starts at the newest state; refused
		// with a 400, which it does not retry, the reflector falls back to a list, which goes to
		// the past.
		return statusResponse(req, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			"watch-list refused (injected): this process's first view is a list at resourceVersion "+t.tt.RV), nil
	case stage == 0 && !watching && q.Get("resourceVersion") == "0" && q.Get("continue") == "":
		// A cache's first list (a reflector lists from "0" first; a live read lists from "").
		q.Set("resourceVersion", t.tt.RV)
		q.Set("resourceVersionMatch", "Exact")
		req = req.Clone(req.Context())
		req.URL.RawQuery = q.Encode()
		t.setStage(cache, listed)
		fmt.Fprintf(os.Stderr, "time travel: %s listed at resourceVersion %s\n", cache, t.tt.RV)
	case stage == listed && watching:
		t.setStage(cache, caughtUp)
		fmt.Fprintf(os.Stderr, "time travel: the watch of %s held for %s\n", cache, t.tt.Hold)
		select {
		case <-time.After(t.tt.Hold):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
		fmt.Fprintf(os.Stderr, "time travel: the watch of %s goes on from the past\n", cache)
	}
	return t.next.RoundTrip(req)
}

// cacheOf names the cache a list or watch request feeds: its resource, its selectors, and
// whether it holds metadata only (two caches of one resource travel each on its own).
func cacheOf(req *http.Request, resource string) string {
	q := req.URL.Query()
	kind := "objects"
	if strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
		kind = "metadata"
	}
	return fmt.Sprintf("%s %s labels=%q fields=%q", kind, resource, q.Get("labelSelector"), q.Get("fieldSelector"))
}

func (j *journey) stageOf(cache string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stage[cache]
}

func (j *journey) setStage(cache string, s int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.stage[cache] = s
}
