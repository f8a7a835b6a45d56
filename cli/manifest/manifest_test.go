package manifest_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/teardown-dev/teardown-operator/cli/manifest"
)

// docPos is what a test expects of one parsed document.
type docPos struct {
	Index int
	Line  int
	Kind  string
}

func positions(docs []*manifest.Document) []docPos {
	out := make([]docPos, 0, len(docs))
	for _, d := range docs {
		out = append(out, docPos{Index: d.Index, Line: d.Line, Kind: d.Object.GetKind()})
	}
	return out
}

func TestParseDocuments(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []docPos
	}{
		{
			name: "empty input",
			in:   "",
			want: []docPos{},
		},
		{
			name: "only a document marker",
			in:   "---\n",
			want: []docPos{},
		},
		{
			name: "single document",
			in:   "apiVersion: v1\nkind: ConfigMap\n",
			want: []docPos{{1, 1, "ConfigMap"}},
		},
		{
			name: "two documents",
			in:   "apiVersion: v1\nkind: A\n---\napiVersion: v1\nkind: B\n",
			want: []docPos{{1, 1, "A"}, {2, 4, "B"}},
		},
		{
			// The first line of a document is its content's first line, after the marker.
			name: "explicit start marker",
			in:   "---\napiVersion: v1\nkind: A\n",
			want: []docPos{{1, 2, "A"}},
		},
		{
			name: "leading empty documents are counted",
			in:   "---\n---\napiVersion: v1\nkind: A\n",
			want: []docPos{{2, 3, "A"}},
		},
		{
			name: "empty document in the middle is counted",
			in:   "apiVersion: v1\nkind: A\n---\n---\napiVersion: v1\nkind: B\n",
			want: []docPos{{1, 1, "A"}, {3, 5, "B"}},
		},
		{
			name: "comment-only and null documents are counted",
			in:   "apiVersion: v1\nkind: A\n---\n# nothing here\n---\nnull\n---\napiVersion: v1\nkind: B\n",
			want: []docPos{{1, 1, "A"}, {4, 8, "B"}},
		},
		{
			name: "trailing marker",
			in:   "apiVersion: v1\nkind: A\n---\n",
			want: []docPos{{1, 1, "A"}},
		},
		{
			name: "JSON document",
			in:   `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":"b"}}`,
			want: []docPos{{1, 1, "ConfigMap"}},
		},
		{
			name: "indented JSON document",
			in:   "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Secret\"\n}\n",
			want: []docPos{{1, 1, "Secret"}},
		},
		{
			name: "JSON and YAML documents in one stream",
			in:   "{\"apiVersion\": \"v1\", \"kind\": \"A\"}\n---\napiVersion: v1\nkind: B\n",
			want: []docPos{{1, 1, "A"}, {2, 3, "B"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := manifest.Parse("in.yaml", []byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: unexpected error: %v", err)
			}
			if got := positions(docs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("documents:\n got  %+v\n want %+v", got, tt.want)
			}
			for _, d := range docs {
				if d.Source != "in.yaml" {
					t.Errorf("document %d: Source = %q, want %q", d.Index, d.Source, "in.yaml")
				}
			}
		})
	}
}

