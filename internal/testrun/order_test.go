package main

import (
	"errors"
	"reflect"
	"testing"
)

func TestOrdered(t *testing.T) {
	listed := []string{module, module + "/actors", module + "/bench/storm", module + "/cluster", module + "/cmd/musepi", module + "/tui"}
	list := func(patterns []string) ([]string, error) {
		if !reflect.DeepEqual(patterns, []string{"./..."}) {
			t.Errorf("listed %q, want ./...", patterns)
		}
		return append([]string(nil), listed...), nil
	}
	slowFirst := []string{module + "/cmd/musepi", module + "/cluster", module + "/bench/storm", module, module + "/actors", module + "/tui"}
	for _, tc := range []struct {
		name string
		args []string
		list func([]string) ([]string, error)
		want []string
	}{
		{"the README's command", []string{"-race", "-count=1", "-p", "4", "./..."}, list,
			append([]string{"-race", "-count=1", "-p", "4"}, slowFirst...)},
		{"flags after the packages, and the test binaries' own", []string{"-race", "./...", "-run", "TestX", "-args", "./x"}, list,
			append(append([]string{"-race", "-run", "TestX"}, slowFirst...), "-args", "./x")},
		{"a flag's value that looks like a pattern", []string{"-coverpkg", "./...", "./..."}, list,
			append([]string{"-coverpkg", "./..."}, slowFirst...)},
		{"no local pattern", []string{"-race", module + "/cluster"}, list, []string{"-race", module + "/cluster"}},
		{"go list fails", []string{"-race", "./..."},
			func([]string) ([]string, error) { return nil, errors.New("no go") }, []string{"-race", "./..."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ordered(tc.args, tc.list); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ordered(%q)\n = %q\nwant %q", tc.args, got, tc.want)
			}
		})
	}
}

// TestFirstArePackages: a package renamed or removed would fall back
// silently to go test's place for it.
func TestFirstArePackages(t *testing.T) {
	var patterns []string
	for _, p := range first {
		patterns = append(patterns, "../../"+p)
	}
	pkgs, err := goList(patterns)
	if err != nil {
		t.Fatalf("go list %q: %v", patterns, err)
	}
	if got := ordered(append([]string{"-race"}, patterns...), goList); len(pkgs) != len(first) || !reflect.DeepEqual(got[1:], pkgs) {
		t.Errorf("first %q lists as %q and orders as %q; want every one a package, in first's order", first, pkgs, got[1:])
	}
}
