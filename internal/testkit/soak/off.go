//go:build !soak

package soak

// Enabled is false: the tests run short (no -tags soak).
const Enabled = false
