package main

import (
	"cmp"
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/config"
	"github.com/musepi/musepi/config/clustercfg"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/anthropic"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/rpc"
)

//go:embed demo_scenario.json
var demoScenarioJSON []byte

// setupFlags choose what a command runs against: a config file, one
// provider given by flags, or the built-in demo (a fault-injecting server on
// loopback, no API key needed).
type setupFlags struct {
	config      string
	provider    string
	baseURL     string
	model       string
	keyEnv      string
	historyDir  string
	historySync string
	verbose     bool
	logFormat   string
	fast        bool // the demo server's time scaled down 1000× (musepi demo --fast)
	cluster     bool // join --config's cluster as a client (musepi rpc --cluster)

	// Set by check:
	log  *slog.Logger // from -v and --log-format
	sync history.Sync // from --history-sync
}

func addSetupFlags(fs *flag.FlagSet) *setupFlags {
	f := addLogFlags(fs)
	fs.StringVar(&f.config, "config", "", "configuration file (TOML; see config/README.md)")
	fs.StringVar(&f.provider, "provider", "", `talk to one provider: "openai", "openai-responses" or "anthropic" (key from --api-key-env)`)
	checkedStringVar(fs, &f.baseURL, "base-url", "", "base `URL` of that provider, http:// or https:// (default: the provider's public API)", config.CheckBaseURL)
	fs.StringVar(&f.model, "model", "", "model id for --provider (e.g. gpt-4o-mini)")
	fs.StringVar(&f.keyEnv, "api-key-env", "", "environment variable holding the API key (default OPENAI_API_KEY or ANTHROPIC_API_KEY)")
	fs.StringVar(&f.historyDir, "history-dir", "", "keep session history in this directory (default: memory)")
	fs.StringVar(&f.historySync, "history-sync", "", `fsync history files after each "turn" (default), each "entry", or "none"`)
	return f
}

// addLogFlags adds the logging flags alone (-v, --log-format), for
// commands that run against no single provider.
func addLogFlags(fs *flag.FlagSet) *setupFlags {
	f := &setupFlags{}
	fs.BoolVar(&f.verbose, "v", false, "log runtime diagnostics to stderr")
	fs.StringVar(&f.logFormat, "log-format", "text", `log format on stderr: "text" (plain lines, coloured on a terminal only) or "json" (one object a line, for machines)`)
	return f
}

// check returns a usage error for a bad value or combination of the flags
// fs was given, and parses the logger and the history sync policy for open.
func (f *setupFlags) check(fs *flag.FlagSet) error {
	var err error
	if f.log, err = f.logger(); err != nil {
		return usageError{err}
	}
	if f.historySync != "" {
		if f.sync, err = history.ParseSync(f.historySync); err != nil {
			return usagef("--history-sync: %w", err)
		}
	}
	set := given(fs)
	if set["provider"] {
		if _, ok := providers[f.provider]; !ok {
			return usagef("--provider %q: want %s", f.provider, providerNames())
		}
		if f.model == "" {
			return usagef("--provider needs --model")
		}
	}
	return cmp.Or(
		set.excludes("config", "provider"),
		set.needs("model", "provider"),
		set.needs("base-url", "provider"),
		set.needs("api-key-env", "provider"),
		set.needs("cluster", "config"),
		set.excludes("cluster", "history-dir", "history-sync"),
	)
}

// setup is a started runtime and the session defaults to use on it.
type setup struct {
	rt    *musepi.Runtime
	model string
	// models are the models clients may list and switch to.
	models []rpc.Model
	// historyDir is where session files are kept ("" in memory).
	historyDir string
	demo       bool
	shutdown   func(context.Context) error
}

// logger is the command's logger on stderr: warnings and errors (with -v
// debug lines too), as plain text lines, coloured only when stderr is a
// terminal, or as JSON objects with --log-format json: zerolog's, through
// its slog handler.
func (f *setupFlags) logger() (*slog.Logger, error) {
	level := zerolog.WarnLevel
	if f.verbose {
		level = zerolog.DebugLevel
	}
	var w io.Writer
	switch f.logFormat {
	case "text", "":
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly, NoColor: !isTerminal(stderr)}
	case "json":
		w = stderr
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
	}
	return slog.New(zerolog.NewSlogHandler(zerolog.New(w).Level(level).With().Timestamp().Logger())), nil
}

// open starts the runtime the flags describe, once check has accepted them.
func (f *setupFlags) open(extra ...musepi.Option) (*setup, error) {
	opts := append([]musepi.Option{musepi.WithLogger(f.log)}, extra...)
	if f.historyDir != "" {
		opts = append(opts, musepi.WithHistoryDir(f.historyPath()))
	}
	if f.historySync != "" {
		opts = append(opts, musepi.WithHistorySync(f.sync))
	}
	var su *setup
	var err error
	switch {
	case f.cluster:
		su, err = f.openCluster(extra)
	case f.config != "":
		su, err = openConfig(f.config, opts, f.historyDir != "")
	case f.provider != "":
		su, err = f.openProvider(opts)
	default:
		su, err = openDemo(opts, f.fast)
	}
	if err == nil && f.historyDir != "" {
		su.historyDir = f.historyPath() // the flag overrides the file's history_dir
	}
	return su, err
}

// joinTimeout bounds joining a cluster: connecting to its database and
// becoming a member.
const joinTimeout = 30 * time.Second

// openCluster joins the cluster of --config's [cluster] table as a client
// member, which hosts no sessions: its sessions are hosted by the nodes.
func (f *setupFlags) openCluster(extra []musepi.Option) (*setup, error) {
	cfg, err := clustercfg.Load(f.config)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
	defer cancel()
	rt, err := cfg.Join(ctx, true, "", f.log, extra...)
	if err != nil {
		return nil, err
	}
	return &setup{rt: rt, model: cfg.DefaultModel, models: configModels(cfg.Config), shutdown: rt.Shutdown}, nil
}

