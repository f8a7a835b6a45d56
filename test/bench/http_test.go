package main

import (
	"math"
	"testing"
)

func TestHistogramQuantile(t *testing.T) {
	// 10 observations ≤0.01, 30 in (0.01, 0.03], 60 in (0.03, 0.09].
	h := histogram{bounds: []float64{0.01, 0.03, 0.09}, cum: []uint64{10, 40, 100}, count: 100}
	for _, c := range []struct{ q, want float64 }{
		{0.05, 0.005},        // half-way through the first bucket, from 0
		{0.10, 0.01},         // its upper bound
		{0.25, 0.02},         // half-way through the second
		{0.50, 0.03 + 0.01},  // 10 of the third bucket's 60
		{0.99, 0.03 + 0.059}, // 59 of 60
	} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile(%g) = %g, want %g", c.q, got, c.want)
		}
	}
	over := histogram{bounds: []float64{0.01}, cum: []uint64{0}, count: 3}
	if got := over.quantile(0.5); got != 0.01 {
		t.Errorf("a rank in the +Inf bucket gives %g, want the highest bound", got)
	}
	if got := (histogram{}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty histogram gives %g, want NaN", got)
	}
}
