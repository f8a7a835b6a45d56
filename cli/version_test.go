package cli

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for name, tc := range map[string]struct {
		info *debug.BuildInfo
		want string
	}{
		"go install of a release": {&debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, "v0.1.0"},
		"built from a clean checkout": {&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123456789abcdef0123", "false")},
			"development build of commit 0123456789ab"},
		"built from a changed checkout": {&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123456789abcdef0123", "true")},
			"development build of commit 0123456789ab, with uncommitted changes"},
		"built without VCS stamps": {&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "development build (no version stamped: build it with make plugin)"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := versionOf(tc.info); got != tc.want {
				t.Errorf("versionOf = %q, want %q", got, tc.want)
			}
		})
	}
	if got := version("0.1.0"); got != "0.1.0" {
		t.Errorf("version(stamped 0.1.0) = %q", got)
	}
}
