// Package config reads MusePi's configuration file: a TOML file naming the
// providers (with the environment variables that hold their API keys), the
// default model, the `retry` settings group of the auto-retry policy, and
// the runtime's other options. README.md in this directory documents every
// key.
//
//	cfg, err := config.Load("musepi.toml") // strict: a complete, valid config or an error
//	rt, err := cfg.NewRuntime(musepi.WithLogger(log))
//	s, err := rt.NewSession(ctx, musepi.WithModel(cfg.DefaultModel))
//
// Loading is strict and all-or-nothing. Unknown keys, values of the wrong
// type and invalid values are errors; Parse, Load and Validate report every
// problem they find (not just the first), one per line, each naming its key
// ("retry.max_retries: must be 0 or more, got -1"), as an *Error.
//
// API keys never come from the file: each credential names an environment
// variable, and validation requires that variable to be set and non-empty.
// Validation therefore depends on the environment, and `musepi config check`
// reports a missing variable like any other error. RuntimeOptions reads the
// variables again when it builds the runtime; the Config holds no secrets.
//
// The keys whose runtime needs the cluster packages, the [cluster] table
// and history_database, are read by package config/clustercfg, through an
// Extension; Parse and Load report them as unknown keys. Package config
// links no database driver and no cluster transport.
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/plaintext"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/anthropic"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/retry"
)

// Config is a configuration file. Parse and Load return it validated;
// fields changed afterwards are checked again by Validate, which
// RuntimeOptions calls.
type Config struct {
	// File is the absolute path Load read; "" after Parse. A relative
	// history_dir or TLS file is resolved against its directory.
	File string
	// DefaultModel ("default_model") is the "provider/model" new sessions
	// use. Required.
	DefaultModel string
	// AutoRedeem ("auto_redeem") lets a usage limit spend a credential's
	// banked reset when no sibling credential is free. Default false.
	AutoRedeem bool
	// Pacing ("pacing") paces turns against their keys' rate limits:
	// configured ones (rpm, tpm, input_tpm, output_tpm) and those the
	// provider's responses announce. Default true (see musepi.WithPacing).
	Pacing bool
	// PacingStickyWait ("pacing_sticky_wait_ms") is how much sooner
	// another key must take a paced turn before it moves there from the
	// key its session last used (musepi.WithPacingStickyWait). Parse sets
	// the default, 2 s, when the key is left out; 0 moves whenever another
	// key is sooner.
	PacingStickyWait time.Duration
	// HistoryDir ("history_dir") is where session histories are kept, as
	// written in the file ("" keeps them in memory); see HistoryPath.
	HistoryDir string
	// HistorySync ("history_sync") is when history files are synced to
	// disk: "turn" (the default when empty), "entry" or "none"; see
	// musepi.WithHistorySync.
	HistorySync string
	// RequestTimeout ("request_timeout_ms") bounds each LLM call, from
	// sending the request to the end of the stream. Default 0: no limit.
	RequestTimeout time.Duration
	// StreamIdleTimeout ("stream_idle_timeout_ms") ends a stream that sends
	// nothing for this long as a transient "stream stalled" error. Parse
	// sets musepi.DefaultStreamIdleTimeout (120 s) when the key is left
	// out; 0 turns the watchdog off.
	StreamIdleTimeout time.Duration
	// PassivateAfter ("passivate_after_ms") lets a session waiting out a
	// backoff at least this long leave its actors while it waits. Parse
	// sets musepi.DefaultPassivateAfter (30 s) when the key is left out; 0
	// turns passivation off.
	PassivateAfter time.Duration
	// MaxResponseBytes ("max_response_bytes") bounds the output one turn may
	// stream; more ends the turn with an error that is not retried. Parse
	// sets musepi.DefaultMaxResponseBytes (4 MiB) when the key is left out;
	// 0 means no bound.
	MaxResponseBytes int
	// Providers ("providers.NAME") by the name used in model selectors.
	Providers map[string]Provider
	// Retry ("retry") is the retry settings group; keys left out keep the
	// values of retry.DefaultSettings().
	Retry retry.Settings
	// Overload ("overload") is the overload limiter's table
	// (musepi.WithOverloadLimiter); off unless Overload.Enabled. On a node
	// of a cluster, the node's own limiter.
	Overload Overload

	// ext reads and checks the keys package config does not define (nil:
	// none); Validate and RuntimeOptions check them again.
	ext Extension
}

// Extension reads and checks the top-level keys of the file that package
// config does not define, for a package that configures more than a
// runtime (config/clustercfg reads the [cluster] table and
// history_database with one). ParseWith, LoadWith and LoadExtension take
// one; Parse and Load report those keys as unknown.
type Extension interface {
	// Decode reads the extension's keys from the file's top-level table,
	// before the keys nobody read are reported as unknown. Settings left
	// out keep their defaults; values are not validated here.
	Decode(t *Table)
	// Check validates what Decode read, with c the rest of the file
	// (decoded, and checked apart); Validate and RuntimeOptions call it
	// again, for the fields changed since.
	Check(c *Config) []Problem
}

// Overload is the [overload] table: the overload limiter, an adaptive
// concurrency limit per model (package overload).
type Overload struct {
	// Enabled ("enabled") turns the limiter on. Default false.
	Enabled bool
	// Settings tune it: "max", "initial", "backoff", "tolerance",
	// "probe_after_ms", "window" and "max_queue_wait_ms" are its fields;
	// a key left out, or 0, keeps its default.
	Settings overload.Settings
}

// Kind is the API a provider speaks.
type Kind string

// The provider kinds.
const (
	KindOpenAI          Kind = "openai"           // OpenAI Chat Completions (or any compatible server)
	KindOpenAIResponses Kind = "openai-responses" // OpenAI Responses API
	KindAnthropic       Kind = "anthropic"        // Anthropic Messages API
)

// DefaultOpenAIBaseURL is the base URL of the openai kinds when base_url
// is not set. The OPENAI_BASE_URL environment variable has no effect
// (package openai reads none): the file says where requests go.
const DefaultOpenAIBaseURL = openai.DefaultBaseURL

// Provider is one "providers.NAME" table.
type Provider struct {
	// Kind ("kind") is the API the provider speaks. Required.
	Kind Kind
	// BaseURL ("base_url") is the API's base URL; "" means the public API
	// (DefaultOpenAIBaseURL, or https://api.anthropic.com/).
	BaseURL string
	// Models ("models") lists the provider's models that may be used; when
	// not empty, default_model and fallback chain entries naming this
	// provider must use one of them.
	Models []string
	// MaxTokens ("max_tokens") caps the output tokens of a turn; 0 leaves
	// the provider's default (the server's for openai, 4096 for anthropic).
	MaxTokens int64
	// RateLimits ("rpm", "tpm", "input_tpm", "output_tpm") are the
	// per-minute limits of the provider's credentials that set none of
	// their own; they pace turns until the provider's responses announce
	// the limits. Default none.
	RateLimits musepi.RateLimits
	// Prices ("prices.MODEL") are model prices in dollars per million
	// tokens, by model id; the RPC reports the cost of a priced model's
	// usage. A model without a price costs 0.
	Prices map[string]Price
	// Credentials ("credentials") are the provider's API keys; sessions
	// are spread over them and switch on a usage limit. At least one is
	// required.
	Credentials []Credential
}

// Price is one "[providers.NAME.prices.MODEL]" table: dollars per million
// tokens of each kind; keys left out are 0.
type Price struct {
	Input      float64 // "input"
	Output     float64 // "output"
	CacheRead  float64 // "cache_read"
	CacheWrite float64 // "cache_write"
}

// Credential is one "[[providers.NAME.credentials]]" table.
type Credential struct {
	// Name ("name") identifies the credential in events and logs; unique
	// within the provider. Required.
	Name string
	// APIKeyEnv ("api_key_env") is the environment variable holding the
	// key. Required; the variable must be set and non-empty.
	APIKeyEnv string
	// BankedResets ("banked_resets") is how many usage-limit resets the
	// credential may spend when auto_redeem is on. Default 0.
	BankedResets int
	// RateLimits ("rpm", "tpm", "input_tpm", "output_tpm") are the
	// credential's own per-minute limits. Default: the provider's.
	RateLimits musepi.RateLimits
}

