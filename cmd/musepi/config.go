package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/musepi/musepi/config"
)

// configOut is where "musepi config check" reports success.
var configOut io.Writer = os.Stdout

func configUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: musepi config check FILE")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Checks a configuration file (see config/README.md): TOML syntax, unknown keys,")
	fmt.Fprintln(w, "types and values, that every api_key_env variable (and [cluster] database_url_env)")
	fmt.Fprintln(w, "is set in this environment, and that the [cluster.tls] and [cluster.etcd.tls] files")
	fmt.Fprintln(w, "hold a CA, a certificate it signed for this node's address, and its key.")
	fmt.Fprintln(w, "Prints \"FILE: ok (...)\" and exits 0, or prints every problem to stderr and exits 1.")
}

// runConfig is "musepi config check FILE".
func runConfig(args []string) int {
	if len(args) == 0 {
		configUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		configUsage(stderr)
		return 0
	case "check":
	default:
		fmt.Fprintf(stderr, "musepi config: unknown subcommand %q\n\n", args[0])
		configUsage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("musepi config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { configUsage(stderr) }
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "musepi config check: want exactly one FILE")
		configUsage(stderr)
		return 2
	}
	path := fs.Arg(0)
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	n := len(cfg.Providers)
	plural := "s"
	if n == 1 {
		plural = ""
	}
	cluster := ""
	if c := cfg.Cluster; c != nil {
		cluster = fmt.Sprintf(", cluster %q with %s membership", c.Name, c.Membership)
	}
	fmt.Fprintf(configOut, "%s: ok (%d provider%s, default model %s%s)\n", path, n, plural, cfg.DefaultModel, cluster)
	return 0
}
