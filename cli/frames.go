package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"
)

// ANSI control sequences that redraw a frame in place: move the cursor up n lines to the first
// column, and clear from there to the end of the screen. Every terminal kubectl runs in knows
// them (VT100); watch(1) and kubectl's own interactive output use the same.
const (
	ansiCursorUp  = "\x1b[%dA\r"
	ansiClearDown = "\x1b[J"
)

// frames shows the successive frames of status --watch. On a terminal each frame replaces the
// previous one in place, as watch(1) does; elsewhere (a pipe, a file, a CI log) each frame that
// changed is printed after the previous one, after a separator.
type frames struct {
	w io.Writer
	// size is the terminal's size in columns and rows; nil when not redrawing in place.
	size func() (columns, rows int)
	// separator goes between frames that are not redrawn in place.
	separator string
	last      string
	// drawn is how many terminal rows the frame on screen takes.
	drawn int
}

// newFrames shows frames on w: in place when w is a terminal and the output is text; else
// separated by "---" (text, and YAML, where it makes a stream of documents) or by nothing
// (JSON: a stream of values, as kubectl get -w -o json prints).
func newFrames(w io.Writer, output string) *frames {
	f := &frames{w: w, separator: "---\n"}
	if output == "json" {
		f.separator = ""
	}
	if file, ok := w.(*os.File); ok && (output == "" || output == "wide") && isTerminal(file) {
		f.size = func() (int, int) {
			c, r, err := term.GetSize(int(file.Fd()))
			if err != nil {
				return 0, 0
			}
			return c, r
		}
	}
	return f
}

// show prints frame unless it is the one shown last.
func (f *frames) show(frame string) {
	if frame == f.last {
		return
	}
	if !strings.HasSuffix(frame, "\n") {
		frame += "\n"
	}
	switch {
	case f.last == "":
	case f.size != nil:
		if f.drawn > 0 {
			fmt.Fprintf(f.w, ansiCursorUp, f.drawn)
		}
		fmt.Fprint(f.w, ansiClearDown)
	default:
		fmt.Fprint(f.w, f.separator)
	}
	f.last = frame
	if f.size == nil {
		fmt.Fprint(f.w, frame)
		return
	}
	cols, rows := f.size()
	shown, drawn := fitScreen(frame, cols, rows)
	fmt.Fprint(f.w, shown)
	f.drawn = drawn
}

// fitScreen cuts text to what a terminal of cols by rows shows without scrolling (one row is
// kept for the cursor), and says how many rows it takes: a line wider than the terminal wraps
// onto more. The cursor can only be moved back up over rows still on screen, so a frame taller
// than the screen could not be redrawn in place. Zero cols or rows mean the size is unknown.
func fitScreen(text string, cols, rows int) (string, int) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	total := 0
	for _, line := range lines {
		total += rowsOf(line, cols)
	}
	if rows <= 0 || total <= rows-1 {
		return text, total
	}
	var b strings.Builder
	drawn := 0
	for i, line := range lines {
		more := fmt.Sprintf("... %d more lines (a taller terminal shows them, or --watch piped to a file)", len(lines)-i)
		if n := rowsOf(line, cols); drawn+n+rowsOf(more, cols) > rows-1 {
			b.WriteString(more + "\n")
			return b.String(), drawn + rowsOf(more, cols)
		}
		b.WriteString(line + "\n")
		drawn += rowsOf(line, cols)
	}
	return b.String(), drawn
}

// rowsOf is how many terminal rows of cols columns a line takes (one, when cols is unknown).
func rowsOf(line string, cols int) int {
	w := utf8.RuneCountInString(line)
	if cols <= 0 || w <= cols {
		return 1
	}
	return (w + cols - 1) / cols
}
