//go:build faultinject

package faultinject

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// defaultHold is how long coalesce and swap wait for the next event, and delay stalls, when the
// fault names no duration.
const defaultHold = 2 * time.Second

// WatchFault is one fault on the watch streams of one resource: at the N-th event (counted from 1
// over all of the resource's streams, events of the scope's namespace only).
type WatchFault struct {
	Mode     string
	Resource string
	N        int
	Hold     time.Duration
}

func (f WatchFault) String() string {
	return fmt.Sprintf("%s:%s:%d:%s", f.Mode, f.Resource, f.N, f.Hold)
}

// ParseWatchFaults reads "mode:resource:n[:duration]" faults, comma separated, for example
// "coalesce:configmaps:3,expire:teardownruns:5,delay:jobs:1:3s".
func ParseWatchFaults(s string) ([]WatchFault, error) {
	var out []WatchFault
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		parts := strings.Split(item, ":")
		if len(parts) < 3 || len(parts) > 4 {
			return nil, fmt.Errorf("%s: watch fault %q: want mode:resource:n[:duration]", EnvWatchFaults, item)
		}
		f := WatchFault{Mode: parts[0], Resource: parts[1], Hold: defaultHold}
		switch f.Mode {
		case Coalesce, Delay, Swap, Close, Expire:
		default:
			return nil, fmt.Errorf("%s: watch fault %q: mode %q is not one of coalesce, delay, swap, close, expire", EnvWatchFaults, item, f.Mode)
		}
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: watch fault %q: event number %q is not a positive integer", EnvWatchFaults, item, parts[2])
		}
		f.N = n
		if len(parts) == 4 {
			if f.Hold, err = time.ParseDuration(parts[3]); err != nil || f.Hold <= 0 {
				return nil, fmt.Errorf("%s: watch fault %q: duration %q is not a positive Go duration", EnvWatchFaults, item, parts[3])
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// faultyStream copies events from in to out, applying the faults that fire.
type faultyStream struct {
	w        *watchFaults
	resource string
	in       <-chan event
	out      io.Writer
}

// run copies until in ends (nil) or the stream is to close (io.EOF); a write error ends it too.
func (s *faultyStream) run() error {
	for ev := range s.in {
		if err := s.handle(ev); err != nil {
			return err
		}
	}
	return nil
}

func (s *faultyStream) handle(ev event) error {
	if ev.typ == "BOOKMARK" || ev.typ == "ERROR" || s.w.scope != "" && ev.namespace != s.w.scope {
		return s.write(ev)
	}
	f, ok := s.w.next(s.resource)
	if !ok {
		return s.write(ev)
	}
	switch f.Mode {
	case Delay:
		time.Sleep(f.Hold)
		return s.write(ev)
	case Close, Expire:
		if err := s.write(ev); err != nil {
			return err
		}
		return io.EOF
	case Coalesce:
		next, ok := s.await(f.Hold)
		if !ok || next.objectName != ev.objectName || next.namespace != ev.namespace {
			if err := s.write(ev); err != nil {
				return err
			}
		}
		if ok {
			return s.handle(next)
		}
		return nil
	default: // Swap
		next, ok := s.await(f.Hold)
		if ok {
			if err := s.handle(next); err != nil {
				return err
			}
		}
		return s.write(ev)
	}
}

// await returns the next event if it comes within d.
func (s *faultyStream) await(d time.Duration) (event, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case ev, ok := <-s.in:
		return ev, ok
	case <-t.C:
		return event{}, false
	}
}

func (s *faultyStream) write(ev event) error {
	_, err := s.out.Write(ev.raw)
	return err
}
