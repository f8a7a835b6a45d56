// Package admissionpolicies holds the admission policies shipped in this directory (applied with
// kubectl apply -k config/admission, and generated into the chart), so that the operator can tell
// an installed policy from an edited one: what it trusts rests on these rules, not on their names.
package admissionpolicies

import "embed"

// Files are the manifests of this directory, each a ValidatingAdmissionPolicy and its binding.
//
//go:embed *.yaml
var Files embed.FS
