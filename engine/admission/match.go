package admission

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// MinVersion is the first Kubernetes version that serves admissionregistration.k8s.io/v1
// MutatingAdmissionPolicy: what a check made without a cluster assumes, so that a match it
// accepts runs at admission on every cluster that arms at creation.
var MinVersion = version.MajorMinor(1, 36)

// CheckMatch reports why a policy's CEL match cannot run as a match condition of a
// MutatingAdmissionPolicy on an API server of version ver (nil: MinVersion), or nil when it can.
// It compiles the expression as that API server does (its CEL libraries and variables, and its
// check of the result type), so a function the API server lacks, or a variable of the operator's
// own (steps, run), is found here and not at admission. The API server evaluates a match condition
// within the same per-expression cost limit as the operator evaluates a match (1,000,000); an
// evaluation that errs or goes past it at admission leaves the object to the operator
// (failurePolicy Ignore).
func CheckMatch(src string, ver *version.Version) error {
	if ver == nil {
		ver = MinVersion
	}
	cond := &matchconditions.MatchCondition{Name: conditionMatch, Expression: src}
	res := compilerFor(ver).CompileCELExpression(cond, plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
	if res.Error != nil {
		return fmt.Errorf("the API server (Kubernetes %s) cannot evaluate it: %s", ver, oneLine(strings.TrimPrefix(res.Error.Detail, "compilation failed: ")))
	}
	return nil
}

// compilers are the API server's compilers, by version: building one builds eight CEL
// environments.
var compilers sync.Map // string -> plugincel.Compiler

func compilerFor(ver *version.Version) plugincel.Compiler {
	if c, ok := compilers.Load(ver.String()); ok {
		return c.(plugincel.Compiler)
	}
	c, _ := compilers.LoadOrStore(ver.String(), plugincel.NewCompiler(environment.MustBaseEnvSet(ver)))
	return c.(plugincel.Compiler)
}

// oneLine keeps the first line of a CEL compiler message, without its source excerpt.
func oneLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(first)
}