func TestParseValueTypes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want maps a field of spec to its expected decoded value (with its Go type).
		want map[string]any
	}{
		{
			name: "YAML",
			in: `apiVersion: apps/v1
kind: Deployment
spec:
  replicas: 3
  big: 1099511627776
  negative: -2
  ratio: 1.5
  enabled: true
  mode: 0644
  quoted: "3"
  date: 2024-01-01
  nothing: null
  list: [1, "two", 2.5]
  nested:
    port: 8080
`,
			want: map[string]any{
				"replicas": int64(3),
				"big":      int64(1 << 40),
				"negative": int64(-2),
				"ratio":    1.5,
				"enabled":  true,
				"mode":     int64(0o644), // as Kubernetes reads defaultMode: 0644
				"quoted":   "3",
				"date":     "2024-01-01",
				"nothing":  nil,
				"list":     []any{int64(1), "two", 2.5},
				"nested":   map[string]any{"port": int64(8080)},
			},
		},
		{
			name: "JSON",
			in:   `{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replicas":3,"ratio":1.5,"list":[1,"two"],"nested":{"port":8080},"nothing":null}}`,
			want: map[string]any{
				"replicas": int64(3),
				"ratio":    1.5,
				"list":     []any{int64(1), "two"},
				"nested":   map[string]any{"port": int64(8080)},
				"nothing":  nil,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := manifest.Parse("in.yaml", []byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: unexpected error: %v", err)
			}
			if len(docs) != 1 {
				t.Fatalf("got %d documents, want 1", len(docs))
			}
			spec, ok := docs[0].Object.Object["spec"].(map[string]any)
			if !ok {
				t.Fatalf("spec is %T, want map[string]any", docs[0].Object.Object["spec"])
			}
			for field, want := range tt.want {
				got, present := spec[field]
				if !present {
					t.Errorf("spec.%s: missing", field)
					continue
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("spec.%s = %#v (%T), want %#v (%T)", field, got, got, want, want)
				}
			}
			if got := docs[0].Object.GetAPIVersion(); got != "apps/v1" {
				t.Errorf("apiVersion = %q, want apps/v1", got)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want are substrings of the error message.
		want []string
	}{
		{
			name: "not YAML in the second document",
			in:   "apiVersion: v1\nkind: A\n---\napiVersion: v1\nkind: [unclosed\n",
			want: []string{"in.yaml: ", "document 2", "not YAML"},
		},
		{
			name: "tab indentation in the first document",
			in:   "apiVersion: v1\nmetadata:\n\tname: x\n",
			want: []string{"in.yaml: ", "document 1", "not YAML"},
		},
		{
			name: "not YAML after an empty document",
			in:   "---\n---\nkey: \"unterminated\n",
			want: []string{"in.yaml: ", "document 2", "not YAML"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Decoded mappings are Go maps, iterated in random order: parse repeatedly so that a
			// message depending on that order shows.
			for range 30 {
				docs, err := manifest.Parse("in.yaml", []byte(tt.in))
				if err == nil {
					t.Fatalf("Parse: no error, got %d documents", len(docs))
				}
				var re *manifest.ReadError
				if !errors.As(err, &re) {
					t.Fatalf("error %v is %T, want *manifest.ReadError", err, err)
				}
				if re.Source != "in.yaml" {
					t.Fatalf("ReadError.Source = %q, want in.yaml", re.Source)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("error %q does not contain %q", err, w)
					}
				}
				if docs != nil {
					t.Fatalf("documents returned with the error: %d", len(docs))
				}
			}
		})
	}
}

// policyStream has a first document, so that lines are the stream's, not the document's.
const policyStream = `apiVersion: v1
kind: ConfigMap
metadata:
  name: first
---
apiVersion: teardown.dev/v1alpha1
kind: TeardownPolicy
metadata:
  name: db
  labels:
    app: shop
    app.kubernetes.io/name: shop
spec:
  steps:
    - name: drain
      http:
        url: https://a.example/drain
    - name: notify
      http:
        method: POST
        url: https://b.example/hook
  target: {kind: ManagedDatabase}
`

func TestLineOf(t *testing.T) {
	docs, err := manifest.Parse("policy.yaml", []byte(policyStream))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(docs) != 2 {
		t.Fatalf("got %d documents, want 2", len(docs))
	}
	d := docs[1]
	if d.Line != 6 {
		t.Fatalf("policy document Line = %d, want 6", d.Line)
	}
	tests := []struct {
		path string
		want int
	}{
		{"", 6},
		{"kind", 7},
		{"metadata", 8},
		{"metadata.name", 9},
		{"metadata.labels", 10},
		{"metadata.labels[app]", 11},
		{"metadata.labels[app.kubernetes.io/name]", 12}, // field.Path renders dotted keys like this
		{"metadata.labels[missing]", 10},
		{"spec", 13},
		{"spec.steps", 14},
		{"spec.steps[0]", 15},
		{"spec.steps[0].name", 15},
		{"spec.steps[0].http", 16},
		{"spec.steps[0].http.url", 17},
		{"spec.steps[1]", 18},
		{"spec.steps[1].http", 19},
		{"spec.steps[1].http.method", 20},
		{"spec.steps[1].http.url", 21},
		{"spec.target", 22},
		{"spec.target.kind", 22},
		// Missing fields: the nearest present ancestor.
		{"spec.steps[1].timeout", 18},
		{"spec.steps[1].http.headers[X-Token]", 19},
		{"spec.missing.steps[0]", 13},
		{"metadata.name.sub", 9},
		{"status", 6},
		// Past the end of the list, or not an index.
		{"spec.steps[2]", 14},
		{"spec.steps[2].http.url", 14},
		{"spec.steps[-1]", 14},
		{"spec.steps[x]", 14},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := d.LineOf(tt.path); got != tt.want {
				t.Errorf("LineOf(%q) = %d, want %d", tt.path, got, tt.want)
			}
			// Asking does not move the document's nodes.
			if got := d.LineOf(tt.path); got != tt.want {
				t.Errorf("second LineOf(%q) = %d, want %d", tt.path, got, tt.want)
			}
		})
	}
	if got := docs[0].LineOf("metadata.name"); got != 4 {
		t.Errorf("first document: LineOf(metadata.name) = %d, want 4", got)
	}
}

