package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// commands are the binaries the image holds, by their name in / and their package.
var commands = []struct{ name, pkg string }{
	{"teardown-operator", "./cmd/teardown-operator"},
	{"kubectl-teardown", "./cmd/kubectl-teardown"},
}

const (
	repository  = "https://github.com/teardown-dev/teardown-operator"
	title       = "teardown-operator"
	description = "Kubernetes operator that runs a TeardownPolicy's pipeline before a protected object is deleted, " +
		"with the kubectl-teardown plugin (/kubectl-teardown) for the Helm chart's pre-delete hook."
)

// buildBinaries cross-compiles every command for p into dir, static (CGO_ENABLED=0), and returns
// their paths by name.
func buildBinaries(ctx context.Context, dir string, p v1.Platform, version string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	bins := make(map[string]string, len(commands))
	for _, c := range commands {
		out := filepath.Join(dir, c.name)
		if err := goBuild(ctx, c.pkg, out, p, version); err != nil {
			return nil, err
		}
		bins[c.name] = out
	}
	return bins, nil
}

// goBuild runs go build of pkg for p, stripped and without file system paths, into out, with
// the plugin's version stamped (kubectl-teardown version).
func goBuild(ctx context.Context, pkg, out string, p v1.Platform, version string) error {
	ldflags := "-s -w -X github.com/teardown-dev/teardown-operator/cli.Version=" + version
	cmd := exec.CommandContext(ctx, goCommand(), "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Architecture == "arm" && p.Variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = os.Stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", pkg, p, err, stderr.Bytes())
	}
	return nil
}

// goCommand is the go command: $GO (the Makefile's), else go on PATH.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// sourceDateEpoch is the time of every file and of the image: SOURCE_DATE_EPOCH (seconds since
// the Unix epoch), or the Unix epoch itself.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a non-negative number of seconds", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// imageLabels are the image's OCI annotations as labels. The revision is left out when git
// cannot tell it, and the license when no LICENSE file names one this program knows.
func imageLabels(ctx context.Context, tag name.Tag) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.source":      repository,
		"org.opencontainers.image.url":         repository,
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.version":     tag.TagStr(),
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
		l["org.opencontainers.image.revision"] = strings.TrimSpace(string(out))
	}
	if id := licenseID("LICENSE"); id != "" {
		l["org.opencontainers.image.licenses"] = id
	}
	return l
}

// licenseID is the SPDX identifier of the license in file, when it is one of the common ones.
func licenseID(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	text := string(b)
	for _, l := range []struct{ marker, id string }{
		{"Apache License", "Apache-2.0"},
		{"MIT License", "MIT"},
		{"Mozilla Public License Version 2.0", "MPL-2.0"},
		{"BSD 3-Clause License", "BSD-3-Clause"},
	} {
		if strings.Contains(text, l.marker) {
			return l.id
		}
	}
	return ""
}
