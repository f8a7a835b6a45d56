//go:build faultinject

package faultinject

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

var (
	seen  atomic.Int64
	after = func() int64 {
		n, _ := strconv.ParseInt(os.Getenv(EnvAfter), 10, 64)
		return n
	}()
	traceMu sync.Mutex
)

type counted struct {
	next http.RoundTripper
	// name names the point a request makes, or "" when it makes none.
	name func(*http.Request) string
}

func (c *counted) RoundTrip(req *http.Request) (*http.Response, error) {
	name := ""
	if inScope(req.URL.Path) {
		name = c.name(req)
	}
	resp, err := c.next.RoundTrip(req)
	if name == "" || err != nil {
		return resp, err // a request never answered changed nothing the operator could know of
	}
	reached(name)
	return resp, err
}

// WrappedRoundTripper lets client-go's transport debugging see past the counter.
func (c *counted) WrappedRoundTripper() http.RoundTripper { return c.next }

// reached records a point and kills the process when it is the chosen one.
func reached(name string) {
	n := seen.Add(1)
	line := fmt.Sprintf("%d\t%s\n", n, name)
	if path := os.Getenv(EnvTrace); path != "" {
		traceMu.Lock()
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString(line)
			_ = f.Close()
		}
		traceMu.Unlock()
	}
	if n == after {
		fmt.Fprintf(os.Stderr, "crashpoint %d reached: %s: killing the process\n", n, name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// apiPoint names the point a request to the API server makes: "<verb> <resource>[/<sub>]", with
// " (dry run)" for a dry run; "" for reads and for writes that record nothing a pipeline uses.
func apiPoint(r *http.Request) string {
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[r.Method]
	if verb == "" {
		return ""
	}
	resource, name := resourceOf(r.URL.Path)
	switch strings.SplitN(resource, "/", 2)[0] {
	case "events", "leases", "tokenreviews", "subjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews":
		return ""
	}
	point := verb + " " + resource
	if name != "" {
		point += " " + name
	}
	if r.URL.Query().Get("dryRun") != "" {
		point += " (dry run)"
	}
	return point
}

// resourceOf reads "<resource>[/<subresource>]" and the object's name (none for a create) from
// an API path: /api/v1/namespaces/ns/configmaps/name, /apis/g/v/namespaces/ns/r/name/status,
// /apis/g/v/r.
func resourceOf(path string) (resource, name string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) > 0 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:] // a namespaced resource; "namespaces/<name>" alone is the namespace itself
	}
	switch len(parts) {
	case 0:
		return "?", ""
	case 1:
		return parts[0], ""
	case 2:
		return parts[0], parts[1]
	default:
		return parts[0] + "/" + parts[2], parts[1]
	}
}
