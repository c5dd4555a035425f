package main

import (
	"flag"
	"fmt"
	"runtime/debug"
)

func init() {
	commands["version"] = command{summary: "print the version of musepi (from the Go build information)", run: runVersion}
}

// runVersion is "musepi version": the module version the binary was built
// from ("v0.1.0" after go install ...@v0.1.0; "(devel)" in a checkout),
// the VCS revision when the build recorded one, and the Go version.
func runVersion(args []string) int {
	fs := flag.NewFlagSet("musepi version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(stderr, "musepi version: the binary carries no build information")
		return 1
	}
	fmt.Fprintln(stdout, versionLine(info))
	return 0
}

// versionLine is "musepi <version> [(<revision>[, modified])] <go version>".
func versionLine(info *debug.BuildInfo) string {
	line := "musepi " + info.Main.Version
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		line += fmt.Sprintf(" (%.12s%s)", rev, modified)
	}
	return line + " " + info.GoVersion
}
