package expr

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

func TestTemplateRender(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		name    string
		src     string
		want    string
		literal bool
	}{
		{"empty", "", "", true},
		{"plain text", "just text", "just text", true},
		{"lone dollar and braces", "$ {a} $x }", "$ {a} $x }", true},
		{"escape", "$${object.metadata.name}", "${object.metadata.name}", true},
		{"escape alone", "$${", "${", true},
		{"escape in text", "a $${b} c", "a ${b} c", true},
		{"escape then interpolation", "$${x}-${object.metadata.name}", "${x}-db", false},
		{"only interpolation", "${object.metadata.name}", "db", false},
		{"spaces inside", "${ object.metadata.name }", "db", false},
		{"interpolation in text", "app-${object.metadata.name}-x", "app-db-x", false},
		{"two segments", "${object.metadata.name}.${object.metadata.namespace}", "db.prod", false},
		{"three segments with text", "a${1}b${'x'}c${true}", "a1bxctrue", false},
		{"label lookup", "${object.metadata.labels['app.kubernetes.io/name']}", "pg", false},
		{"nested braces", "${ {'a': 1}['a'] }", "1", false},
		{"nested maps", "${ {'a': {'b': 'deep'}}['a']['b'] }", "deep", false},
		{"close brace in single quotes", "${ '}' + \"x\" }", "}x", false},
		{"open brace in double quotes", "${ \"{\" + '{' }!", "{{!", false},
		{"escaped quote in string", `${ "a\"}" }`, `a"}`, false},
		{"escaped single quote", `${ 'it\'s}' }`, `it's}`, false},
		{"triple-quoted string", "${ '''it's}''' }", "it's}", false},
		{"triple double-quoted string", `${ """say "}" ok""" }`, `say "}" ok`, false},
		{"interpolation syntax inside a string", "${ '${x}' }", "${x}", false},
		{"int", "${ 40 + 2 }", "42", false},
		{"negative int", "${ -3 }", "-3", false},
		{"uint", "${ 7u }", "7", false},
		{"double", "${ 2.5 }", "2.5", false},
		{"whole double", "${ 2.0 }", "2", false},
		{"JSON number", "${ object.spec.replicas }", "3", false},
		{"large double", "${ 1e21 }", "1000000000000000000000", false},
		{"bool true", "${ 1 < 2 }", "true", false},
		{"bool false", "${ false }", "false", false},
		{"string with JSON chars", `${ 'a"b' }`, `a"b`, false},
		{"step output", "n=${ steps.drain.outputs.count }", "n=2", false},
		{"run", "${run.name}/${run.attempt}", "db-x1/2", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := env.CompileTemplate(tt.src)
			if err != nil {
				t.Fatalf("CompileTemplate(%q): %v", tt.src, err)
			}
			if tp.String() != tt.src {
				t.Errorf("String() = %q, want %q", tp.String(), tt.src)
			}
			if got := tp.Literal(); got != tt.literal {
				t.Errorf("Literal() = %v, want %v", got, tt.literal)
			}
			got, err := tp.Render(context.Background(), testVars())
			if err != nil {
				t.Fatalf("Render(%q): %v", tt.src, err)
			}
			if got != tt.want {
				t.Errorf("Render(%q) = %q, want %q", tt.src, got, tt.want)
			}
		})
	}
}

// Lists and maps render as JSON. protojson may add whitespace, so the compact form is compared.
func TestTemplateRenderJSON(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		src  string
		want string
	}{
		{"${ [1, 'a', true, null] }", `[1,"a",true,null]`},
		{"${ {'k': 'v', 'a': [1.5]} }", `{"a":[1.5],"k":"v"}`},
		{"${ object.metadata.labels }", `{"app.kubernetes.io/name":"pg","tier":"prod"}`},
		{"${ object.spec.ports.map(p, p.name) }", `["pg","metrics"]`},
		{"${ [] }", `[]`},
		{"${ {} }", `{}`},
	}
	for _, tt := range tests {
		tp, err := env.CompileTemplate(tt.src)
		if err != nil {
			t.Errorf("CompileTemplate(%q): %v", tt.src, err)
			continue
		}
		got, err := tp.Render(context.Background(), testVars())
		if err != nil {
			t.Errorf("Render(%q): %v", tt.src, err)
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(got)); err != nil {
			t.Errorf("Render(%q) = %q: not JSON: %v", tt.src, got, err)
			continue
		}
		if buf.String() != tt.want {
			t.Errorf("Render(%q) = %s, want %s", tt.src, buf.String(), tt.want)
		}
	}
}

