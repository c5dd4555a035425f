// Package doclinks holds the test that every relative link in the
// repository's Markdown files resolves inside the repository (a file, a
// folder, or a heading of the linked file), and that no link points at the
// local file system. It has no code of its own: go test runs the check.
package doclinks
