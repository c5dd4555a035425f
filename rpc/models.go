package rpc

import "strings"

// Model describes one model a client may choose, in the terms of pi's
// Model type. Servers list the configured providers' models; a model
// missing from the list is described by its provider's API alone.
type Model struct {
	Provider string // configured provider name ("fake", "anthropic")
	ID       string // model id within the provider
	// API is pi's name of the wire API: "openai-completions",
	// "openai-responses" or "anthropic-messages".
	API     string
	BaseURL string
	// Reasoning says the model takes a thinking level.
	Reasoning bool
	// ContextWindow and MaxTokens are in tokens; 0 when not configured.
	ContextWindow int64
	MaxTokens     int64
	// Cost is the price in dollars per million tokens; zero when not configured.
	Cost Cost
}

// Cost is a model's price in dollars per million tokens.
type Cost struct {
	Input, Output, CacheRead, CacheWrite float64
}

// Selector is the model's "provider/model".
func (m Model) Selector() string { return m.Provider + "/" + m.ID }

// json is pi's Model.
func (m Model) json() map[string]any {
	return map[string]any{
		"id":        m.ID,
		"name":      m.ID,
		"api":       m.API,
		"provider":  m.Provider,
		"baseUrl":   m.BaseURL,
		"reasoning": m.Reasoning,
		"input":     []string{"text"},
		"cost": map[string]float64{
			"input": m.Cost.Input, "output": m.Cost.Output,
			"cacheRead": m.Cost.CacheRead, "cacheWrite": m.Cost.CacheWrite,
		},
		"contextWindow": m.ContextWindow,
		"maxTokens":     m.MaxTokens,
	}
}

// model describes provider/id: the listed model, else one built from
// another model of the same provider (its API and base URL), else a model
// known by name only.
func (s *Server) model(provider, id string) Model {
	var sibling *Model
	for i, m := range s.Models {
		if m.Provider == provider && m.ID == id {
			return m
		}
		if m.Provider == provider && sibling == nil {
			sibling = &s.Models[i]
		}
	}
	out := Model{Provider: provider, ID: id}
	if sibling != nil {
		out.API, out.BaseURL, out.Reasoning = sibling.API, sibling.BaseURL, sibling.Reasoning
	}
	return out
}

// modelOf describes a "provider/model" selector.
func (s *Server) modelOf(selector string) Model {
	prov, id, _ := strings.Cut(selector, "/")
	return s.model(prov, id)
}
