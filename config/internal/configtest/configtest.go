// Package configtest holds the configuration files that the tests of
// package config and of config/clustercfg build on.
package configtest

// KeyEnv is the environment variable holding OpenAIProvider's key.
const KeyEnv = "MUSEPI_TEST_KEY"

// OpenAIProvider is a valid provider table the cases build on.
const OpenAIProvider = `
[providers.openai]
kind = "openai"
models = ["gpt-4o", "gpt-4o-mini"]
  [[providers.openai.credentials]]
  name = "main"
  api_key_env = "MUSEPI_TEST_KEY"
`

// Doc assembles a file: top-level keys (a default model when ""), then the
// providers (OpenAIProvider when "", none when "-"), then the rest.
func Doc(top, providers, rest string) string {
	if top == "" {
		top = `default_model = "openai/gpt-4o"`
	}
	switch providers {
	case "":
		providers = OpenAIProvider
	case "-":
		providers = ""
	}
	return top + "\n" + providers + "\n" + rest + "\n"
}
