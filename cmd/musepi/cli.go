package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// The one way every command reads its command line and ends (docs/cli.md):
// help on stdout with status 0; a wrong command line on
// stderr, "musepi CMD: " and what is wrong, then the synopsis, with status
// 2; a failure on stderr, every line prefixed "musepi CMD: ", with
// status 1.
const (
	exitFailure = 1
	exitUsage   = 2
)

// command is one musepi command: a group of commands, or a leaf that runs.
type command struct {
	summary  string   // one line, in its group's help
	synopsis []string // its usage lines, without "usage: musepi CMD "
	about    string   // what it does, in its help between the synopsis and the flags

	// A group's commands, by name.
	commands map[string]*command

	// A leaf's positional arguments, all required ("FILE").
	args []string
	// setup declares a leaf's flags on fs and returns what runs it once
	// they are parsed, with its positional arguments.
	setup func(fs *flag.FlagSet) func(args []string) error
}

// noFlags is the setup of a leaf without flags that run runs.
func noFlags(run func(args []string) error) func(*flag.FlagSet) func([]string) error {
	return func(*flag.FlagSet) func([]string) error { return run }
}

// usageError is a wrong command line: an unknown flag or command, a bad
// value, missing or conflicting flags or arguments.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// usagef returns a usageError.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCode ends a command with that status and nothing more said: the
// command has already said why (a check's findings, a demo that failed).
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// execute runs c, called name ("musepi config check"), with args, the words
// after name, reports how it ended and returns its exit status.
func (c *command) execute(name string, args []string) int {
	fs, run := c.flagSet(name)
	err := fs.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		err = usageError{err}
	}
	if err == nil {
		err = checkFlags(fs)
	}
	if err == nil {
		err = run(fs.Args())
	}
	return c.exit(name, fs, err)
}

// flagSet returns c's flags, which print nothing themselves (exit
// reports), and what runs c with its arguments once they are parsed.
func (c *command) flagSet(name string) (*flag.FlagSet, func(args []string) error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if c.commands != nil {
		return fs, func(args []string) error { return c.dispatch(name, args) }
	}
	run := c.setup(fs)
	return fs, func(args []string) error {
		switch n := len(c.args); {
		case len(args) < n:
			return usagef("missing %s", c.args[len(args)])
		case len(args) > n:
			return usagef("unexpected argument %q", args[n])
		}
		return run(args)
	}
}

// dispatch runs the command of group c that args name; "help [COMMAND...]"
// is "[COMMAND...] -h".
func (c *command) dispatch(name string, args []string) error {
	if len(args) == 0 {
		return usagef("missing command")
	}
	if args[0] == "help" {
		return exitCode(c.execute(name, append(slices.Clone(args[1:]), "-h")))
	}
	sub, ok := c.commands[args[0]]
	if !ok {
		return usagef("unknown command %q", args[0])
	}
	return exitCode(sub.execute(name+" "+args[0], args[1:]))
}

// exit reports err as every command does and returns the exit status.
func (c *command) exit(name string, fs *flag.FlagSet, err error) int {
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		c.help(stdout, name, fs)
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		c.printSynopsis(stderr, name)
		fmt.Fprintf(stderr, "Run %q for help.\n", name+" -h")
		return exitUsage
	}
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(stderr, "%s: %s\n", name, line)
	}
	return exitFailure
}

// help writes c's help: its synopsis, what it does, its commands or flags.
func (c *command) help(w io.Writer, name string, fs *flag.FlagSet) {
	c.printSynopsis(w, name)
	fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.about))
	if c.commands != nil {
		fmt.Fprintln(w, "\nCommands:")
		for _, sub := range slices.Sorted(maps.Keys(c.commands)) {
			fmt.Fprintf(w, "  %-10s %s\n", sub, c.commands[sub].summary)
		}
		fmt.Fprintf(w, "\nRun %q for a command's help.\n", name+" <command> -h")
	}
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nFlags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// printSynopsis writes c's usage lines.
func (c *command) printSynopsis(w io.Writer, name string) {
	for i, line := range c.synopsis {
		lead := "usage:"
		if i > 0 {
			lead = "      "
		}
		fmt.Fprintln(w, strings.TrimRight(lead+" "+name+" "+line, " "))
	}
}

// checkedValue is a string flag with a check of its value (checkedString).
type checkedValue struct {
	p     *string
	check func(string) error
}

func (v checkedValue) String() string {
	if v.p == nil { // the zero value, which flag.PrintDefaults makes
		return ""
	}
	return *v.p
}

func (v checkedValue) Set(s string) error {
	*v.p = s
	return nil
}

// checkedStringVar defines a string flag, like fs.StringVar, whose value
// check refuses when the command line gives it: a wrong command line,
// "--NAME: " and why (status 2), before the command runs. Every URL and
// address flag is one (config.CheckBaseURL, config.CheckListenAddress).
// A word of usage in backquotes names the value in the help ("`URL`").
func checkedStringVar(fs *flag.FlagSet, p *string, name, value, usage string, check func(string) error) {
	*p = value
	fs.Var(checkedValue{p, check}, name, usage)
}

// checkedString is checkedStringVar returning the flag's variable, like
// fs.String.
func checkedString(fs *flag.FlagSet, name, value, usage string, check func(string) error) *string {
	p := new(string)
	checkedStringVar(fs, p, name, value, usage, check)
	return p
}

// checkFlags runs the checks of the checked flags (checkedStringVar) the
// command line gave, in the order of their names.
func checkFlags(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if v, ok := f.Value.(checkedValue); ok && err == nil {
			if e := v.check(*v.p); e != nil {
				err = usagef("--%s: %w", f.Name, e)
			}
		}
	})
	return err
}

// flagsGiven is the set of flags a command line gave, by name.
type flagsGiven map[string]bool

// given returns the flags fs was given.
func given(fs *flag.FlagSet) flagsGiven {
	g := flagsGiven{}
	fs.Visit(func(f *flag.Flag) { g[f.Name] = true })
	return g
}

// needs is a usage error when flag was given without other.
func (g flagsGiven) needs(flag, other string) error {
	if g[flag] && !g[other] {
		return usagef("--%s needs --%s", flag, other)
	}
	return nil
}

// excludes is a usage error when flag was given with one of others.
func (g flagsGiven) excludes(flag string, others ...string) error {
	for _, o := range others {
		if g[flag] && g[o] {
			return usagef("--%s cannot be used with --%s", flag, o)
		}
	}
	return nil
}
