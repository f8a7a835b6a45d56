package lint

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/teardown-dev/teardown-operator/cli/manifest"
	"github.com/teardown-dev/teardown-operator/engine/policy"
)

// FuzzLint reads arbitrary bytes as kubectl teardown lint reads a file (multi-document YAML or
// JSON, Lists expanded) and lints what it reads: the CRD schema and its rules, the operator's
// compiler, the risks. Nothing may panic, and every problem is reported with a field, a severity
// and a message.
func FuzzLint(f *testing.F) {
	// The inputs of TestCorpus, and the samples.
	files, err := filepath.Glob("testdata/corpus/*/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	samples, err := filepath.Glob("../../samples/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range append(files, samples...) {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- apiVersion: teardown.dev/v1alpha1\n  kind: TeardownPolicy\n  metadata: {name: a}\n"))
	f.Add([]byte(`{"apiVersion": "teardown.dev/v1alpha1", "kind": "ClusterTeardownPolicy", "metadata": {"name": "a"}, "spec": {}}`))
	l, err := New(Options{Namespace: "team"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := manifest.Parse("fuzz.yaml", data)
		if err != nil {
			return // a usage error, reported as such
		}
		l.seen = map[policy.Key]string{} // each input is a run of its own
		res := l.Lint(context.Background(), docs)
		if res.Documents != len(docs) || res.Errors+res.Warnings != len(res.Problems) {
			t.Errorf("%d documents, %d errors and %d warnings; %d problems in %d documents",
				res.Documents, res.Errors, res.Warnings, len(res.Problems), len(docs))
		}
		for _, p := range res.Problems {
			if p.Field == "" || p.Message == "" || (p.Severity != Error && p.Severity != Warning) {
				t.Errorf("problem without a field, message or severity: %+v", p)
			}
			_ = p.String()
		}
	})
}
