package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/config"
	"github.com/musepi/musepi/config/clustercfg"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/rpc"
)

// openConfig starts the runtime a configuration file describes; sessions
// use its default model.
func openConfig(path string, opts []musepi.Option, historyFlag bool) (*setup, error) {
	cfg, err := clustercfg.Load(path)
	if err != nil {
		return nil, err
	}
	if historyFlag && cfg.HistoryDatabase != "" {
		return nil, fmt.Errorf("--history-dir: %s keeps histories in history_database; drop one of them", path)
	}
	rt, err := cfg.NewRuntime(opts...)
	if err != nil {
		return nil, err
	}
	dir, _ := cfg.HistoryPath() // Load checked it
	return &setup{rt: rt, model: cfg.DefaultModel, models: configModels(cfg.Config), historyDir: dir, shutdown: rt.Shutdown}, nil
}

// apiNames are pi's names of the provider kinds' APIs.
var apiNames = map[config.Kind]string{
	config.KindOpenAI:          "openai-completions",
	config.KindOpenAIResponses: "openai-responses",
	config.KindAnthropic:       "anthropic-messages",
}

// configModels are the models a configuration offers: each provider's
// "models" list, or for a provider without one, the models the default
// model and the fallback chains name on it.
func configModels(cfg *config.Config) []rpc.Model {
	named := []string{cfg.DefaultModel}
	for _, role := range slices.Sorted(maps.Keys(cfg.Retry.FallbackChains)) {
		named = append(named, cfg.Retry.FallbackChains[role]...)
	}
	var out []rpc.Model
	for _, name := range cfg.ProviderNames() {
		p := cfg.Providers[name]
		ids := p.Models
		if len(ids) == 0 {
			for _, sel := range named {
				if prov, id, ok := retry.SplitModel(sel); ok && prov == name && !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
		for _, id := range ids {
			pr := p.Prices[id]
			out = append(out, rpc.Model{Provider: name, ID: id, API: apiNames[p.Kind], BaseURL: p.BaseURL,
				Reasoning: true, MaxTokens: p.MaxTokens,
				Cost: rpc.Cost{Input: pr.Input, Output: pr.Output, CacheRead: pr.CacheRead, CacheWrite: pr.CacheWrite}})
		}
	}
	return out
}
