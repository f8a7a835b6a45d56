package engine

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/openapi"
)

// schemaSettle is how long the API server's schema of a kind's group-version must have been
// published before a MutatingAdmissionPolicy may match the kind. The API server mutates an object
// with the schema its admission plugin reads from its own /openapi/v3, which it polls every 5 s;
// until it has the group-version, it refuses every create that a MutatingAdmissionPolicy matches
// ("Resource kind ... not found", 503), whatever the policy's failurePolicy. Twice that poll.
const schemaSettle = 10 * time.Second

// schemaGate says whether the API server has had a kind's schema long enough to apply an
// admission policy to it: kinds of client-go's scheme always (the API server knows their types),
// others once their group-version has been in /openapi/v3 for schemaSettle. It is safe for
// concurrent use.
type schemaGate struct {
	openapi openapi.Client
	now     func() time.Time

	mu sync.Mutex
	// seen is when each group-version was first seen published.
	seen map[schema.GroupVersion]time.Time
}

func newSchemaGate(c openapi.Client) *schemaGate {
	return &schemaGate{openapi: c, now: time.Now, seen: map[schema.GroupVersion]time.Time{}}
}

// wait returns how long until the kind's schema is settled: 0 when it is. It reads /openapi/v3
// on every call (it is asked only before an admission policy is made): a group-version that
// disappears, a CRD deleted, starts over when it comes back, as the API server's admission does.
func (g *schemaGate) wait(gvk schema.GroupVersionKind) (time.Duration, error) {
	if clientgoscheme.Scheme.Recognizes(gvk) {
		return 0, nil
	}
	gv := gvk.GroupVersion()
	paths, err := g.openapi.Paths()
	if err != nil {
		return 0, fmt.Errorf("reading the API server's /openapi/v3: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, published := paths[openAPIPath(gv)]; !published {
		delete(g.seen, gv)
		return time.Second, nil
	}
	first, ok := g.seen[gv]
	if !ok {
		first = g.now()
		g.seen[gv] = first
	}
	return max(0, schemaSettle-g.now().Sub(first)), nil
}

// openAPIPath is the group-version's path in /openapi/v3.
func openAPIPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}
