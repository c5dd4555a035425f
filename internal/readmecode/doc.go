// Package readmecode holds the tests that keep the README's code true to
// the repository: every ```go block of README.md compiles against this
// module, and the README (and docs/embedding.md) names every event type.
// It has no code of its own: go test runs the checks.
package readmecode
