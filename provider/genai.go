package provider

// GenAIOther is the gen_ai.provider.name of a provider that does not say
// whose API it speaks: the OpenTelemetry semantic conventions' fallback.
const GenAIOther = "_OTHER"

// GenAINamer is a Provider that knows whose API it speaks. Its
// GenAIProviderName is that provider as OpenTelemetry's GenAI semantic
// conventions name it (gen_ai.provider.name: "openai", "anthropic",
// "aws.bedrock", ...), whatever name the provider is configured under.
type GenAINamer interface {
	Provider
	GenAIProviderName() string
}

// GenAIProviderName is p's gen_ai.provider.name: what p says if it is a
// GenAINamer saying something, else GenAIOther.
func GenAIProviderName(p Provider) string {
	if n, ok := p.(GenAINamer); ok {
		if name := n.GenAIProviderName(); name != "" {
			return name
		}
	}
	return GenAIOther
}