// Parse decodes and validates a configuration. Its error is an *Error
// listing every problem.
func Parse(data []byte) (*Config, error) { return ParseWith(data, nil) }

// Load reads, decodes and validates the configuration file at path. Every
// line of its error starts with path.
func Load(path string) (*Config, error) { return LoadWith(path, nil) }

// ParseWith is Parse with ext reading and checking the keys package config
// does not define (nil: none).
func ParseWith(data []byte, ext Extension) (*Config, error) {
	return parse(data, "", ext, (*Config).check)
}

// LoadWith is Load with ext reading and checking the keys package config
// does not define (nil: none).
func LoadWith(path string, ext Extension) (*Config, error) {
	return load(path, ext, (*Config).check)
}

// LoadExtension reads and decodes the configuration file at path as
// LoadWith does, but validates only ext's keys: for the programs that
// need only those (musepi cluster status reads the [cluster] table and
// calls no provider, so it needs neither the providers' checks nor the
// environment variables holding their keys). The Config's Validate and
// RuntimeOptions check the whole file.
func LoadExtension(path string, ext Extension) (*Config, error) {
	return load(path, ext, (*Config).checkExtension)
}

// checker validates a decoded configuration and returns what it read.
type checker func(*Config) (*loaded, []Problem)

// load reads the file at path, decodes it with ext and validates it with
// check.
func load(path string, ext Extension, check checker) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *fs.PathError: "open PATH: ..."
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := parse(data, abs, ext, check)
	if e, ok := err.(*Error); ok {
		e.File = path
	}
	return c, err
}

// parse decodes data (the file at file, "" for none) with ext and
// validates it with check.
func parse(data []byte, file string, ext Extension, check checker) (*Config, error) {
	root, probs := parseTOML(data)
	if probs != nil {
		return nil, newError(file, probs)
	}
	c, probs := decode(root, ext)
	c.File = file
	_, checked := check(c)
	probs = append(probs, withoutFollowUps(checked, probs)...)
	if err := newError(file, probs); err != nil {
		return nil, err
	}
	return c, nil
}

// withoutFollowUps drops the validation problems on keys that already
// failed to decode (a missing kind is no news after a kind of the wrong
// type), or on arrays one of whose elements did.
func withoutFollowUps(probs, decodeProbs []Problem) []Problem {
	var out []Problem
	for _, p := range probs {
		followUp := false
		for _, dp := range decodeProbs {
			if p.Key == dp.Key || strings.HasPrefix(p.Key, dp.Key+".") || strings.HasPrefix(p.Key, dp.Key+"[") ||
				strings.HasPrefix(dp.Key, p.Key+"[") { // an array with a bad element was not read at all
				followUp = true
				break
			}
		}
		if !followUp {
			out = append(out, p)
		}
	}
	return out
}

// Validate checks the configuration, the environment variables named by
// its credentials included. Its error is an *Error listing every problem.
func (c *Config) Validate() error {
	_, probs := c.check()
	return newError(c.File, probs)
}

// ProviderNames returns the configured provider names, sorted.
func (c *Config) ProviderNames() []string {
	names := make([]string, 0, len(c.Providers))
	for n := range c.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// HistoryPath returns the directory history_dir names ("" when it is
// empty: history in memory), resolved as the file's other paths are: a
// leading "~" or "~/" is the home directory; a relative path is taken
// relative to the directory of the configuration file (of the working
// directory after Parse).
func (c *Config) HistoryPath() (string, error) {
	if c.HistoryDir == "" {
		return "", nil
	}
	return c.Resolve(c.HistoryDir)
}

// Resolve resolves a path written in the file (history_dir, an
// Extension's files) as HistoryPath says.
func (c *Config) Resolve(p string) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") || strings.HasPrefix(p, "~"+string(filepath.Separator)) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot expand %q: %v", "~", err)
		}
		p = filepath.Join(home, p[1:])
	} else if strings.HasPrefix(p, "~") {
		return "", fmt.Errorf("only a leading \"~\" or \"~/\" is expanded (not ~user), got %q", p)
	}
	if !filepath.IsAbs(p) && c.File != "" {
		p = filepath.Join(filepath.Dir(c.File), p)
	}
	return filepath.Clean(p), nil
}

// RuntimeOptions returns the musepi.NewRuntime options the configuration
// describes: one WithProvider per provider (built with its kind, base URL,
// max_tokens and the request timeout, and its credentials' keys read from
// the environment now), WithRetrySettings, WithAutoRedeem,
// WithStreamIdleTimeout, WithPassivateAfter, WithMaxResponseBytes and, when
// history_dir is set, WithHistoryDir. extra follows them, so it can add
// options (WithLogger, WithTools...) or override the file's.
func (c *Config) RuntimeOptions(extra ...musepi.Option) ([]musepi.Option, error) {
	ld, probs := c.check()
	if err := newError(c.File, probs); err != nil {
		return nil, err
	}
	var opts []musepi.Option
	for _, name := range c.ProviderNames() {
		p := c.Providers[name]
		creds := make([]musepi.Credential, len(p.Credentials))
		for i, cr := range p.Credentials {
			creds[i] = musepi.Credential{Name: cr.Name, APIKey: ld.keys[name][i], BankedResets: cr.BankedResets,
				RateLimits: cr.RateLimits}
		}
		opts = append(opts, musepi.WithProvider(name, p.build(c.RequestTimeout), creds...))
		if p.RateLimits.Any() {
			opts = append(opts, musepi.WithRateLimits(name, p.RateLimits))
		}
	}
	settings := c.Retry
	settings.FallbackChains = cloneChains(c.Retry.FallbackChains)
	sticky := c.PacingStickyWait
	if sticky == 0 { // the file's 0 moves at once; the option's 0 is its default
		sticky = -1
	}
	opts = append(opts, musepi.WithRetrySettings(settings), musepi.WithAutoRedeem(c.AutoRedeem), musepi.WithPacing(c.Pacing),
		musepi.WithPacingStickyWait(sticky),
		musepi.WithStreamIdleTimeout(c.StreamIdleTimeout), musepi.WithPassivateAfter(c.PassivateAfter),
		musepi.WithMaxResponseBytes(c.MaxResponseBytes))
	if c.Overload.Enabled {
		opts = append(opts, musepi.WithOverloadLimiter(c.Overload.Settings))
	}
	dir, _ := c.HistoryPath() // checked above
	if dir != "" {
		opts = append(opts, musepi.WithHistoryDir(dir))
	}
	if c.HistorySync != "" {
		policy, _ := history.ParseSync(c.HistorySync) // checked above
		opts = append(opts, musepi.WithHistorySync(policy))
	}
	return append(opts, extra...), nil
}

// cloneChains is a copy of chains (nil: nil), which the runtime may keep.
func cloneChains(chains map[string][]string) map[string][]string {
	if chains == nil {
		return nil
	}
	out := make(map[string][]string, len(chains))
	for role, chain := range chains {
		out[role] = slices.Clone(chain)
	}
	return out
}

// NewRuntime starts a runtime from the configuration and extra (see
// RuntimeOptions). Sessions still name their model:
// rt.NewSession(ctx, musepi.WithModel(cfg.DefaultModel)).
func (c *Config) NewRuntime(extra ...musepi.Option) (*musepi.Runtime, error) {
	opts, err := c.RuntimeOptions(extra...)
	if err != nil {
		return nil, err
	}
	return musepi.NewRuntime(opts...)
}

// build returns the provider p describes.
func (p Provider) build(timeout time.Duration) provider.Provider {
	switch p.Kind {
	case KindAnthropic:
		return anthropic.New(anthropic.Config{BaseURL: p.BaseURL, RequestTimeout: timeout, MaxTokens: p.MaxTokens})
	case KindOpenAIResponses:
		return openai.New(openai.Config{BaseURL: p.BaseURL, API: openai.APIResponses, RequestTimeout: timeout, MaxTokens: p.MaxTokens})
	default:
		return openai.New(openai.Config{BaseURL: p.BaseURL, API: openai.APIChat, RequestTimeout: timeout, MaxTokens: p.MaxTokens})
	}
}

