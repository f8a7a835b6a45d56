package fence

import (
	"net/http"

	"k8s.io/client-go/transport"
)

// Transport returns a wrapper for a rest.Config's transport that fails every request which may
// write (any method but GET, HEAD and OPTIONS) with check's error while check fails. It fences
// clients built outside the manager, such as a metadata client, at the one place all their
// requests pass; reads, lists and watches go through.
func Transport(check func() error) transport.WrapperFunc {
	return func(rt http.RoundTripper) http.RoundTripper {
		return &fencedTransport{next: rt, check: check}
	}
}

type fencedTransport struct {
	next  http.RoundTripper
	check func() error
}

func (t *fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, "": // "" is GET to net/http
	default:
		if err := t.check(); err != nil {
			if req.Body != nil {
				_ = req.Body.Close() // a RoundTripper must close the body, even on error
			}
			return nil, err
		}
	}
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go's transport debugging see past the fence.
func (t *fencedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }
