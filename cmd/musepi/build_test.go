package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestReleaseBuildLeavesOutTracing: the README's install command builds
// with -tags grpcnotrace, which keeps golang.org/x/net/trace, and with it
// html/template, out of the binary. html/template calls methods by
// reflection, which makes the linker keep every exported method of every
// type: a dependency that brings it back costs about 50 MB of binary.
func TestReleaseBuildLeavesOutTracing(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the command's packages")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-tags", "grpcnotrace", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["google.golang.org/grpc"] {
		t.Fatal("google.golang.org/grpc is not among the command's packages: the tag no longer matters, update the README's install command")
	}
	for _, p := range []string{"golang.org/x/net/trace", "html/template"} {
		if deps[p] {
			t.Errorf("the release build links %s; find what imports it: go list -deps -tags grpcnotrace -f '{{.ImportPath}} {{.Imports}}' . | grep %s", p, p)
		}
	}
}
