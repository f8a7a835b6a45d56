// Package expr compiles and evaluates the CEL expressions of teardown policies: conditions
// (match, when, until), values (outputs) and strings with ${...} interpolation.
//
// Every expression is compiled once per policy generation from one shared environment, type-checked
// at compile time, and evaluated under a cost limit, so a policy cannot stall a worker with an
// expensive expression. Objects are bound as dynamic values: the operator serves any kind, so their
// schema is not known when a policy is compiled.
package expr
