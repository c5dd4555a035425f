// Command testrun is the README's test command:
//
//	go run ./internal/testrun -race -count=1 -p 4 ./...
//
// It runs `go test -json` with its arguments and, at the same time, builds
// the programs that tests run as processes (internal/testkit/testbin.All)
// in one `go build`, so that this build overlaps go test's compiling and
// no test package has to build them itself. It gives go test the packages
// whose tests take longest first (first, in order.go), so that their tests
// start as soon as they are built. Of go test's output it prints
// what a person wants: one line per package as go test prints it (ok,
// FAIL, or no test files), the whole output of every failed test, package
// and build, and at the end the tests skipped for want of a tool (the
// lines of internal/testkit/testtool), or that none was, and how long the
// run took. It exits 1 when anything failed, a build failed, or a package
// never finished (a crashed test binary, go test stopped early).
//
// It is test tooling, like the packages of internal/testkit, but keeps
// this path, the one a newcomer types first: the README, docs/testing.md
// and .ci/run run it as ./internal/testrun.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"time"

	"github.com/musepi/musepi/internal/testkit/testbin"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs go test with args and the programs' build, and returns the exit
// code.
func run(args []string, stdout, stderr io.Writer) int {
	began := time.Now()
	// Ctrl-C reaches go test and the tests through the process group; the
	// runner stays to remove the programs and report what ended.
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)

	dir, err := os.MkdirTemp("", "musepi-testbin-")
	if err != nil {
		fmt.Fprintf(stderr, "testrun: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	building, stopBuilding := context.WithCancel(context.Background())
	defer stopBuilding()
	built := make(chan error, 1)
	go func() { built <- testbin.BuildAll(building, dir) }()

	s := newSummary(stdout)
	goTest := exec.Command("go", append([]string{"test", "-json"}, ordered(args, goList)...)...)
	goTest.Env = append(os.Environ(), testbin.Env+"="+dir)
	goTest.Stderr = stderr
	err = readEvents(goTest, s)
	select {
	case buildErr := <-built:
		if buildErr != nil {
			fmt.Fprintf(stdout, "building the programs the tests run failed: %v\n", buildErr)
			s.failed = true
		}
	default:
		// go test has ended: a build its tests never waited for is not
		// needed.
		stopBuilding()
		<-built
	}
	if err != nil {
		fmt.Fprintf(stdout, "go test: %v\n", err)
		s.failed = true
	}
	return s.finish(time.Since(began))
}

// readEvents starts cmd and passes each line of its stdout to s until it
// exits; it returns how it ended.
func readEvents(cmd *exec.Cmd, s *summary) error {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	in := bufio.NewReader(out)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			s.add([]byte(strings.TrimRight(string(line), "\r\n")))
		}
		if err != nil {
			if err != io.EOF {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				return fmt.Errorf("read its output: %w", err)
			}
			return cmd.Wait()
		}
	}
}