// The text a list or map renders to should not depend on the build of the operator. protojson
// deliberately randomizes its whitespace per binary ("[1, \"a\"]" in one build, "[1,\"a\"]" in
// another), so the same template renders differently from one release to the next.
func TestTemplateRenderJSONStable(t *testing.T) {
	env := newEnv(t)
	tp, err := env.CompileTemplate("${ [1, 'a', {'k': [true, 1.5]}] }")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tp.Render(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[1,"a",{"k":[true,1.5]}]`; got != want {
		t.Errorf("Render = %q, want %q", got, want)
	}
}

// A raw string (r'...') does not process escapes, so r'C:\' is a complete, valid CEL string. The
// brace scanner treats the backslash as an escape and reports the string as unterminated.
func TestTemplateRawString(t *testing.T) {
	env := newEnv(t)
	tp, err := env.CompileTemplate(`${ r'C:\' }`)
	if err != nil {
		t.Fatalf("CompileTemplate: %v", err)
	}
	got, err := tp.Render(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `C:\`; got != want {
		t.Errorf("Render = %q, want %q", got, want)
	}
}

func TestTemplateCompileErrors(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		name    string
		src     string
		wantErr string
	}{
		{"unterminated", "a${1", `at offset 1: unterminated ${ in "a${1"`},
		{"unterminated at end", "name-${", `at offset 5: unterminated ${ in "name-${"`},
		{"unterminated after a good one", "${1}-${2", `at offset 5: unterminated ${ in "${1}-${2"`},
		{"unclosed nested brace", "${ {'a': 1}['a'] ", `at offset 0: unterminated ${ in "${ {'a': 1}['a'] "`},
		{"unterminated single-quoted string", "${ 'abc }", `at offset 0: unterminated string literal in "${ 'abc }"`},
		{"unterminated double-quoted string", `x${ "abc }`, `at offset 1: unterminated string literal in "x${ \"abc }"`},
		{"unterminated triple-quoted string", "${ '''abc' }", `at offset 0: unterminated string literal in "${ '''abc' }"`},
		{"trailing backslash in string", `${ 'abc\`, `at offset 0: unterminated string literal in "${ 'abc\\"`},
		{"empty expression", "a${}b", "in ${}: expression is empty"},
		{"blank expression", "${  }", "in ${  }: expression is empty"},
		{"undeclared variable", "${ nope }",
			"in ${ nope }: ERROR: <input>:1:2: undeclared reference to 'nope' (in container '')\n |  nope \n | .^"},
		{"syntax error", "x-${1 +}",
			"in ${1 +}: ERROR: <input>:1:4: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | 1 +\n | ...^"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := env.CompileTemplate(tt.src)
			if err == nil {
				t.Fatalf("CompileTemplate(%q): no error, want %q", tt.src, tt.wantErr)
			}
			if tp != nil {
				t.Errorf("CompileTemplate(%q) returned a template with an error", tt.src)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("CompileTemplate(%q) error\n%q\nwant\n%q", tt.src, err.Error(), tt.wantErr)
			}
		})
	}
}

func TestTemplateRenderErrors(t *testing.T) {
	env := newEnv(t)
	tests := []struct {
		name    string
		src     string
		wantErr string
	}{
		{"null", "x-${ null }", "${ null }: value is null"},
		{"null field", "${ object.?metadata.?annotations.orValue(null) }", "${ object.?metadata.?annotations.orValue(null) }: value is null"},
		{"missing key", "${ object.nope }", `evaluating " object.nope ": no such key: nope`},
		{"missing key in second segment", "${object.metadata.name}-${object.metadata.labels.owner}",
			`evaluating "object.metadata.labels.owner": no such key: owner`},
		{"map with int keys", "${ {1: 2} }",
			"${ {1: 2} }: value of type map cannot be represented as JSON: unsupported type conversion from 'int' to string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, err := env.CompileTemplate(tt.src)
			if err != nil {
				t.Fatalf("CompileTemplate(%q): %v", tt.src, err)
			}
			got, err := tp.Render(context.Background(), testVars())
			if err == nil {
				t.Fatalf("Render(%q) = %q, want error %q", tt.src, got, tt.wantErr)
			}
			if got != "" {
				t.Errorf("Render(%q) returned %q with an error", tt.src, got)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("Render(%q) error\n%q\nwant\n%q", tt.src, err.Error(), tt.wantErr)
			}
		})
	}
}
