package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	cases := []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"installed at a tag", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}},
			"musepi v0.1.0 go1.26.8"},
		{"built in a checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20261203061500-0b0afbc1e2d3+dirty"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0b0afbc1e2d3f4a5b6c7"}, {Key: "vcs.modified", Value: "true"}}},
			"musepi v0.1.1-0.20261203061500-0b0afbc1e2d3+dirty (0b0afbc1e2d3, modified) go1.26.8"},
		{"clean checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0b0afbc1e2d3f4a5b6c7"}, {Key: "vcs.modified", Value: "false"}}},
			"musepi (devel) (0b0afbc1e2d3) go1.26.8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionLine(&tc.info); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The test binary carries build information too: the command prints it.
func TestVersionCommand(t *testing.T) {
	code, out, errOut := runCaptured(t, "version")
	if code != 0 || !strings.HasPrefix(out, "musepi ") || !strings.Contains(out, " go1.") || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
