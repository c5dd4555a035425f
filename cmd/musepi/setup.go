package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/anthropic"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/rpc"
)

//go:embed demo_scenario.json
var demoScenario []byte

// setupFlags choose what a command runs against: a config file, one
// provider given by flags, or the built-in demo (a fault-injecting server on
// loopback, no API key needed).
type setupFlags struct {
	config     string
	provider   string
	baseURL    string
	model      string
	keyEnv     string
	historyDir string
	verbose    bool
}

func addSetupFlags(fs *flag.FlagSet) *setupFlags {
	f := &setupFlags{}
	fs.StringVar(&f.config, "config", "", "configuration file (TOML; see config/README.md)")
	fs.StringVar(&f.provider, "provider", "", `talk to one provider: "openai", "openai-responses" or "anthropic" (key from --api-key-env)`)
	fs.StringVar(&f.baseURL, "base-url", "", "base URL of that provider (default: the provider's public API)")
	fs.StringVar(&f.model, "model", "", "model id for --provider (e.g. gpt-4o-mini)")
	fs.StringVar(&f.keyEnv, "api-key-env", "", "environment variable holding the API key (default OPENAI_API_KEY or ANTHROPIC_API_KEY)")
	fs.StringVar(&f.historyDir, "history-dir", "", "keep session history in this directory (default: memory)")
	fs.BoolVar(&f.verbose, "v", false, "log runtime diagnostics to stderr")
	return f
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

func (f *setupFlags) logger() zerolog.Logger {
	level := zerolog.WarnLevel
	if f.verbose {
		level = zerolog.DebugLevel
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}).Level(level).With().Timestamp().Logger()
}

// open starts the runtime the flags describe.
func (f *setupFlags) open(extra ...musepi.Option) (*setup, error) {
	opts := append([]musepi.Option{musepi.WithLogger(f.logger())}, extra...)
	if f.historyDir != "" {
		opts = append(opts, musepi.WithHistoryDir(f.historyPath()))
	}
	var (
		su  *setup
		err error
	)
	switch {
	case f.config != "":
		su, err = openConfig(f.config, opts)
	case f.provider != "":
		su, err = f.openProvider(opts)
	default:
		su, err = openDemo(opts)
	}
	if err == nil && f.historyDir != "" {
		su.historyDir = f.historyPath() // the flag overrides the file's history_dir
	}
	return su, err
}

// openProvider starts a runtime with the one provider of --provider.
func (f *setupFlags) openProvider(opts []musepi.Option) (*setup, error) {
	if f.model == "" {
		return nil, errors.New("--model is required with --provider")
	}
	keyEnv := f.keyEnv
	var p provider.Provider
	name := "openai"
	switch f.provider {
	case "openai", "openai-responses":
		if keyEnv == "" {
			keyEnv = "OPENAI_API_KEY"
		}
		api := "chat"
		if f.provider == "openai-responses" {
			api = "responses"
		}
		p = openai.New(openai.Config{BaseURL: f.baseURL, API: api})
	case "anthropic":
		name = "anthropic"
		if keyEnv == "" {
			keyEnv = "ANTHROPIC_API_KEY"
		}
		p = anthropic.New(anthropic.Config{BaseURL: f.baseURL})
	default:
		return nil, fmt.Errorf("--provider %q: want openai, openai-responses or anthropic", f.provider)
	}
	key := os.Getenv(keyEnv)
	if key == "" && f.baseURL == "" {
		return nil, fmt.Errorf("--provider %s: environment variable %s is not set", f.provider, keyEnv)
	}
	opts = append(opts, musepi.WithProvider(name, p, musepi.Credential{Name: keyEnv, APIKey: key}))
	rt, err := musepi.NewRuntime(opts...)
	if err != nil {
		return nil, err
	}
	api := map[string]string{"openai": "openai-completions", "openai-responses": "openai-responses", "anthropic": "anthropic-messages"}[f.provider]
	models := []rpc.Model{{Provider: name, ID: f.model, API: api, BaseURL: f.baseURL, Reasoning: true}}
	return &setup{rt: rt, model: name + "/" + f.model, models: models, shutdown: rt.Shutdown}, nil
}

// openDemo starts the fault-injecting server on loopback with the demo
// scenario and a runtime whose providers point at it:
//   - "steady" (one key): a 429 with retry-after 2 s, then an overload, then an answer;
//   - "fake" (keys key-a and key-b): key-a is over its quota (credential
//     switch), m1 is overloaded on key-b (model fallback to m2), m2 answers.
func openDemo(opts []musepi.Option) (*setup, error) {
	sc, err := fakellm.ParseScenario(demoScenario)
	if err != nil {
		return nil, fmt.Errorf("demo scenario: %w", err)
	}
	srv := fakellm.New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo server: %w", err)
	}
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"fake/m2"}}
	opts = append(opts,
		musepi.WithProvider("steady", openai.New(openai.Config{BaseURL: base + "/v1"}), musepi.Credential{Name: "steady", APIKey: "key-steady"}),
		musepi.WithProvider("fake", openai.New(openai.Config{BaseURL: base + "/v1"}),
			musepi.Credential{Name: "key-a", APIKey: "key-a"}, musepi.Credential{Name: "key-b", APIKey: "key-b"}),
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
	models := []rpc.Model{demoModel("fake", "m1"), demoModel("fake", "m2"), demoModel("steady", "steady")}
	return &setup{rt: rt, model: "fake/m1", models: models, demo: true, shutdown: func(ctx context.Context) error {
		err := rt.Shutdown(ctx)
		srv.Close()
		return err
	}}, nil
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
