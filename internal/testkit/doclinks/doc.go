// Package doclinks holds the tests that keep the repository's Markdown
// true: every relative link resolves inside the repository (a file, a
// folder, or a heading of the linked file) and none points at the local
// file system; every ```go block of README.md compiles against this
// module; and the README and docs/embedding.md name every event type. It
// has no code of its own: go test runs the checks.
//
// It is part of the test kit (internal/testkit): a package of tests that
// nothing imports.
package doclinks
