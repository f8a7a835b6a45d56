// Package crd embeds the CustomResourceDefinitions `make manifests` writes, so that the CLI
// checks policies against the very schema the API server enforces.
package crd

import "embed"

// Bases holds bases/*.yaml, one CustomResourceDefinition per file.
//
//go:embed bases/*.yaml
var Bases embed.FS
