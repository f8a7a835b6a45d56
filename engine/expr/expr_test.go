package expr

import (
	"context"
	"fmt"
	"testing"
)

func TestProbe(t *testing.T) {
	env, _ := NewEnv()
	for _, s := range []string{"object.metadata.name == 'x'", "{'b': 1, 'a': [true, null, 'x'], 'c': {'z': 1, 'y': 2}}", "9007199254740993", "object", "pods == 1", "size(pods)", "lists.range(1000).map(a, lists.range(1000).map(b, a + b)).size() > 0", "object.?metadata.?annotations.orValue({}).size() == 0"} {
		p, err := env.CompileValue(s)
		if err != nil {
			fmt.Println("compile", s, err)
			continue
		}
		b, err := p.EvalJSON(context.Background(), nil)
		fmt.Printf("json %q: %s %v\n", s, b, err)
		b, err = p.EvalJSON(context.Background(), Vars{"object": map[string]any{"metadata": map[string]any{}}})
		fmt.Printf("json %q: %s %v\n", s, b, err)
	}
	e2, _ := env.Extend([]string{"pods"}, nil)
	_, err := e2.CompileCondition("pods == 1")
	fmt.Println(err)
}
