// Package testkit is the folder of MusePi's test kit: what the tests, the
// benchmarks and CI use, and the runtime never links. Its packages:
//
//   - nodetest: a cluster of `musepi node` processes on loopback (or in
//     network namespaces) for cmd/musepi's tests; nodetest/swarm, the
//     cluster client its chaos test runs.
//   - netnstest: a private network of Linux namespaces whose links a test
//     cuts.
//   - protorace: what tests of several protoactor-go members in one
//     process tolerate of it (its data races, its goroutines), and the
//     judge of their child processes' output.
//   - testbin: the binaries of the programs tests run as processes.
//   - testcert: certificate authorities and certificates for mutual TLS.
//   - testtool: skip (or fail under CI) when a program a test needs is
//     missing.
//   - waiting: more tests at once for a package whose tests mostly wait.
//   - soak: whether the long runs were asked for (go test -tags soak).
//   - memstat: the memory a program holds, as bench/ reports it.
//   - doclinks: the tests that keep the Markdown files true.
//   - funclen: the function-length check .ci/run makes.
//
// Three programs stay outside it: internal/testrun, the README's test
// command, keeps its short path (`go run ./internal/testrun ...`), and
// internal/genrecord and internal/genevent (with internal/protoname) generate the runtime's own code
// (go generate in messages/). Everything else under internal/ is the runtime's internals,
// imported by the runtime's non-test code.
//
// A package here may import the runtime; the runtime (package musepi and
// everything cmd/musepi links) imports nothing here, which
// TestRuntimeLinksNoTestKit checks. The test servers cluster/etcdtest and cluster/pgstore/pgtest
// import netnstest, testcert and testtool.
package testkit
