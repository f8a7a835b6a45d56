package expr

import (
	"context"
	"fmt"
	"strings"
)

// Template is a string with ${...} CEL interpolations, compiled. "$${" writes a literal "${".
type Template struct {
	src   string
	parts []part
}

type part struct {
	text string
	prog *Program // nil for literal text
}

// String returns the template's source.
func (t *Template) String() string { return t.src }

// Literal reports whether the template holds no expression.
func (t *Template) Literal() bool {
	for _, p := range t.parts {
		if p.prog != nil {
			return false
		}
	}
	return true
}

// Whole returns the expression of a template that is one ${...} and nothing else, or nil.
func (t *Template) Whole() *Program {
	if len(t.parts) == 1 && t.parts[0].prog != nil {
		return t.parts[0].prog
	}
	return nil
}

// CompileTemplate parses and compiles every ${...} in src.
func (e *Env) CompileTemplate(src string) (*Template, error) {
	t := &Template{src: src}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, part{text: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(src); {
		switch {
		case strings.HasPrefix(src[i:], "$${"):
			lit.WriteString("${")
			i += 3
		case strings.HasPrefix(src[i:], "${"):
			end, err := closingBrace(src, i+2)
			if err != nil {
				return nil, fmt.Errorf("at offset %d: %w", i, err)
			}
			prog, err := e.CompileValue(src[i+2 : end])
			if err != nil {
				return nil, fmt.Errorf("in ${%s}: %w", src[i+2:end], err)
			}
			flush()
			t.parts = append(t.parts, part{prog: prog})
			i = end + 1
		default:
			lit.WriteByte(src[i])
			i++
		}
	}
	flush()
	return t, nil
}

// closingBrace finds the "}" that closes an interpolation whose expression starts at start,
// skipping braces inside nested map literals and string literals.
func closingBrace(src string, start int) (int, error) {
	depth := 0
	for i := start; i < len(src); i++ {
		switch c := src[i]; c {
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return i, nil
			}
			depth--
		case '"', '\'':
			j, err := endOfString(src, i)
			if err != nil {
				return 0, err
			}
			i = j
		}
	}
	return 0, fmt.Errorf("unterminated ${ in %q", src)
}

// endOfString returns the index of the quote that ends the string literal opening at i. In a raw
// string (r'...', also rb'...' and br'...') a backslash is an ordinary character.
func endOfString(src string, i int) (int, error) {
	q := src[i]
	raw := i > 0 && (src[i-1] == 'r' || src[i-1] == 'R') || i > 1 && (src[i-2] == 'r' || src[i-2] == 'R') && (src[i-1] == 'b' || src[i-1] == 'B')
	triple := strings.HasPrefix(src[i:], strings.Repeat(string(q), 3))
	if triple {
		if end := strings.Index(src[i+3:], strings.Repeat(string(q), 3)); end >= 0 {
			return i + 3 + end + 2, nil
		}
		return 0, fmt.Errorf("unterminated string literal in %q", src)
	}
	for j := i + 1; j < len(src); j++ {
		switch {
		case src[j] == '\\' && !raw:
			j++
		case src[j] == q:
			return j, nil
		}
	}
	return 0, fmt.Errorf("unterminated string literal in %q", src)
}

// Render evaluates every interpolation and joins the parts into a string.
func (t *Template) Render(ctx context.Context, vars Vars) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.prog == nil {
			b.WriteString(p.text)
			continue
		}
		v, err := p.prog.Eval(ctx, vars)
		if err != nil {
			return "", err
		}
		s, err := toText(v)
		if err != nil {
			return "", fmt.Errorf("${%s}: %w", p.prog.src, err)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// LiteralPrefix returns the text before the first interpolation, with "$${" already read as
// "${": the part of every rendering known at compile time (all of it for a Literal template).
func (t *Template) LiteralPrefix() string {
	if len(t.parts) == 0 || t.parts[0].prog != nil {
		return ""
	}
	return t.parts[0].text
}