var (
	providerName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// CheckEnvName checks the name of an environment variable that the file
// names (api_key_env, an Extension's): letters, digits and '_', not
// starting with a digit.
func CheckEnvName(name string) error {
	if !envName.MatchString(name) {
		return fmt.Errorf("%q is not an environment variable name (letters, digits and '_', not starting with a digit)", name)
	}
	return nil
}

// loaded is what check reads while it validates: each credential's key
// by provider name and credential index.
type loaded struct {
	keys map[string][]string
}

// check validates c and returns, when it is valid, what it read.
func (c *Config) check() (*loaded, []Problem) {
	v := newValidator(c)
	keys := v.loaded.keys

	if c.DefaultModel == "" {
		v.add("default_model", `required ("provider/model")`)
	} else {
		v.model("default_model", c.DefaultModel)
	}
	if c.RequestTimeout < 0 {
		v.add("request_timeout_ms", "must be 0 or more, got %d", c.RequestTimeout.Milliseconds())
	}
	if c.PassivateAfter < 0 {
		v.add("passivate_after_ms", "must be 0 or more, got %d", c.PassivateAfter.Milliseconds())
	}
	if c.PacingStickyWait < 0 {
		v.add("pacing_sticky_wait_ms", "must be 0 or more, got %d", c.PacingStickyWait.Milliseconds())
	}
	if c.StreamIdleTimeout < 0 {
		v.add("stream_idle_timeout_ms", "must be 0 or more, got %d", c.StreamIdleTimeout.Milliseconds())
	}
	if c.MaxResponseBytes < 0 {
		v.add("max_response_bytes", "must be 0 or more, got %d", c.MaxResponseBytes)
	}
	if _, err := c.HistoryPath(); err != nil {
		v.add("history_dir", "%v", err)
	}
	if c.HistorySync != "" {
		if _, err := history.ParseSync(c.HistorySync); err != nil {
			v.add("history_sync", `want "turn", "entry" or "none", got %q`, c.HistorySync)
		}
	}
	if len(c.Providers) == 0 {
		v.add("providers", "at least one provider is required (a [providers.NAME] table)")
	}
	for _, name := range c.ProviderNames() {
		keys[name] = v.provider(name, c.Providers[name])
	}
	v.retry(c.Retry)
	v.overload(c.Overload.Settings, c.Retry.FallbackChains)
	v.extension()
	return v.loaded, v.probs
}

// checkExtension validates c's Extension's keys only: LoadExtension's
// check.
func (c *Config) checkExtension() (*loaded, []Problem) {
	v := newValidator(c)
	v.extension()
	return v.loaded, v.probs
}

// extension adds the problems of the keys of c's Extension.
func (v *validator) extension() {
	if v.c.ext != nil {
		v.probs = append(v.probs, v.c.ext.Check(v.c)...)
	}
}

// validator collects the problems of c, and in loaded what its checks
// read.
type validator struct {
	c      *Config
	loaded *loaded
	probs  []Problem
}

// newValidator is a validator of c, with nothing read yet.
func newValidator(c *Config) *validator {
	return &validator{c: c, loaded: &loaded{keys: map[string][]string{}}}
}

func (v *validator) add(key, format string, args ...any) {
	v.probs = append(v.probs, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
}

// plain reports whether s (what, at key) is printable text, adding the
// problem when it is not.
func (v *validator) plain(key, what, s string) bool {
	if err := plaintext.Check(what, s); err != nil {
		v.add(key, "%v", err)
		return false
	}
	return true
}

// model checks a "provider/model" selector against the providers.
func (v *validator) model(key, selector string) {
	if !v.plain(key, "model", selector) {
		return
	}
	prov, model, ok := retry.SplitModel(selector)
	if !ok {
		v.add(key, `want "provider/model", got %q`, selector)
		return
	}
	p, ok := v.c.Providers[prov]
	if !ok {
		have := "no providers are configured"
		if names := v.c.ProviderNames(); len(names) > 0 {
			have = "configured: " + strings.Join(names, ", ")
		}
		v.add(key, "provider %q is not configured (%s)", prov, have)
		return
	}
	if len(p.Models) > 0 && !slices.Contains(p.Models, model) {
		v.add(key, "model %q is not in %s (%s)", model, joinKey(joinKey("providers", prov), "models"), strings.Join(p.Models, ", "))
	}
}

// provider checks one provider and returns its credentials' keys.
func (v *validator) provider(name string, p Provider) []string {
	at := joinKey("providers", name)
	if !providerName.MatchString(name) {
		v.add(at, "provider name must be letters, digits, '-' or '_'")
	}
	switch p.Kind {
	case KindOpenAI, KindOpenAIResponses, KindAnthropic:
	case "":
		v.add(at+".kind", `required ("openai", "openai-responses" or "anthropic")`)
	default:
		v.add(at+".kind", `unknown kind %q (want "openai", "openai-responses" or "anthropic")`, p.Kind)
	}
	if p.BaseURL != "" {
		if err := CheckBaseURL(p.BaseURL); err != nil {
			v.add(at+".base_url", "%v", err)
		}
	}
	v.models(at, p)
	if p.MaxTokens < 0 {
		v.add(at+".max_tokens", "must be 0 or more, got %d", p.MaxTokens)
	}
	if len(p.Credentials) == 0 {
		v.add(at+".credentials", "at least one credential is required (a [[%s.credentials]] table with name and api_key_env)", at)
	}
	return v.credentials(at, p.Credentials)
}

// models checks the models and prices of the provider at key at.
func (v *validator) models(at string, p Provider) {
	seenModel := map[string]int{}
	for i, m := range p.Models {
		key := fmt.Sprintf("%s.models[%d]", at, i)
		switch j, dup := seenModel[m]; {
		case strings.TrimSpace(m) == "":
			v.add(key, "empty model name")
		case strings.TrimSpace(m) != m:
			v.add(key, "model name %q has leading or trailing spaces", m)
		case !v.plain(key, "model name", m):
		case dup:
			v.add(key, "duplicate model %q (also models[%d])", m, j)
		default:
			seenModel[m] = i
		}
	}
	for model, pr := range p.Prices {
		for key, n := range map[string]float64{"input": pr.Input, "output": pr.Output, "cache_read": pr.CacheRead, "cache_write": pr.CacheWrite} {
			if n < 0 {
				v.add(at+".prices."+model+"."+key, "must be 0 or more, got %g", n)
			}
		}
	}
}

// credentials checks the credentials of the provider at key at and
// returns their keys, read from the environment ("" where one is missing).
func (v *validator) credentials(at string, creds []Credential) []string {
	keys := make([]string, len(creds))
	names := map[string]int{}
	envs := map[string]int{}
	for i, cr := range creds {
		ck := fmt.Sprintf("%s.credentials[%d]", at, i)
		switch j, dup := names[cr.Name]; {
		case strings.TrimSpace(cr.Name) == "":
			v.add(ck+".name", "required (a non-empty name)")
		case !v.plain(ck+".name", "credential name", cr.Name):
		case dup:
			v.add(ck+".name", "duplicate name %q (also credentials[%d])", cr.Name, j)
		default:
			names[cr.Name] = i
		}
		if cr.BankedResets < 0 {
			v.add(ck+".banked_resets", "must be 0 or more, got %d", cr.BankedResets)
		}
		ek := ck + ".api_key_env"
		nameErr := CheckEnvName(cr.APIKeyEnv)
		switch j, dup := envs[cr.APIKeyEnv]; {
		case cr.APIKeyEnv == "":
			v.add(ek, "required (the name of the environment variable holding the API key)")
		case nameErr != nil:
			v.add(ek, "%v", nameErr)
		case dup:
			v.add(ek, "environment variable %s is already used by credentials[%d]", cr.APIKeyEnv, j)
		default:
			envs[cr.APIKeyEnv] = i
			keys[i] = v.apiKey(ek, cr.APIKeyEnv)
		}
	}
	return keys
}

// apiKey reads the API key in the environment variable env, for the
// credential's key ek; it says why when there is none.
func (v *validator) apiKey(ek, env string) string {
	val, ok := os.LookupEnv(env)
	val = strings.TrimSpace(val)
	switch {
	case !ok:
		v.add(ek, "environment variable %s is not set", env)
	case val == "":
		v.add(ek, "environment variable %s is empty", env)
	case strings.ContainsFunc(val, unicode.IsControl):
		// Never the value: it is a secret.
		v.add(ek, "environment variable %s holds a newline or other control character inside the key", env)
	default:
		return val
	}
	return ""
}

// retry checks the retry settings group. The checks are those of
// retry.Settings.Validate, made for every field rather than the first bad
// one, plus the chains' providers; Validate itself runs last as a safety
// net.
func (v *validator) retry(s retry.Settings) {
	before := len(v.probs)
	if s.MaxRetries < 0 {
		v.add("retry.max_retries", "must be 0 or more, got %d", s.MaxRetries)
	}
	if s.BaseDelay < 0 {
		v.add("retry.base_delay_ms", "must be 0 or more, got %d", s.BaseDelay.Milliseconds())
	}
	if s.FallbackRevertPolicy != retry.RevertCooldownExpiry && s.FallbackRevertPolicy != retry.RevertNever {
		v.add("retry.fallback_revert_policy", "unknown policy %q (want %q or %q)",
			s.FallbackRevertPolicy, retry.RevertCooldownExpiry, retry.RevertNever)
	}
	for _, p := range s.Budget.Problems() {
		v.add(snakeField(p.Field), "%s", p.Problem)
	}
	roles := make([]string, 0, len(s.FallbackChains))
	for role := range s.FallbackChains {
		roles = append(roles, role)
	}
	sort.Strings(roles)
	for _, role := range roles {
		key := joinKey("retry.fallback_chains", role)
		if strings.TrimSpace(role) == "" {
			v.add(key, "empty role name")
			continue
		}
		for i, entry := range s.FallbackChains[role] {
			v.model(fmt.Sprintf("%s[%d]", key, i), entry)
		}
	}
	if len(v.probs) > before {
		return
	}
	if err := s.Validate(); err != nil {
		if se, ok := err.(*retry.SettingsError); ok {
			v.add(snakeField(se.Field), "%s", se.Problem)
		} else {
			v.add("retry", "%v", err)
		}
	}
}

// overload checks the [overload] table's values, whether or not the
// limiter is on: each is 0 (its default) or in its range, and each role
// of high_priority_fallback has a fallback chain (chains).
func (v *validator) overload(s overload.Settings, chains map[string][]string) {
	for i, role := range s.HighPriorityFallback {
		if len(chains[role]) == 0 {
			v.add(fmt.Sprintf("overload.high_priority_fallback[%d]", i), "role %q has no fallback chain (retry.fallback_chains.%s)", role, role)
		}
	}
	if s.Max < 0 {
		v.add("overload.max", "must be 0 (the default, %d) or more, got %d", overload.DefaultMax, s.Max)
	}
	if s.Initial < 0 {
		v.add("overload.initial", "must be 0 (the default, %d) or more, got %d", overload.DefaultInitial, s.Initial)
	}
	if s.Backoff < 0 || s.Backoff >= 1 {
		v.add("overload.backoff", "must be above 0 and below 1 (0: the default, %g), got %g", overload.DefaultBackoff, s.Backoff)
	}
	if s.Tolerance != 0 && s.Tolerance <= 1 {
		v.add("overload.tolerance", "must be above 1 (0: the default, %g), got %g", overload.DefaultTolerance, s.Tolerance)
	}
	if s.ProbeAfter < 0 {
		v.add("overload.probe_after_ms", "must be 0 (the default, %d) or more, got %d", overload.DefaultProbeAfter.Milliseconds(),
			s.ProbeAfter.Milliseconds())
	}
	if s.Window < 0 {
		v.add("overload.window", "must be 0 (the default, %d) or more, got %d", overload.DefaultWindow, s.Window)
	}
}

// snakeField turns a retry.SettingsError field ("retry.maxRetries",
// "retry.budget.maxTokens", "retry.fallbackChains.slow[2]") into the
// file's key ("retry.max_retries", "retry.budget.max_tokens",
// "retry.fallback_chains.slow[2]"); role names are kept as they are.
func snakeField(field string) string {
	group, rest, ok := strings.Cut(field, ".")
	if !ok {
		return field
	}
	name, tail := rest, ""
	if i := strings.IndexAny(rest, ".["); i >= 0 {
		name, tail = rest[:i], rest[i:]
	}
	if name == "budget" && strings.HasPrefix(tail, ".") {
		return group + "." + snakeField(rest)
	}
	return group + "." + snakeCase(name) + tail
}

// snakeCase turns "maxTokens" into "max_tokens".
func snakeCase(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
