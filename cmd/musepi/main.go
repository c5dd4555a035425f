// Command musepi is the MusePi command-line tool:
//
//	musepi <command> [flags]
//
// Commands register themselves in the commands table below (one file per
// command); each is a func(args []string) int returning the exit code.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(args []string) int
}

// commands maps a command name to its implementation. Add new commands
// here (or from an init func in the command's own file).
var commands = map[string]command{
	"config":  {summary: "check a configuration file (musepi config check FILE)", run: runConfig},
	"fakellm": {summary: "run the fault-injecting fake LLM server", run: runFakeLLM},
}

// stderr is where commands write diagnostics.
var stderr io.Writer = os.Stderr

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: musepi <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `run "musepi <command> -h" for the command's flags`)
}

// run dispatches args (without the program name) and returns the exit
// code: 2 for a missing or unknown command.
func run(args []string) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(os.Stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "musepi: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(args[1:])
}

// parseFlags parses a command's flags, which take no positional arguments.
// ok is false when the command must exit with code: 0 after -h, 2 after a
// bad flag or an argument.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return 2, false
	}
	return 0, true
}

func main() {
	os.Exit(run(os.Args[1:]))
}
