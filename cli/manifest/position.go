package manifest

import (
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

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

// segments splits a field path into keys and indexes: "spec.steps[1].http" gives spec, steps,
// 1, http; a bracketed key keeps its dots ("labels[app.kubernetes.io/name]").
func segments(path string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '.':
			flush()
		case '[':
			flush()
			end := strings.IndexByte(path[i:], ']')
			if end < 0 {
				end = len(path) - i
			}
			out = append(out, path[i+1:i+end])
			i += end
		default:
			cur.WriteByte(c)
		}
	}
	flush()
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
