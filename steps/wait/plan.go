package wait

import (
	"context"
	"fmt"
	"maps"

	"github.com/teardown-dev/teardown-operator/steps"
)

// Lookup is a lookup's result as a plan shows it.
type Lookup struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace,omitempty"`
	Selector  string   `json:"selector"`
	Found     []string `json:"found"`
}

// Verdict is a wait step's plan: its lookups and condition evaluated now.
type Verdict struct {
	Duration string   `json:"duration,omitempty"`
	Until    string   `json:"until,omitempty"`
	Holds    *bool    `json:"holdsNow,omitempty"`
	Lookups  []Lookup `json:"lookups,omitempty"`
}

// Plan implements steps.Planner: the lookups listed and the condition evaluated against the
// cluster as it is now. Listing is all it does.
func (a *action) Plan(ctx context.Context, in *steps.Input) steps.Plan {
	if a.until == nil {
		return steps.Plan{Summary: fmt.Sprintf("wait %s", a.duration), Rendered: Verdict{Duration: a.duration.String()}}
	}
	v := Verdict{Until: a.until.String()}
	vars := maps.Clone(in.Vars)
	for _, l := range a.lookups {
		items, wt, err := a.resolve(ctx, in, l)
		if err != nil {
			return steps.Plan{Summary: "wait until " + v.Until, Rendered: v, Err: fmt.Sprintf("lookup %s: %v", l.Name, err)}
		}
		sel, _ := l.Selector(ctx, in.Vars)
		pl := Lookup{Name: l.Name, Kind: l.GVK.Kind, Namespace: wt.Namespace, Selector: sel.String(), Found: []string{}}
		for _, it := range items {
			pl.Found = append(pl.Found, nameOf(it))
		}
		v.Lookups = append(v.Lookups, pl)
		vars[l.Name] = items
	}
	ok, err := a.until.EvalBool(ctx, vars)
	if err != nil {
		return steps.Plan{Summary: "wait until " + v.Until, Rendered: v, Err: fmt.Sprintf("until cannot be evaluated now: %v", err)}
	}
	v.Holds = &ok
	state := "false now: the step would wait"
	if ok {
		state = "true now: the step would succeed at once"
	}
	return steps.Plan{Summary: fmt.Sprintf("wait until %s (%s)", v.Until, state), Rendered: v}
}

// nameOf is a listed object's namespace/name.
func nameOf(item any) string {
	m, _ := item.(map[string]any)
	meta, _ := m["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		return ns + "/" + name
	}
	return name
}
