//go:build faultinject

package faultinject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// faultyWatches applies watch faults to the watch requests that pass through it.
type faultyWatches struct {
	next   http.RoundTripper
	faults *watchFaults
}

// WrappedRoundTripper lets client-go's transport debugging see past the faults.
func (f *faultyWatches) WrappedRoundTripper() http.RoundTripper { return f.next }

func (f *faultyWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if w := q.Get("watch"); w != "true" && w != "1" {
		return f.next.RoundTrip(req)
	}
	resource, _ := resourceOf(req.URL.Path)
	if f.faults.takeExpired(resource) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return expiredResponse(req), nil
	}
	if f.faults.concern(resource) {
		// The faults take a JSON stream apart; clients that ask for protobuf (the metadata
		// client does) get the same objects as JSON.
		req = req.Clone(req.Context())
		req.Header.Set("Accept", strings.ReplaceAll(req.Header.Get("Accept"), "application/vnd.kubernetes.protobuf", "application/json"))
	}
	resp, err := f.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || !f.faults.concern(resource) ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	resp.Body = f.faults.stream(resource, resp.Body)
	return resp, nil
}

// expiredResponse is the API server's answer to a watch from a resourceVersion it no longer has:
// the reflector lists again.
func expiredResponse(req *http.Request) *http.Response {
	return statusResponse(req, http.StatusGone, metav1.StatusReasonExpired, "too old resource version (injected)")
}

// statusResponse is an answer of the API server that refuses req: a Status of code and reason.
func statusResponse(req *http.Request, code int, reason metav1.StatusReason, msg string) *http.Response {
	body, _ := json.Marshal(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code)})
	return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req}
}

// watchFaults holds the faults to apply and counts, per resource, the events of the scope's
// namespace seen on all its streams, so that each fault fires once, at its event.
type watchFaults struct {
	scope   string
	mu      sync.Mutex
	faults  []WatchFault
	fired   []bool
	seen    map[string]int
	expired map[string]bool // a resource whose next watch is answered 410
}

func newWatchFaults(faults []WatchFault, scope string) *watchFaults {
	return &watchFaults{scope: scope, faults: faults, fired: make([]bool, len(faults)), seen: map[string]int{}, expired: map[string]bool{}}
}

func (w *watchFaults) concern(resource string) bool {
	for _, f := range w.faults {
		if f.Resource == resource {
			return true
		}
	}
	return false
}

func (w *watchFaults) takeExpired(resource string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.expired[resource] {
		delete(w.expired, resource)
		return true
	}
	return false
}

// next counts an event of the scope and returns the fault that fires at it, if any.
func (w *watchFaults) next(resource string) (WatchFault, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen[resource]++
	for i, f := range w.faults {
		if !w.fired[i] && f.Resource == resource && f.N == w.seen[resource] {
			w.fired[i] = true
			fmt.Fprintf(os.Stderr, "watch fault fired: %s\n", f)
			if f.Mode == Expire {
				w.expired[resource] = true
			}
			return f, true
		}
	}
	return WatchFault{}, false
}

// event is one watch event as the stream carried it, with what the faults need of it.
type event struct {
	raw        []byte
	typ        string
	namespace  string
	objectName string
}

func decodeEvent(raw json.RawMessage) event {
	var e struct {
		Type   string `json:"type"`
		Object struct {
			Metadata struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"metadata"`
		} `json:"object"`
	}
	_ = json.Unmarshal(raw, &e)
	return event{raw: append(bytes.Clone(raw), '\n'), typ: e.Type, namespace: e.Object.Metadata.Namespace, objectName: e.Object.Metadata.Name}
}

// stream returns a body that carries body's events with the faults applied.
func (w *watchFaults) stream(resource string, body io.ReadCloser) io.ReadCloser {
	pr, pw := io.Pipe()
	events := make(chan event)
	done := make(chan struct{})
	go func() { // reads
		defer close(events)
		dec := json.NewDecoder(body)
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return
			}
			select {
			case events <- decodeEvent(raw):
			case <-done:
				return
			}
		}
	}()
	go func() { // writes, with the faults
		defer close(done)
		err := (&faultyStream{w: w, resource: resource, in: events, out: pw}).run()
		_ = body.Close()
		_ = pw.CloseWithError(err)
	}()
	return &streamBody{PipeReader: pr, body: body}
}

// streamBody closes the API server's stream too when the client closes the body.
type streamBody struct {
	*io.PipeReader
	body io.ReadCloser
}

func (s *streamBody) Close() error {
	_ = s.body.Close()
	return s.PipeReader.Close()
}
