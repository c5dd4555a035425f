package main

import (
	"errors"
	"fmt"
	"runtime/debug"
)

var versionCommand = &command{
	summary:  "print the version of musepi (from the Go build information)",
	synopsis: []string{""},
	about: `
Prints the version musepi was built from: the module version ("v0.1.0" after
go install ...@v0.1.0; "(devel)" in a checkout), the VCS revision when the
build recorded one, and the Go version.`,
	setup: noFlags(printVersion),
}

// printVersion is "musepi version".
func printVersion([]string) error {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("the binary carries no build information")
	}
	fmt.Fprintln(stdout, versionLine(info))
	return nil
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
