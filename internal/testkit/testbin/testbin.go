// Package testbin gives the tests that run MusePi's programs as processes
// their binaries, built without the race detector. The README's test
// command (internal/testrun) builds them all in one `go build` while go
// test compiles, into the directory named by Env; a test package run by
// plain `go test` builds the ones it needs itself.
//
// It is part of the test kit (internal/testkit): the tests of cmd/musepi
// and examples, and internal/testrun, use it.
package testbin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"time"
)

// Env names the directory internal/testrun builds All into.
const Env = "MUSEPI_TEST_BIN_DIR"

// All are the programs tests run as processes, by import path.
var All = []string{
	"github.com/musepi/musepi/cmd/musepi",
	"github.com/musepi/musepi/internal/testkit/nodetest/swarm",
	"github.com/musepi/musepi/examples/quickstart",
	"github.com/musepi/musepi/examples/embed",
	"github.com/musepi/musepi/examples/team",
	"github.com/musepi/musepi/examples/customprovider",
}

// The files that say a build in a directory has ended: ready when it
// succeeded, failed (holding go build's output) when it did not.
const (
	readyFile  = ".ready"
	failedFile = ".failed"
)

// buildTimeout bounds one build of All, or of a package's own programs.
const buildTimeout = 5 * time.Minute

// ErrNoGo is returned when the go tool is not on the PATH (go test puts
// $GOROOT/bin first on the PATH of the tests it runs).
var ErrNoGo = errors.New("testbin: no go tool on PATH")

// BuildAll builds All into dir and then writes the file that tells the
// tests waiting in dir how it went. It returns the build's error too.
func BuildAll(ctx context.Context, dir string) error {
	err := build(ctx, dir, All)
	if err != nil {
		if werr := writeMarker(dir, failedFile, []byte(err.Error())); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
	return writeMarker(dir, readyFile, nil)
}

// writeMarker writes the marker file name in dir with content, whole: it
// appears under its name only once written (a rename), so a waiting test
// never reads it half written.
func writeMarker(dir, name string, content []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// build runs one `go build` of pkgs into dir, within buildTimeout. The
// binaries have no symbol table and no DWARF data (-s -w, as the release
// build): their links take a fifth less, and a panic still prints its
// stack trace with files and lines.
func build(ctx context.Context, dir string, pkgs []string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return ErrNoGo
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	args := append([]string{"build", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}, pkgs...)
	if out, err := exec.CommandContext(ctx, goTool, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// Set is the programs one test package runs, obtained once: from the
// directory named by Env when it is set, else built into a temporary
// directory that Close removes.
type Set struct {
	pkgs []string // import paths

	once  sync.Once
	dir   string
	owned bool // dir was made by this Set
	err   error
}

// NewSet returns the set of the programs at the import paths pkgs.
func NewSet(pkgs ...string) *Set { return &Set{pkgs: pkgs} }

// Build obtains the set once; later calls wait for the first and return its
// result. ctx bounds the first call's wait or build.
func (s *Set) Build(ctx context.Context) error {
	s.once.Do(func() { s.dir, s.owned, s.err = s.obtain(ctx) })
	return s.err
}

func (s *Set) obtain(ctx context.Context) (dir string, owned bool, err error) {
	if dir := os.Getenv(Env); dir != "" {
		return dir, false, wait(ctx, dir)
	}
	dir, err = os.MkdirTemp("", "musepi-testbin-")
	if err != nil {
		return "", false, fmt.Errorf("testbin: %w", err)
	}
	return dir, true, build(ctx, dir, s.pkgs)
}

// wait waits for the build into dir to end, until ctx ends or buildTimeout
// passes.
func wait(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(filepath.Join(dir, readyFile)); err == nil {
			return nil
		}
		if out, err := os.ReadFile(filepath.Join(dir, failedFile)); err == nil {
			return fmt.Errorf("testbin: the build in %s (%s) failed: %s", dir, Env, out)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbin: waiting for the build in %s (%s): %w", dir, Env, ctx.Err())
		case <-tick.C:
		}
	}
}

// Path is the binary of the program at import path pkg, one of the set's,
// once Build has succeeded.
func (s *Set) Path(pkg string) string { return filepath.Join(s.dir, path.Base(pkg)) }

// Close waits for a build under way and removes the directory the set
// built into, if it made one.
func (s *Set) Close() error {
	s.once.Do(func() {})
	if !s.owned {
		return nil
	}
	return os.RemoveAll(s.dir)
}