// providerKind is a provider --provider names.
type providerKind struct {
	name   string // the provider's name in the runtime
	keyEnv string // the default --api-key-env
	api    string // pi's name of its API
	new    func(baseURL string) provider.Provider
}

// providers are the providers --provider names, by name.
var providers = map[string]providerKind{
	"openai": {"openai", "OPENAI_API_KEY", "openai-completions",
		func(u string) provider.Provider { return openai.New(openai.Config{BaseURL: u, API: "chat"}) }},
	"openai-responses": {"openai", "OPENAI_API_KEY", "openai-responses",
		func(u string) provider.Provider { return openai.New(openai.Config{BaseURL: u, API: "responses"}) }},
	"anthropic": {"anthropic", "ANTHROPIC_API_KEY", "anthropic-messages",
		func(u string) provider.Provider { return anthropic.New(anthropic.Config{BaseURL: u}) }},
}

// providerNames lists the names --provider takes: "a, b or c".
func providerNames() string {
	names := slices.Sorted(maps.Keys(providers))
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// openProvider starts a runtime with the one provider of --provider.
func (f *setupFlags) openProvider(opts []musepi.Option) (*setup, error) {
	kind := providers[f.provider]
	keyEnv := cmp.Or(f.keyEnv, kind.keyEnv)
	// Also with --base-url: a server that needs no key takes any value,
	// and an empty one must not let the SDK's own variable fill in.
	const hint = "set it to the API key, any value for a server that needs none, or name another variable with --api-key-env"
	switch key, ok := os.LookupEnv(keyEnv); {
	case !ok:
		return nil, fmt.Errorf("--provider %s: environment variable %s is not set (%s)", f.provider, keyEnv, hint)
	case strings.TrimSpace(key) == "":
		return nil, fmt.Errorf("--provider %s: environment variable %s is empty (%s)", f.provider, keyEnv, hint)
	}
	opts = append(opts, musepi.WithProvider(kind.name, kind.new(f.baseURL), musepi.Credential{Name: keyEnv, APIKeyEnv: keyEnv}))
	rt, err := musepi.NewRuntime(opts...)
	if err != nil {
		return nil, err
	}
	models := []rpc.Model{{Provider: kind.name, ID: f.model, API: kind.api, BaseURL: f.baseURL, Reasoning: true}}
	return &setup{rt: rt, model: kind.name + "/" + f.model, models: models, shutdown: rt.Shutdown}, nil
}

// openDemo starts the fault-injecting server on loopback with the demo
// scenario (demo_scenario.json; the scenarios are described in demo.go) and
// a runtime whose providers point at it: "tour" with two API keys and the
// fallback chain tour/m1 → tour/m2 for the default role, "outage" and
// "give-up" with one key each. fast scales every delay down 1000×.
func openDemo(opts []musepi.Option, fast bool) (*setup, error) {
	sc, err := fakellm.ParseScenario(demoScenarioJSON)
	if err != nil {
		return nil, fmt.Errorf("demo scenario: %w", err)
	}
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"tour/m2"}}
	if fast {
		speedUp(sc, &settings)
	}
	srv := fakellm.New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo server: %w", err)
	}
	llm := func() provider.Provider { return openai.New(openai.Config{BaseURL: base + "/v1"}) }
	opts = append(opts,
		musepi.WithProvider("tour", llm(),
			musepi.Credential{Name: "key A", APIKey: "tour-key-a"}, musepi.Credential{Name: "key B", APIKey: "tour-key-b"}),
		musepi.WithProvider("outage", llm(), musepi.Credential{Name: "outage", APIKey: "outage-key"}),
		musepi.WithProvider("give-up", llm(), musepi.Credential{Name: "give-up", APIKey: "give-up-key"}),
		musepi.WithRetrySettings(settings),
	)
	rt, err := musepi.NewRuntime(opts...)
	if err != nil {
		srv.Close()
		return nil, err
	}
	demoModel := func(prov, id string) rpc.Model {
		return rpc.Model{Provider: prov, ID: id, API: "openai-completions", BaseURL: base + "/v1", Reasoning: true}
	}
	models := []rpc.Model{demoModel("tour", "m1"), demoModel("tour", "m2"), demoModel("outage", "m1"), demoModel("give-up", "m1")}
	return &setup{rt: rt, model: "tour/m1", models: models, demo: true, shutdown: func(ctx context.Context) error {
		err := rt.Shutdown(ctx)
		srv.Close()
		return err
	}}, nil
}

// speedUp scales the demo's time down 1000×, for tests: retry-after hints,
// the base and maximum delays (so a hint beyond the maximum still fails
// fast) become a thousandth; streamed chunks come without pauses.
func speedUp(sc *fakellm.Scenario, settings *retry.Settings) {
	settings.BaseDelay /= 1000
	settings.MaxDelay /= 1000
	for i := range sc.Rules {
		r := &sc.Rules[i].Respond
		r.ChunkDelayMs = 0
		if v, ok := r.Headers["retry-after"]; ok {
			if secs, err := strconv.ParseFloat(v, 64); err == nil {
				r.Headers["retry-after"] = strconv.FormatFloat(secs/1000, 'f', -1, 64)
			}
		}
	}
}

// historyPath is --history-dir with "~/" expanded ("" when not set).
func (f *setupFlags) historyPath() string {
	if f.historyDir == "" {
		return ""
	}
	return expandHome(f.historyDir)
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return home + "/" + rest
		}
	}
	return p
}
