//go:build faultinject

package faultinject

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestParseWatchFaults(t *testing.T) {
	got, err := ParseWatchFaults("coalesce:configmaps:3, expire:teardownruns:5,delay:jobs:1:3s")
	if err != nil {
		t.Fatal(err)
	}
	want := "[coalesce:configmaps:3:2s expire:teardownruns:5:2s delay:jobs:1:3s]"
	if fmt.Sprint(got) != want {
		t.Errorf("got %v, want %s", got, want)
	}
	for in, msg := range map[string]string{
		"drop:configmaps:1":     `mode "drop" is not one of`,
		"delay:configmaps:0":    `event number "0" is not a positive integer`,
		"delay:configmaps":      "want mode:resource:n[:duration]",
		"delay:configmaps:1:-1": `duration "-1" is not a positive Go duration`,
	} {
		if _, err := ParseWatchFaults(in); err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), EnvWatchFaults) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", in, err, EnvWatchFaults, msg)
		}
	}
}

// ev is a watch event of object name in namespace ns, version rv.
func ev(ns, name, rv string) string {
	return fmt.Sprintf(`{"type":"MODIFIED","object":{"metadata":{"namespace":%q,"name":%q,"resourceVersion":%q}}}`, ns, name, rv)
}

// TestFaultyStream sends events through a stream with one fault, in a synctest bubble (the
// faults' waits are virtual), and reads what the client gets.
func TestFaultyStream(t *testing.T) {
	a1, b2, a3, c4 := ev("s", "a", "1"), ev("s", "b", "2"), ev("s", "a", "3"), ev("s", "c", "4")
	other := ev("other", "x", "9")
	for _, tc := range []struct {
		name   string
		fault  string
		pause  time.Duration // between the events sent
		in     []string
		want   []string
		closed bool // the stream ends after want, though the server's goes on
	}{
		{"no fault at this event", "delay:configmaps:9", 0, []string{a1, b2}, []string{a1, b2}, false},
		{"other namespaces are not counted", "close:configmaps:1", 0, []string{other, a1, b2}, []string{other, a1}, true},
		{"coalesce: a newer state of the object comes in time", "coalesce:configmaps:1", time.Second, []string{a1, a3, b2}, []string{a3, b2}, false},
		{"coalesce: the next event is another object's", "coalesce:configmaps:1", time.Second, []string{a1, b2, a3}, []string{a1, b2, a3}, false},
		{"coalesce: nothing comes in time, delivered late", "coalesce:configmaps:1", 3 * time.Second, []string{a1, a3}, []string{a1, a3}, false},
		{"swap", "swap:configmaps:2", time.Second, []string{a1, b2, a3, c4}, []string{a1, a3, b2, c4}, false},
		{"close", "close:configmaps:2", 0, []string{a1, b2, a3}, []string{a1, b2}, true},
		{"expire", "expire:configmaps:1", 0, []string{a1, b2}, []string{a1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				faults, err := ParseWatchFaults(tc.fault)
				if err != nil {
					t.Fatal(err)
				}
				w := newWatchFaults(faults, "s")
				server, send := io.Pipe()
				body := w.stream("configmaps", server)
				go func() {
					for _, e := range tc.in {
						if _, err := io.WriteString(send, e+"\n"); err != nil {
							return // the stream was closed
						}
						time.Sleep(tc.pause)
					}
					time.Sleep(time.Hour) // a watch stays open
					_ = send.Close()
				}()
				var got []string
				lines := bufio.NewScanner(body)
				for len(got) < len(tc.want) && lines.Scan() {
					got = append(got, lines.Text())
				}
				if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
					t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
				}
				if tc.closed && lines.Scan() {
					t.Errorf("the stream goes on after the fault: %s", lines.Text())
				}
				_ = body.Close()
				_ = send.Close()
				if tc.fault == "expire:configmaps:1" && !w.takeExpired("configmaps") {
					t.Error("the next watch of the resource is not answered 410")
				}
				time.Sleep(2 * time.Hour) // the server's side ends
			})
		})
	}
}

func TestDelayStallsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		faults, _ := ParseWatchFaults("delay:configmaps:2:5s")
		server, send := io.Pipe()
		body := newWatchFaults(faults, "").stream("configmaps", server)
		go func() {
			for _, e := range []string{ev("s", "a", "1"), ev("s", "b", "2"), ev("s", "c", "3")} {
				_, _ = io.WriteString(send, e+"\n")
			}
		}()
		lines := bufio.NewScanner(body)
		start := time.Now()
		var at []time.Duration
		for range 3 {
			lines.Scan()
			at = append(at, time.Since(start))
		}
		if fmt.Sprint(at) != "[0s 5s 5s]" {
			t.Errorf("events delivered at %v, want [0s 5s 5s]", at)
		}
		_ = body.Close()
		_ = send.Close()
	})
}
