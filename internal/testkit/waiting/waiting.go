// Package waiting is for test packages whose tests mostly wait (on
// processes, servers, leases and timers, not on the CPU): Parallel lets
// more of their parallel tests run at once than go test's default,
// GOMAXPROCS, which is 2 on a 2-core machine.
//
// It is part of the test kit (internal/testkit).
package waiting

import (
	"flag"
	"strconv"
)

// Parallel sets -test.parallel to n unless the command line set it. A
// TestMain calls it before m.Run; it parses the command line if that is
// not done yet.
func Parallel(n int) error {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if set {
		return nil
	}
	return flag.Set("test.parallel", strconv.Itoa(n))
}
