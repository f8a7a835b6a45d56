package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// deletions records when each target, in any namespace, is seen deleted, by namespace/name. The
// API server may close a watch at any time (it does close slow watchers during a burst of
// deletions): the watch is then resumed from the last resourceVersion seen, or, when that is too
// old, the targets are listed again and those to be deleted that are missing from the list are
// taken as gone at that time.
type deletions struct {
	keys     []string // the targets to be deleted, for re-lists
	mu       sync.Mutex
	goneAt   map[string]time.Time
	cancel   context.CancelFunc
	done     chan struct{}
	restarts []restart
	inferred int // deletions found by a re-list rather than seen on the watch
}

// restart says when and why the watch was started again.
type restart struct {
	at   time.Time
	text string
}

// targetLabels select the benchmark's targets, in every namespace.
var targetLabels = client.MatchingLabels{"app": "bench"}

func configMapList() *metav1.PartialObjectMetadataList {
	return &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}}
}

// watchDeletions starts watching the targets; keys are those to be deleted, for re-lists. The
// watch goes on, resumed whenever the API server closes it, until stop is called or ctx ends.
func watchDeletions(ctx context.Context, c client.WithWatch, keys []string) (*deletions, error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := watchTargets(ctx, c, "")
	if err != nil {
		cancel()
		return nil, err
	}
	d := &deletions{keys: keys, goneAt: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go d.follow(ctx, c, w)
	return d, nil
}

// watchTargets watches the targets from resourceVersion rv ("": from now).
func watchTargets(ctx context.Context, c client.WithWatch, rv string) (watch.Interface, error) {
	opts := []client.ListOption{targetLabels}
	if rv != "" {
		opts = append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
	}
	return c.Watch(ctx, configMapList(), opts...)
}

// stop ends the watch and returns once it has ended. It must be called before the API server
// goes away: a watch that outlives it finds it closed, and fails to resume ("connection refused").
// stop may be called more than once.
func (d *deletions) stop() {
	d.cancel()
	<-d.done
}

func (d *deletions) follow(ctx context.Context, c client.WithWatch, w watch.Interface) {
	defer close(d.done)
	rv := ""
	for {
		lastErr, ended := d.drain(ctx, w, &rv)
		w.Stop()
		if ended || ctx.Err() != nil {
			return
		}
		why := "closed by the API server"
		if lastErr != nil {
			why = "ended with " + lastErr.Error()
		}
		for {
			var (
				how string
				err error
			)
			if rv != "" && !apierrors.IsResourceExpired(lastErr) && !apierrors.IsGone(lastErr) {
				how = "resumed at resourceVersion " + rv
				w, err = watchTargets(ctx, c, rv)
			} else {
				var found int
				found, rv, err = d.relist(ctx, c)
				how = fmt.Sprintf("re-listed (%d deletions found), resumed at resourceVersion %s", found, rv)
				if err == nil {
					w, err = watchTargets(ctx, c, rv)
				}
			}
			if ctx.Err() != nil {
				if err == nil {
					w.Stop()
				}
				return // stopped while resuming: not a failure
			}
			r := restart{at: time.Now(), text: fmt.Sprintf("deletion watch %s; %s", why, how)}
			if err != nil {
				r.text = fmt.Sprintf("deletion watch %s; restarting it failed: %v", why, err)
			}
			fmt.Fprintln(os.Stderr, "  ... "+r.text)
			d.mu.Lock()
			d.restarts = append(d.restarts, r)
			d.mu.Unlock()
			if err == nil {
				break
			}
			lastErr = err // a 410 here makes the next try a re-list
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// drain records the deletions a watch reports until the API server closes it, or ctx ends
// (ended). It keeps in rv the last resourceVersion seen and returns the last error event.
func (d *deletions) drain(ctx context.Context, w watch.Interface, rv *string) (lastErr error, ended bool) {
	for {
		var ev watch.Event
		var open bool
		select {
		case <-ctx.Done():
			return lastErr, true
		case ev, open = <-w.ResultChan():
		}
		if !open {
			return lastErr, false
		}
		if ev.Type == watch.Error {
			lastErr = apierrors.FromObject(ev.Object)
			continue
		}
		m, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if !ok {
			continue
		}
		if ev.Type == watch.Deleted {
			d.mu.Lock()
			d.goneAt[client.ObjectKeyFromObject(m).String()] = time.Now()
			d.mu.Unlock()
		}
		*rv = m.ResourceVersion
	}
}

// relist lists the targets and records those to be deleted that are missing as gone now.
func (d *deletions) relist(ctx context.Context, c client.Client) (int, string, error) {
	list := configMapList()
	if err := c.List(ctx, list, targetLabels); err != nil {
		return 0, "", err
	}
	present := map[string]bool{}
	for _, m := range list.Items {
		present[client.ObjectKeyFromObject(&m).String()] = true
	}
	now := time.Now()
	found := 0
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range d.keys {
		if !present[k] {
			if _, seen := d.goneAt[k]; !seen {
				d.goneAt[k] = now
				found++
			}
		}
	}
	d.inferred += found
	return found, list.ResourceVersion, nil
}

// snapshot returns a copy of the deletions seen so far.
func (d *deletions) snapshot() map[string]time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]time.Time, len(d.goneAt))
	for k, v := range d.goneAt {
		out[k] = v
	}
	return out
}

// count returns how many targets are gone so far.
func (d *deletions) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.goneAt)
}

// wait returns when n targets are gone.
func (d *deletions) wait(ctx context.Context, n int) (map[string]time.Time, error) {
	err := waitFor(ctx, 0, func() (bool, error) { return d.count() >= n, nil })
	return d.snapshot(), err
}

// resumed returns the watch's restarts and how many deletions re-lists found.
func (d *deletions) resumed() ([]restart, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]restart(nil), d.restarts...), d.inferred
}
