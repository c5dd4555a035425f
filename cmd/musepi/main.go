// Command musepi is the MusePi command-line tool:
//
//	musepi <command> [flags]
//
// Each command is a *command in its own file, listed in rootCommand below; cli.go
// reads every command line and reports every outcome the same way.
package main

import (
	"io"
	"os"
)

// rootCommand is "musepi": the command tree.
var rootCommand = &command{
	synopsis: []string{"<command> [flags]"},
	about: `
MusePi runs LLM agent sessions that survive provider outages: retries with
backoff, credential switches and model fallbacks, in a terminal, as JSON
lines on stdin/stdout, or across the nodes of a cluster.`,
	commands: map[string]*command{
		"chat":     chatCommand,
		"cluster":  clusterCommand,
		"config":   configCommand,
		"demo":     demoCommand,
		"fakellm":  fakeLLMCommand,
		"history":  historyCommand,
		"node":     nodeCommand,
		"rpc":      rpcCommand,
		"sessions": sessionsCommand,
		"version":  versionCommand,
	},
}

// stdin is what commands read, stdout and stderr where they write;
// tests replace them.
var (
	stdin  io.Reader = os.Stdin
	stdout io.Writer = os.Stdout
	stderr io.Writer = os.Stderr
)

// run runs the command line args (without the program name) and returns
// the exit status.
func run(args []string) int { return rootCommand.execute("musepi", args) }

func main() {
	os.Exit(run(os.Args[1:]))
}
