// Package builtin lists the step kinds teardown-operator ships, for the operator binary and for
// the test suites that run the engine.
package builtin

import (
	"github.com/teardown-dev/teardown-operator/engine"
	"github.com/teardown-dev/teardown-operator/steps"
	"github.com/teardown-dev/teardown-operator/steps/httpstep"
	"github.com/teardown-dev/teardown-operator/steps/wait"
)

// Options configure the built-in kinds.
type Options struct {
	HTTP httpstep.Options
}

// Kinds returns a factory for every built-in step kind.
func Kinds(opts Options) []engine.KindFactory {
	return []engine.KindFactory{
		func(d engine.Deps) steps.Kind { return wait.New(d.Lister) },
		func(d engine.Deps) steps.Kind { return httpstep.New(d.Reader, d.Wake, opts.HTTP) },
	}
}
