// Package testtool decides what a test does when a program it needs is not
// on the machine: outside CI it skips with one line naming the program and
// the command that installs it; under CI (the CI environment variable set
// to anything but "false" or "0", as .ci/run sets it) it fails, because CI
// installs every tool and a skip there would hide a test that never ran.
//
// The skip line starts with Marker, which is how internal/testrun finds it
// and lists it at the end of the README's test command.
//
// It is part of the test kit (internal/testkit): the tests, the test
// servers (cluster/etcdtest, cluster/pgstore/pgtest, netnstest) and
// internal/testrun use it.
package testtool

import (
	"os"
	"os/exec"
	"testing"
)

// Marker starts every skip line of this package.
const Marker = "missing tool: "

// Tool is a program tests run, and how to install it.
type Tool struct {
	Name    string // what a reader calls it: "etcd", "PostgreSQL (initdb, postgres)"
	Install string // the command that installs it on Debian or Ubuntu
}

// The tools the module's tests use.
var (
	Etcd     = Tool{Name: "etcd", Install: "apt-get install etcd-server"}
	Postgres = Tool{Name: "PostgreSQL (initdb, postgres)", Install: "apt-get install postgresql"}
	Tmux     = Tool{Name: "tmux", Install: "apt-get install tmux"}
	Node     = Tool{Name: "Node.js >= 20.6 with npm", Install: "apt-get install nodejs npm"}
	// Netns is what internal/testkit/netnstest's private networks need: root, and
	// ip (iproute2) and iptables-restore on PATH.
	Netns = Tool{Name: "network namespaces (root, ip, iptables)", Install: "apt-get install iproute2 iptables, and run the tests as root"}
)

// InCI reports whether the tests run under CI, where a missing tool fails.
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// Line is the one line a test skipped for want of tool prints; why says
// what was missing or failed ("etcd not found on PATH").
func Line(tool Tool, why string) string {
	return Marker + tool.Name + " (install: " + tool.Install + "): " + why
}

// Missing ends t for want of tool: a skip outside CI, a failure under CI.
func Missing(t testing.TB, tool Tool, why string) {
	t.Helper()
	if InCI() {
		t.Fatal(Line(tool, why) + " (CI is set, so this fails instead of skipping)")
	}
	t.Skip(Line(tool, why))
}

// Need returns the path of program bin, or ends t by Missing when it is not
// on PATH.
func Need(t testing.TB, tool Tool, bin string) string {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		Missing(t, tool, bin+" not found on PATH")
	}
	return path
}
