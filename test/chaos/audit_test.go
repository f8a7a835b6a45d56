package chaos

import (
	"fmt"
	"net/url"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

// auditEvent is what the suite reads of one kube-apiserver audit event.
type auditEvent struct {
	Stage            string `json:"stage"`
	Verb             string `json:"verb"`
	RequestURI       string `json:"requestURI"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp  time.Time `json:"stageTimestamp"`
	// RequestObject is the body of a write of a run (the audit policy's Request level).
	RequestObject *struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status struct {
			Steps []struct {
				Name  string `json:"name"`
				Phase string `json:"phase"`
			} `json:"steps"`
		} `json:"status"`
	} `json:"requestObject"`
}

// records reports whether the write stores step as Succeeded.
func (ev *auditEvent) records(step string) bool {
	if ev.RequestObject == nil {
		return false
	}
	for _, s := range ev.RequestObject.Status.Steps {
		if s.Name == step && s.Phase == "Succeeded" {
			return true
		}
	}
	return false
}

// readAudit calls fn with every complete audit event of the suite's cluster.
func readAudit(fn func(ev *auditEvent)) {
	GinkgoHelper()
	Expect(framework.ReadAudit(root, clusterName, 1<<20, func(ev *auditEvent) {
		if ev.Stage == "ResponseComplete" {
			fn(ev)
		}
	})).To(Succeed())
}

// acknowledged reports whether the API server accepted the request.
func (ev *auditEvent) acknowledged() bool {
	return ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300 && ev.ObjectRef != nil
}

// answered reports whether the client could still have been waiting for the answer. The API
// server keeps writing a request its timeout filter gave up on (the client got a 504, or had
// given up itself: the requestURI's timeout is the client's too), and audits the late answer as
// the write's own: the client never knew. A second short of the timeout is a margin for the
// time the request took to reach the server.
func (ev *auditEvent) answered() bool {
	timeout := time.Minute // the API server's default --request-timeout
	if u, err := url.Parse(ev.RequestURI); err == nil {
		if d, err := time.ParseDuration(u.Query().Get("timeout")); err == nil && d > 0 {
			timeout = d
		}
	}
	return ev.StageTimestamp.Sub(ev.RequestReceived) < timeout-time.Second
}

// runWrites returns, for each run of namespace ns (by "namespace/name"), the requests that wrote
// it and when each was answered: what the operator knew it had recorded, and when.
func runWrites() map[string][]auditEvent {
	out := map[string][]auditEvent{}
	readAudit(func(ev *auditEvent) {
		if ev.acknowledged() && ev.answered() && ev.ObjectRef.Resource == "teardownruns" && ev.Verb != "delete" && ev.Verb != "get" {
			name := ev.ObjectRef.Name
			if name == "" && ev.RequestObject != nil {
				name = ev.RequestObject.Metadata.Name // a create names its object in the body only
			}
			key := ev.ObjectRef.Namespace + "/" + name
			out[key] = append(out[key], *ev)
		}
	})
	return out
}

// recordedAt is when the operator learned that step's success was stored: the answer to the
// first accepted and answered write of the run whose body has the step Succeeded. A write whose
// answer it did not get (a timeout, a crash) told it nothing: repeating the step then is allowed.
func recordedAt(writes []auditEvent, step string) (time.Time, bool) {
	for _, w := range writes {
		if w.records(step) {
			return w.StageTimestamp, true
		}
	}
	return time.Time{}, false
}

// writesBy returns the writes the API server accepted from user (an operator process acting as
// it) received after since, besides its lease and events: what a process that lost its lease
// must not do.
func writesBy(user string, since time.Time) []string {
	var out []string
	readAudit(func(ev *auditEvent) {
		if !ev.acknowledged() || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != user || ev.RequestReceived.Before(since) {
			return
		}
		if r := ev.ObjectRef.Resource; r == "leases" || r == "events" {
			return
		}
		out = append(out, fmt.Sprintf("%s %s at %s", ev.Verb, ev.RequestURI, ev.RequestReceived.Format(time.RFC3339Nano)))
	})
	return out
}

// repeatedBirths returns the creates of a run in ns that the API server refused because the run
// was there already: the run's first pass was passed again from a cache that did not have it yet,
// and its steps could have been repeated with it. After a kill or a failover the new process's
// cache is synced before it acts, so none is expected.
func repeatedBirths(ns string) []string {
	var out []string
	readAudit(func(ev *auditEvent) {
		if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "teardownruns" && ev.ObjectRef.Namespace == ns &&
			ev.ResponseStatus != nil && ev.ResponseStatus.Code == 409 {
			out = append(out, fmt.Sprintf("run %s created again at %s", ev.ObjectRef.Name, ev.StageTimestamp.Format(time.RFC3339Nano)))
		}
	})
	return out
}
