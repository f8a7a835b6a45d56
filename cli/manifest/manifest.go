// Package manifest reads Kubernetes manifests as GitOps repositories hold them: files and
// directories of multi-document YAML (or JSON), or a stream such as kustomize's output, keeping
// for each document where it came from, so that a problem is reported at its file, document and
// line.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/teardown-dev/teardown-operator/api/v1alpha1"
)

// Stdin is the source name of the standard input.
const Stdin = "-"

// Document is one YAML document of a source.
type Document struct {
	// Source is the file the document came from, or "-" for the standard input.
	Source string
	// Index is the document's position in its source, from 1 (empty documents count).
	Index int
	// Item is the object's position in a List document, from 1; 0 when the document is no List.
	Item int
	// Line is the document's (or the List item's) first line in its source.
	Line int
	// Object is the document as Kubernetes decodes it (integers as int64).
	Object *unstructured.Unstructured
	node   *yaml.Node
}

// Where names the document for messages: file, document index and, when known, line.
func (d *Document) Where(line int) string {
	if line <= 0 {
		line = d.Line
	}
	if d.Item > 0 {
		return fmt.Sprintf("%s:%d (document %d, item %d)", d.Source, line, d.Index, d.Item)
	}
	return fmt.Sprintf("%s:%d (document %d)", d.Source, line, d.Index)
}

// ReadError is an input that cannot be read as YAML: a usage error, not a finding.
type ReadError struct {
	Source string
	Err    error
}

func (e *ReadError) Error() string { return e.Source + ": " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// Read reads every document of the given paths: files, directories (walked for *.yaml, *.yml
// and *.json, in lexical order) and "-" for stdin.
func Read(paths []string, stdin io.Reader) ([]*Document, error) {
	var docs []*Document
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			ds, err := readSource(f, stdin)
			if err != nil {
				return nil, err
			}
			docs = append(docs, ds...)
		}
	}
	return docs, nil
}

// expand lists the files a path names.
func expand(p string) ([]string, error) {
	if p == Stdin {
		return []string{p}, nil
	}
	info, err := os.Stat(p)
	if err != nil {
		return nil, &ReadError{Source: p, Err: unwrapPathError(err)}
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != p {
			return filepath.SkipDir
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil {
		return nil, &ReadError{Source: p, Err: unwrapPathError(err)}
	}
	sort.Strings(files)
	return files, nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readSource splits one source into its documents.
func readSource(name string, stdin io.Reader) ([]*Document, error) {
	var raw []byte
	var err error
	if name == Stdin {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, &ReadError{Source: name, Err: unwrapPathError(err)}
	}
	return Parse(name, raw)
}

// Parse splits raw into documents; name is its source for messages. Empty documents are
// skipped, but still counted in the index.
func Parse(name string, raw []byte) ([]*Document, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs []*Document
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, &ReadError{Source: name, Err: fmt.Errorf("document %d is not YAML: %s", i, strings.TrimPrefix(err.Error(), "yaml: "))}
		}
		// Documents that are not objects (empty ones; kustomize's JSON 6902 patches, which are
		// lists) are no Kubernetes objects: skipped, as kubectl apply -k uses them.
		if len(n.Content) == 0 || n.Content[0].Kind != yaml.MappingNode {
			continue
		}
		obj, err := toObject(n.Content[0])
		if err != nil {
			return nil, &ReadError{Source: name, Err: fmt.Errorf("document %d (line %d): %v", i, n.Content[0].Line, err)}
		}
		d := &Document{Source: name, Index: i, Line: n.Content[0].Line, Object: obj, node: n.Content[0]}
		docs = append(docs, d.items()...)
	}
}

// items returns a List's items as documents of their own (what kubectl get -o yaml prints: kind
// List, or TeardownPolicyList), or d itself.
func (d *Document) items() []*Document {
	if !d.Object.IsList() {
		return []*Document{d}
	}
	list, _ := d.Object.ToList()
	itemsNode := child(d.node, "items")
	out := make([]*Document, 0, len(list.Items))
	for i := range list.Items {
		item := &Document{Source: d.Source, Index: d.Index, Item: i + 1, Line: d.Line, Object: &list.Items[i], node: d.node}
		if itemsNode != nil && i < len(itemsNode.Content) {
			item.node, item.Line = itemsNode.Content[i], itemsNode.Content[i].Line
		}
		out = append(out, item)
	}
	return out
}

// toObject decodes a document as kubectl does: the YAML re-encoded and read by sigs.k8s.io/yaml
// (YAML 1.1 scalars, timestamps kept as written, keys made strings), then JSON with integers as
// int64.
func toObject(n *yaml.Node) (*unstructured.Unstructured, error) {
	raw, err := yaml.Marshal(n)
	if err != nil {
		return nil, err
	}
	j, err := sigsyaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := utiljson.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Scheme knows the built-in kinds and the operator's, for decoding documents into Go types.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()
