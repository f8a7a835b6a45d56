package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
	"github.com/teardown-dev/teardown-operator/engine/policy"
	"github.com/teardown-dev/teardown-operator/steps"
)

func d(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }

func TestBackoff(t *testing.T) {
	tests := []struct {
		name string
		rp   *v1alpha1.RetryPolicy
		want []time.Duration // for attempts 1, 2, 3, ...
	}{
		{"defaults", nil, []time.Duration{
			5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
			160 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute,
		}},
		{"empty policy uses defaults", &v1alpha1.RetryPolicy{Limit: 3}, []time.Duration{
			5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second,
		}},
		{"custom backoff and maxBackoff", &v1alpha1.RetryPolicy{Backoff: d(time.Second), MaxBackoff: d(10 * time.Second)}, []time.Duration{
			time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second,
		}},
		{"custom backoff, default maxBackoff", &v1alpha1.RetryPolicy{Backoff: d(time.Minute)}, []time.Duration{
			time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute,
		}},
		{"default backoff, custom maxBackoff", &v1alpha1.RetryPolicy{MaxBackoff: d(30 * time.Second)}, []time.Duration{
			5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second,
		}},
		{"maxBackoff above the default", &v1alpha1.RetryPolicy{MaxBackoff: d(time.Hour)}, []time.Duration{
			5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
			160 * time.Second, 320 * time.Second, 640 * time.Second,
		}},
		{"backoff above maxBackoff", &v1alpha1.RetryPolicy{Backoff: d(10 * time.Minute), MaxBackoff: d(time.Minute)}, []time.Duration{
			time.Minute, time.Minute,
		}},
		{"backoff equal to maxBackoff", &v1alpha1.RetryPolicy{Backoff: d(time.Minute), MaxBackoff: d(time.Minute)}, []time.Duration{
			time.Minute, time.Minute,
		}},
		{"zero backoff", &v1alpha1.RetryPolicy{Backoff: d(0)}, []time.Duration{0, 0, 0}},
		{"uneven backoff", &v1alpha1.RetryPolicy{Backoff: d(1500 * time.Millisecond), MaxBackoff: d(5 * time.Second)}, []time.Duration{
			1500 * time.Millisecond, 3 * time.Second, 5 * time.Second,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range tt.want {
				n := int32(i + 1)
				if got := backoff(tt.rp, n); got != want {
					t.Errorf("backoff(attempt %d) = %s, want %s", n, got, want)
				}
			}
		})
	}
}

func TestBackoffLargeAttempts(t *testing.T) {
	tests := []struct {
		name string
		rp   *v1alpha1.RetryPolicy
		n    int32
		want time.Duration
	}{
		{"attempt 0 counts as the first", nil, 0, 5 * time.Second},
		{"negative attempt", nil, -3, 5 * time.Second},
		{"100 attempts, defaults", nil, 100, 5 * time.Minute},
		{"max int32 attempts", nil, math.MaxInt32, 5 * time.Minute},
		{"100 attempts, one day cap", &v1alpha1.RetryPolicy{Backoff: d(time.Second), MaxBackoff: d(24 * time.Hour)}, 100, 24 * time.Hour},
	}
	for _, tt := range tests {
		if got := backoff(tt.rp, tt.n); got != tt.want {
			t.Errorf("%s: backoff(%d) = %s, want %s", tt.name, tt.n, got, tt.want)
		}
	}
}

// A maxBackoff above about 170 years ("2562047h" is the largest the CRD pattern and
// time.ParseDuration accept) lets the doubling overflow before it reaches the cap; the result
// must still be the cap, never zero or negative.
func TestBackoffOverflow(t *testing.T) {
	ceiling := 2562047 * time.Hour
	rp := &v1alpha1.RetryPolicy{Backoff: d(5 * time.Second), MaxBackoff: d(ceiling)}
	for n := int32(1); n <= 100; n++ {
		got := backoff(rp, n)
		if got <= 0 {
			t.Fatalf("backoff(attempt %d) = %s, want positive", n, got)
		}
		if prev := backoff(rp, n-1); n > 1 && got < prev {
			t.Fatalf("backoff(attempt %d) = %s, less than attempt %d's %s", n, got, n-1, prev)
		}
	}
	if got := backoff(rp, 100); got != ceiling {
		t.Errorf("backoff(attempt 100) = %s, want %s", got, ceiling)
	}
}

func TestCapAt(t *testing.T) {
	now := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(x time.Duration) *metav1.MicroTime { tm := metav1.NewMicroTime(now.Add(x)); return &tm }
	tests := []struct {
		name     string
		d        time.Duration
		deadline *metav1.MicroTime
		want     time.Duration
	}{
		{"no deadline", 10 * time.Second, nil, 10 * time.Second},
		{"no deadline, zero", 0, nil, 0},
		{"no deadline, long", 24 * time.Hour, nil, 24 * time.Hour},
		{"deadline later", 10 * time.Second, at(time.Minute), 10 * time.Second},
		{"deadline exactly at the end", 10 * time.Second, at(10 * time.Second), 10 * time.Second},
		{"deadline sooner", 10 * time.Second, at(3 * time.Second), 3 * time.Second},
		{"deadline sooner by a nanosecond", 10 * time.Second, at(10*time.Second - 1), 10*time.Second - 1},
		{"deadline in under a millisecond", 10 * time.Second, at(500 * time.Microsecond), time.Millisecond},
		{"deadline now", 10 * time.Second, at(0), time.Millisecond},
		{"deadline passed", 10 * time.Second, at(-time.Hour), time.Millisecond},
		{"zero wait, deadline later", 0, at(time.Minute), 0},
	}
	for _, tt := range tests {
		if got := capAt(tt.d, now, tt.deadline); got != tt.want {
			t.Errorf("%s: capAt(%s) = %s, want %s", tt.name, tt.d, got, tt.want)
		}
	}
}

