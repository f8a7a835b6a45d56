package manifest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// utiljsonMarshal encodes what yaml.v3 decoded; it refuses keys that are not strings, which a
// Kubernetes object cannot have.
func utiljsonMarshal(v any) ([]byte, error) {
	if err := checkKeys(v, ""); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func checkKeys(v any, path string) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if err := checkKeys(e, path+"."+k); err != nil {
				return err
			}
		}
	case map[any]any:
		for k := range x {
			return fmt.Errorf("%s: key %v is not a string", strings.TrimPrefix(path, "."), k)
		}
	case []any:
		for i, e := range x {
			if err := checkKeys(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// LineOf returns the line of the field at path (in field.Path form: spec.steps[1].http.url,
// metadata.labels[app]), or of its nearest ancestor present in the document: a missing field is
// reported where it belongs.
func (d *Document) LineOf(path string) int {
	n := d.node
	line := d.Line
	for _, seg := range segments(path) {
		next := child(n, seg)
		if next == nil {
			break
		}
		n, line = next, next.Line
	}
	return line
}

// segments splits a field path into keys and indexes.
func segments(path string) []string {
	var out []string
	for _, part := range strings.Split(path, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				out = append(out, part)
				break
			}
			if i > 0 {
				out = append(out, part[:i])
			}
			j := strings.IndexByte(part[i:], ']')
			if j < 0 {
				out = append(out, part[i+1:])
				break
			}
			out = append(out, part[i+1:i+j])
			part = part[i+j+1:]
		}
	}
	return out
}

// child returns the node under n for a key (mappings) or an index (sequences), or nil.
func child(n *yaml.Node, seg string) *yaml.Node {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				// The key's line: a block value starts on the next line.
				if v := n.Content[i+1]; v.Kind == yaml.ScalarNode {
					return v
				}
				return withLine(n.Content[i+1], n.Content[i].Line)
			}
		}
	case yaml.SequenceNode:
		if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(n.Content) {
			return n.Content[i]
		}
	}
	return nil
}

// withLine is n reported at line: a copy, so the document is not changed.
func withLine(n *yaml.Node, line int) *yaml.Node {
	c := *n
	c.Line = line
	return &c
}
