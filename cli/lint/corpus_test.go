package lint_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/teardown-dev/teardown-operator/cli/lint"
	"github.com/teardown-dev/teardown-operator/cli/manifest"
)

// expectation is what a corpus file's header says lint must report.
type expectation struct {
	errors   []string // field paths
	warnings []string // "code path"
}

func readExpectation(t *testing.T, raw []byte) expectation {
	var e expectation
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if p, ok := strings.CutPrefix(line, "# want: "); ok {
			e.errors = append(e.errors, strings.TrimSpace(p))
		}
		if w, ok := strings.CutPrefix(line, "# want-warning: "); ok {
			e.warnings = append(e.warnings, strings.Join(strings.Fields(w), " "))
		}
	}
	return e
}

// TestCorpus lints every broken policy (each must report the field its header names, and no
// warning it does not name) and every valid one (nothing reported).
func TestCorpus(t *testing.T) {
	broken, _ := filepath.Glob("testdata/corpus/broken/*.yaml")
	valid, _ := filepath.Glob("testdata/corpus/valid/*.yaml")
	if len(broken) < 40 || len(valid) < 10 {
		t.Fatalf("corpus too small: %d broken, %d valid", len(broken), len(valid))
	}
	for _, f := range append(broken, valid...) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want := readExpectation(t, raw)
			isBroken := strings.Contains(f, "/broken/")
			if isBroken && len(want.errors)+len(want.warnings) == 0 {
				t.Fatalf("%s names no expected problem", f)
			}
			res := lintFile(t, f, raw)
			var gotErrs, gotWarns []string
			for _, p := range res.Problems {
				if p.Severity == lint.Error {
					gotErrs = append(gotErrs, p.Field)
				} else {
					gotWarns = append(gotWarns, p.Code+" "+p.Field)
				}
				if p.Line == 0 || p.Message == "" {
					t.Errorf("problem without a line or message: %+v", p)
				}
			}
			for _, w := range want.errors {
				if !slices.Contains(gotErrs, w) {
					t.Errorf("want an error at %s; got %v", w, res.Problems)
				}
			}
			if len(want.errors) == 0 && len(gotErrs) > 0 {
				t.Errorf("want no error; got %v", res.Problems)
			}
			slices.Sort(gotWarns)
			slices.Sort(want.warnings)
			if len(want.errors) == 0 && !slices.Equal(gotWarns, want.warnings) {
				t.Errorf("warnings %v, want %v", gotWarns, want.warnings)
			}
		})
	}
}

func lintFile(t *testing.T, name string, raw []byte) lint.Result {
	t.Helper()
	docs, err := manifest.Parse(name, raw)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lint.New(lint.Options{Namespace: "team"})
	if err != nil {
		t.Fatal(err)
	}
	return l.Lint(context.Background(), docs)
}
