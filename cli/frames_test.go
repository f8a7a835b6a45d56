package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestFramesInPlace: on a terminal a changed frame replaces the previous one (the cursor goes up
// over the rows it took, wrapped lines included, and the screen is cleared below); elsewhere
// frames follow each other after a separator; an unchanged frame is not printed again.
func TestFramesInPlace(t *testing.T) {
	tests := map[string]struct {
		terminal  bool
		separator string
		frames    []string
		want      string
	}{
		"not a terminal": {false, "---\n", []string{"a\nb\n", "a\nb\n", "c\n"}, "a\nb\n---\nc\n"},
		"JSON stream":    {false, "", []string{"{}\n", "{\"a\":1}\n"}, "{}\n{\"a\":1}\n"},
		"terminal: up two rows, clear, redraw": {true, "---\n", []string{"a\nb\n", "c\n"},
			"a\nb\n\x1b[2A\r\x1b[Jc\n"},
		"terminal: a line wider than the screen takes two rows": {true, "---\n", []string{strings.Repeat("x", 15) + "\n", "c\n", "d\n"},
			strings.Repeat("x", 15) + "\n\x1b[2A\r\x1b[Jc\n\x1b[1A\r\x1b[Jd\n"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			f := &frames{w: &b, separator: tt.separator}
			if tt.terminal {
				f.size = func() (int, int) { return 10, 24 }
			}
			for _, fr := range tt.frames {
				f.show(fr)
			}
			if b.String() != tt.want {
				t.Errorf("printed %q, want %q", b.String(), tt.want)
			}
		})
	}
}

// TestFitScreen: a frame taller than the terminal is cut to what the screen holds, saying how
// many lines are left out, so that it can still be redrawn in place.
func TestFitScreen(t *testing.T) {
	frame := "1\n2\n3\n4\n5\n6\n"
	tests := map[string]struct {
		cols, rows int
		want       string
		drawn      int
	}{
		"fits":         {80, 24, frame, 6},
		"size unknown": {0, 0, frame, 6},
		"just fits":    {80, 7, frame, 6},
		"cut":          {80, 5, "1\n2\n3\n... 3 more lines (a taller terminal shows them, or --watch piped to a file)\n", 4},
		"cut, narrow":  {40, 6, "1\n2\n3\n... 3 more lines (a taller terminal shows them, or --watch piped to a file)\n", 5},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, drawn := fitScreen(frame, tt.cols, tt.rows)
			if got != tt.want || drawn != tt.drawn {
				t.Errorf("fitScreen = %q, %d; want %q, %d", got, drawn, tt.want, tt.drawn)
			}
		})
	}
}
