package cli

import (
	"runtime/debug"
)

// version says which plugin this is: the version stamped at build time; else the module version
// `go install` recorded; else, for a build from a checkout (`go build`, `go run`), that it is a
// development build and the commit it was built from, when Go recorded it.
func version(stamped string) string {
	if stamped != "" {
		return stamped
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	return versionOf(info)
}

// versionOf is version's reading of Go's build information.
func versionOf(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "development build (no version stamped: build it with make plugin)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += ", with uncommitted changes"
	}
	return "development build of commit " + rev
}
