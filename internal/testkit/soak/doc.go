// Package soak tells tests whether the long runs were asked for with
// go test -tags soak: soaks at full length and scale tests at full size.
// Without the tag they run short enough for the everyday test command.
//
// It is part of the test kit (internal/testkit): only tests import it.
package soak
