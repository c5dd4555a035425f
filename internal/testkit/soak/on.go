//go:build soak

package soak

// Enabled is true: the tests run at full length and size (-tags soak).
const Enabled = true
