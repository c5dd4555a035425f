package testkit

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRuntimeLinksNoTestKit checks the import graph runs one way: the
// library and the command link no package of the test kit.
func TestRuntimeLinksNoTestKit(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the runtime's packages")
	}
	out, err := exec.Command(goBin, "list", "-deps", "../..", "../../cmd/musepi").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 100 {
		t.Fatalf("go list -deps listed %d packages, too few to be the runtime's:\n%s", len(pkgs), out)
	}
	for _, p := range pkgs {
		if strings.HasPrefix(p, "github.com/musepi/musepi/internal/testkit") {
			t.Errorf("the runtime links %s; find what imports it: go list -deps -f '{{.ImportPath}}: {{join .Imports \" \"}}' . ./cmd/musepi", p)
		}
	}
}
