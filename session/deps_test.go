package session

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreLinksNoRuntime: the pure core (session, retry, pacing) links no
// actor runtime, telemetry, RPC or provider SDK, so that it can be read,
// tested and reused on its own (issue 39, item 4). Package messages, which
// they share with the actors, carries an actor's address as its own
// ActorRef, not protoactor's actor.PID.
func TestCoreLinksNoRuntime(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to list the core's packages")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".", "../retry", "../pacing").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, bad := range []string{"protoactor", "opentelemetry", "grpc", "openai", "anthropic"} {
			if strings.Contains(p, bad) {
				t.Errorf("the core links %s; find what imports it: go list -deps -f '{{.ImportPath}}: {{join .Imports \" \"}}' ./session ./retry ./pacing", p)
				break
			}
		}
	}
}
