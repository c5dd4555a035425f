package main

import (
	"errors"
	"fmt"

	"github.com/musepi/musepi/config"
	"github.com/musepi/musepi/config/clustercfg"
)

var configCommand = &command{
	summary:  "check a configuration file (musepi config check FILE)",
	synopsis: []string{"check FILE"},
	about:    "Checks configuration files (TOML; see config/README.md).",
	commands: map[string]*command{"check": configCheckCommand},
}

var configCheckCommand = &command{
	summary:  "check a configuration file",
	synopsis: []string{"FILE"},
	about: `
Checks a configuration file (see config/README.md): TOML syntax, unknown keys,
types and values, that every api_key_env variable (and [cluster]
database_url_env) is set in this environment, and that the [cluster.tls] and
[cluster.etcd.tls] files hold a CA, a certificate it signed for this node's
address, and its key. Prints "FILE: ok (...)" and exits 0, or prints every
problem to stderr, one "FILE: key: problem" line each, and exits 1.`,
	args:  []string{"FILE"},
	setup: noFlags(checkConfig),
}

// checkConfig is "musepi config check FILE". The file's problems are its
// findings, printed as they are; a file it cannot read is its failure.
func checkConfig(args []string) error {
	path := args[0]
	cfg, err := clustercfg.Load(path)
	var problems *config.Error
	if errors.As(err, &problems) {
		fmt.Fprintln(stderr, problems)
		return exitCode(exitFailure)
	}
	if err != nil {
		return err
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
	fmt.Fprintf(stdout, "%s: ok (%d provider%s, default model %s%s)\n", path, n, plural, cfg.DefaultModel, cluster)
	return nil
}
