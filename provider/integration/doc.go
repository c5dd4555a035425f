// Package integration holds end-to-end tests of the real SDK-based providers and sessions
// against the fault-injecting server (fakellm), over loopback.
package integration