func TestWhere(t *testing.T) {
	docs, err := manifest.Parse("policy.yaml", []byte(policyStream))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	d := docs[1]
	if got, want := d.Where(0), "policy.yaml:6 (document 2)"; got != want {
		t.Errorf("Where(0) = %q, want %q", got, want)
	}
	if got, want := d.Where(d.LineOf("spec.steps[1].http.url")), "policy.yaml:21 (document 2)"; got != want {
		t.Errorf("Where(url) = %q, want %q", got, want)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func obj(kind string) string { return "apiVersion: v1\nkind: " + kind + "\n" }

// source is where a read document came from, and what it is.
type source struct {
	Source string
	Index  int
	Kind   string
}

func sources(docs []*manifest.Document) []source {
	out := make([]source, 0, len(docs))
	for _, d := range docs {
		out = append(out, source{Source: d.Source, Index: d.Index, Kind: d.Object.GetKind()})
	}
	return out
}

func TestRead(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "repo")
	// Written out of order: the walk sorts.
	writeFile(t, filepath.Join(dir, "z.json"), `{"apiVersion":"v1","kind":"Z"}`)
	writeFile(t, filepath.Join(dir, "sub", "c.yml"), obj("C1")+"---\n"+obj("C2"))
	writeFile(t, filepath.Join(dir, "b.yaml"), obj("B"))
	writeFile(t, filepath.Join(dir, "a.yml"), obj("A"))
	writeFile(t, filepath.Join(dir, "notes.txt"), obj("Text"))
	writeFile(t, filepath.Join(dir, "README.md"), "# not a manifest\n")
	writeFile(t, filepath.Join(dir, ".git", "config.yaml"), obj("Git"))
	writeFile(t, filepath.Join(dir, "sub", ".hidden", "h.yaml"), obj("Hidden"))
	dotRoot := filepath.Join(root, ".manifests")
	writeFile(t, filepath.Join(dotRoot, "m.yaml"), obj("M"))
	single := filepath.Join(root, "single.txt")
	writeFile(t, single, obj("Single"))

	tests := []struct {
		name  string
		paths []string
		stdin string
		want  []source
	}{
		{
			name:  "directory walked in lexical order, dot-directories skipped",
			paths: []string{dir},
			want: []source{
				{filepath.Join(dir, "a.yml"), 1, "A"},
				{filepath.Join(dir, "b.yaml"), 1, "B"},
				{filepath.Join(dir, "sub", "c.yml"), 1, "C1"},
				{filepath.Join(dir, "sub", "c.yml"), 2, "C2"},
				{filepath.Join(dir, "z.json"), 1, "Z"},
			},
		},
		{
			name:  "a dot-directory named as the root is walked",
			paths: []string{dotRoot},
			want:  []source{{filepath.Join(dotRoot, "m.yaml"), 1, "M"}},
		},
		{
			name:  "a named file is read whatever its extension",
			paths: []string{single},
			want:  []source{{single, 1, "Single"}},
		},
		{
			name:  "stdin",
			paths: []string{"-"},
			stdin: obj("In1") + "---\n---\n" + obj("In2"),
			want:  []source{{"-", 1, "In1"}, {"-", 3, "In2"}},
		},
		{
			name:  "paths in argument order",
			paths: []string{filepath.Join(dir, "z.json"), "-", filepath.Join(dir, "a.yml")},
			stdin: obj("In"),
			want: []source{
				{filepath.Join(dir, "z.json"), 1, "Z"},
				{"-", 1, "In"},
				{filepath.Join(dir, "a.yml"), 1, "A"},
			},
		},
		{
			name:  "empty stdin",
			paths: []string{"-"},
			stdin: "",
			want:  []source{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := manifest.Read(tt.paths, strings.NewReader(tt.stdin))
			if err != nil {
				t.Fatalf("Read: unexpected error: %v", err)
			}
			if got := sources(docs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("documents:\n got  %+v\n want %+v", got, tt.want)
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	root := t.TempDir()
	missing := filepath.Join(root, "missing.yaml")
	bad := filepath.Join(root, "dir", "bad.yaml")
	writeFile(t, filepath.Join(root, "dir", "a.yaml"), obj("A"))
	writeFile(t, bad, obj("B")+"---\nkind: [\n")

	tests := []struct {
		name       string
		paths      []string
		stdin      string
		wantSource string
		wantMsg    string
		notExist   bool
	}{
		{
			name:       "missing file",
			paths:      []string{missing},
			wantSource: missing,
			wantMsg:    missing + ": no such file or directory",
			notExist:   true,
		},
		{
			name:       "missing file after a good one",
			paths:      []string{filepath.Join(root, "dir", "a.yaml"), missing},
			wantSource: missing,
			wantMsg:    missing + ": no such file or directory",
			notExist:   true,
		},
		{
			name:       "bad document in a walked directory",
			paths:      []string{filepath.Join(root, "dir")},
			wantSource: bad,
			wantMsg:    bad + ": document 2 is not YAML",
		},
		{
			name:       "bad document on stdin",
			paths:      []string{"-"},
			stdin:      "a: [\n",
			wantSource: "-",
			wantMsg:    "-: document 1 is not YAML",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := manifest.Read(tt.paths, strings.NewReader(tt.stdin))
			if err == nil {
				t.Fatalf("Read: no error, got %d documents", len(docs))
			}
			var re *manifest.ReadError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is %T, want *manifest.ReadError", err, err)
			}
			if re.Source != tt.wantSource {
				t.Errorf("ReadError.Source = %q, want %q", re.Source, tt.wantSource)
			}
			if !strings.HasPrefix(err.Error(), tt.wantMsg) {
				t.Errorf("error = %q, want it to start with %q", err, tt.wantMsg)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tt.notExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", got, tt.notExist)
			}
		})
	}
}

// TestParseKeysAsKubectl: keys that YAML reads as numbers or booleans become strings, as kubectl
// (sigs.k8s.io/yaml) makes them, and YAML 1.1 scalars read as kubectl reads them.
func TestParseKeysAsKubectl(t *testing.T) {
	docs, err := manifest.Parse("in.yaml", []byte("apiVersion: v1\nkind: A\ndata:\n  1: one\n  true: x\nspec:\n  enabled: yes\n"))
	if err != nil {
		t.Fatal(err)
	}
	obj := docs[0].Object.Object
	data := obj["data"].(map[string]any)
	if data["1"] != "one" || data["true"] != "x" {
		t.Errorf("data = %v, want keys \"1\" and \"true\"", data)
	}
	if spec := obj["spec"].(map[string]any); spec["enabled"] != true {
		t.Errorf("spec = %v, want enabled: true (YAML 1.1, as kubectl reads it)", spec)
	}
}

// TestParseSkipsAndExpands: documents that are not objects are skipped (kustomize's JSON 6902
// patches are lists), and a List's items are documents of their own, at their own lines.
func TestParseSkipsAndExpands(t *testing.T) {
	in := "just a string\n---\n- op: add\n  path: /x\n---\n42\n---\n" +
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n" +
		"- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n"
	docs, err := manifest.Parse("in.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 {
		t.Fatalf("got %d documents, want the List's 2 items", len(docs))
	}
	for i, want := range []struct {
		name       string
		item, line int
	}{{"a", 1, 11}, {"b", 2, 14}} {
		d := docs[i]
		if d.Object.GetName() != want.name || d.Index != 4 || d.Item != want.item || d.Line != want.line {
			t.Errorf("item %d: name %s index %d item %d line %d, want %+v", i, d.Object.GetName(), d.Index, d.Item, d.Line, want)
		}
	}
	if got := docs[1].LineOf("metadata.name"); got != 17 {
		t.Errorf("LineOf(metadata.name) of item 2 = %d, want 17", got)
	}
	if got := docs[1].Where(0); got != "in.yaml:14 (document 4, item 2)" {
		t.Errorf("Where = %q", got)
	}
}