func jsonString(size int) apiextensionsv1.JSON {
	// A JSON string of exactly size bytes, quotes included.
	return apiextensionsv1.JSON{Raw: []byte(`"` + strings.Repeat("a", size-2) + `"`)}
}

func TestCheckOutputs(t *testing.T) {
	if MaxOutputBytes != 16*1024 {
		t.Fatalf("MaxOutputBytes = %d, want %d", MaxOutputBytes, 16*1024)
	}
	tests := []struct {
		name    string
		outputs map[string]apiextensionsv1.JSON
		wantErr string
	}{
		{"nil", nil, ""},
		{"empty", map[string]apiextensionsv1.JSON{}, ""},
		{"small", map[string]apiextensionsv1.JSON{"count": {Raw: []byte(`2`)}}, ""},
		{"exactly at the limit", map[string]apiextensionsv1.JSON{"k": jsonString(MaxOutputBytes - 1)}, ""},
		{"one byte over", map[string]apiextensionsv1.JSON{"k": jsonString(MaxOutputBytes)},
			"outputs are 16385 bytes of JSON, over the limit of 16384"},
		{"keys count", map[string]apiextensionsv1.JSON{"key": jsonString(MaxOutputBytes - 2)},
			"outputs are 16385 bytes of JSON, over the limit of 16384"},
		{"several values at the limit", map[string]apiextensionsv1.JSON{
			"a": jsonString(8191), "b": jsonString(8191),
		}, ""},
		{"several values over", map[string]apiextensionsv1.JSON{
			"a": jsonString(8191), "b": jsonString(8191), "c": {Raw: []byte(`1`)},
		}, "outputs are 16386 bytes of JSON, over the limit of 16384"},
		{"far over", map[string]apiextensionsv1.JSON{"big": jsonString(100000)},
			"outputs are 100003 bytes of JSON, over the limit of 16384"},
	}
	for _, tt := range tests {
		err := checkOutputs(tt.outputs)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: checkOutputs: %v, want no error", tt.name, err)
		case tt.wantErr != "" && err == nil:
			t.Errorf("%s: checkOutputs: no error, want %q", tt.name, tt.wantErr)
		case tt.wantErr != "" && err.Error() != tt.wantErr:
			t.Errorf("%s: checkOutputs error %q, want %q", tt.name, err.Error(), tt.wantErr)
		}
	}
}

func TestRetryLimit(t *testing.T) {
	tests := []struct {
		name  string
		retry *v1alpha1.RetryPolicy
		want  int32
	}{
		{"no retry policy", nil, 0},
		{"zero limit", &v1alpha1.RetryPolicy{Backoff: d(time.Second)}, 0},
		{"limit", &v1alpha1.RetryPolicy{Limit: 3}, 3},
		{"max limit", &v1alpha1.RetryPolicy{Limit: 100}, 100},
	}
	for _, tt := range tests {
		step := &policy.Step{Spec: v1alpha1.Step{Name: "s", Retry: tt.retry}}
		if got := retryLimit(step); got != tt.want {
			t.Errorf("%s: retryLimit = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// Outputs near the per-step limit in every step are kept while the run stays writable; the step
// whose outputs would take the run past MaxRunBytes fails, saying so, and keeps none.
func TestOutputsBoundedByRunSize(t *testing.T) {
	near := map[string]apiextensionsv1.JSON{"k": jsonString(MaxOutputBytes - 1)}
	var ps []*policy.Step
	for _, name := range []string{"a", "b", "c", "d"} {
		ps = append(ps, step(name, script(steps.Result{Outcome: steps.Succeeded, Message: "ok", Outputs: near})))
	}
	run, pipe := runOf("", 0, ps...)
	// A snapshot that leaves room for two steps' outputs.
	run.Spec.Object.Raw = []byte(`{"data":"` + strings.Repeat("x", MaxRunBytes-2*MaxOutputBytes-4096) + `"}`)
	Advance(context.Background(), run, at(pipe, 0))
	expect(t, "phases", phases(run), "Failed a=Succeeded b=Succeeded c=Failed d=Skipped")
	c := run.Status.Step("c")
	if !strings.HasPrefix(c.Message, "outputs would make the run ") ||
		!strings.Contains(c.Message, fmt.Sprintf("over the limit of %d for a run", MaxRunBytes)) {
		t.Errorf("message %q", c.Message)
	}
	if c.Outputs != nil {
		t.Errorf("outputs over the run's limit kept: %d keys", len(c.Outputs))
	}
	b, err := json.Marshal(run)
	if err != nil || len(b) > MaxRunBytes {
		t.Errorf("run is %d bytes of JSON (%v), want at most %d", len(b), err, MaxRunBytes)
	}
}
