package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
)

// module is this module's path, the prefix of the import paths in first.
const module = "github.com/musepi/musepi"

// first are the packages whose tests take longest, longest first, by their
// path in the module ("" is the module's root package). go test starts
// the packages' tests one after the other in the order it is given them,
// each once its test binary is built, and four at a time under -p 4; in
// its own order (by import path) cmd/musepi, the longest, started last but
// a few and ended the run after everything else. Given these first, their
// tests start as soon as they are built and run while the rest compiles.
// A path that names no package is left out (TestFirstArePackages checks
// there is none).
var first = []string{"cmd/musepi", "cluster", "bench/storm", "cluster/pgstore", "", "provider/integration"}

// boolFlags are go test's and go build's flags that take no value: after
// any other flag written without "=", the next argument is its value.
var boolFlags = map[string]bool{"a": true, "asan": true, "benchmem": true, "cover": true, "failfast": true,
	"fullpath": true, "json": true, "linkshared": true, "msan": true, "n": true, "race": true, "short": true,
	"trimpath": true, "v": true, "work": true, "x": true}

// isLocalPattern reports whether arg is a package pattern relative to the
// current directory (".", "./...", "./cmd/musepi"), the only packages
// that ordered expands: packages named otherwise are passed on as they
// stand.
func isLocalPattern(arg string) bool {
	return arg == "." || arg == ".." || strings.HasPrefix(arg, "./") || strings.HasPrefix(arg, "../")
}

// ordered is go test's arguments args with the packages of its local
// patterns listed one by one after the other arguments, those of first
// before the others and in first's order, the others in go list's order.
// Arguments from -args on are the test binaries' and stay last. list lists
// the import paths of patterns; when it fails, or args have no local
// pattern, args are returned unchanged and go test orders the packages
// itself.
func ordered(args []string, list func(patterns []string) ([]string, error)) []string {
	end := len(args)
	if i := slices.IndexFunc(args, func(a string) bool { return a == "-args" || a == "--args" }); i >= 0 {
		end = i
	}
	var patterns, rest []string
	value := false // args[i] is the value of the flag before it
	for _, a := range args[:end] {
		switch {
		case value:
			rest, value = append(rest, a), false
		case strings.HasPrefix(a, "-"):
			name := strings.TrimLeft(a, "-")
			rest, value = append(rest, a), !strings.Contains(name, "=") && !boolFlags[name]
		case isLocalPattern(a):
			patterns = append(patterns, a)
		default:
			rest = append(rest, a)
		}
	}
	if len(patterns) == 0 {
		return args
	}
	pkgs, err := list(patterns)
	if err != nil || len(pkgs) == 0 {
		return args
	}
	rank := func(pkg string) int {
		for i, p := range first {
			if pkg == strings.TrimSuffix(module+"/"+p, "/") {
				return i
			}
		}
		return len(first)
	}
	slices.SortStableFunc(pkgs, func(a, b string) int { return rank(a) - rank(b) })
	return slices.Concat(rest, pkgs, args[end:])
}

// goList lists the import paths of the packages that patterns match, as
// go test would test them.
func goList(patterns []string) ([]string, error) {
	out, err := exec.Command("go", append([]string{"list", "-e", "-f", "{{.ImportPath}}"}, patterns...)...).Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(bytes.TrimSpace(out))), nil
}
