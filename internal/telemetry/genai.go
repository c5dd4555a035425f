package telemetry

import (
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// The OpenTelemetry GenAI semantic conventions. Their names come from
// semconv v1.41.0, the last version of go.opentelemetry.io/otel/semconv
// with the gen_ai namespace (the conventions have moved to a repository of
// their own since).

// The attributes of the GenAI metrics and of the attempt spans.
const (
	AttrGenAIOperation     = string(semconv.GenAIOperationNameKey) // "chat"
	AttrGenAIProvider      = string(semconv.GenAIProviderNameKey)  // the adapter's family: "openai", "anthropic", "_OTHER"
	AttrGenAIRequestModel  = string(semconv.GenAIRequestModelKey)  // the model asked for ("gpt-4o")
	AttrGenAIResponseModel = string(semconv.GenAIResponseModelKey) // the model the response named, when it named one
	AttrGenAITokenType     = string(semconv.GenAITokenTypeKey)     // token usage: "input" or "output"
	AttrErrorType          = string(semconv.ErrorTypeKey)          // failed calls: see ErrorType
)

// genAIChat is gen_ai.operation.name: every provider call is a chat turn.
var genAIChat = attribute.String(AttrGenAIOperation, string(genaiconv.OperationNameChat))

// The token types of gen_ai.client.token.usage.
var (
	tokenInput  = attribute.String(AttrGenAITokenType, string(genaiconv.TokenTypeInput))
	tokenOutput = attribute.String(AttrGenAITokenType, string(genaiconv.TokenTypeOutput))
)

// Bucket boundaries the conventions give the GenAI histograms.
var (
	genAIDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// ErrorAborted is the error.type of a call its caller cancelled.
const ErrorAborted = "aborted"

// ErrorType is the error.type of a provider call that ended in msg ("":
// it did not fail). It is the HTTP status of an error response ("429",
// "503"); else, for a failure without one (a network error, a stall, a
// refusal in a 200 stream), its retry class ("transient",
// "classifier_refusal", "context_overflow", "not_retryable", ...);
// ErrorAborted for a cancelled call; and "_OTHER" for a provider that
// returned no message or panicked.
func ErrorType(msg *messages.AssistantMessage) string {
	switch {
	case msg == nil:
		return string(genaiconv.ErrorTypeOther)
	case msg.GetStopReason() == messages.StopReason_STOP_REASON_ABORTED:
		return ErrorAborted
	case msg.GetStopReason() != messages.StopReason_STOP_REASON_ERROR:
		return ""
	case msg.GetHttpStatus() >= 400:
		return strconv.Itoa(int(msg.GetHttpStatus()))
	}
	return retry.Classify(msg, retry.AbortState{}).String()
}

// genAIAttrs are the GenAI attributes of a call to a provider of family
// (gen_ai.provider.name) for model that ended in msg: the operation, the
// provider, the models, and error.type when withError and it failed.
func genAIAttrs(family, model string, msg *messages.AssistantMessage, withError bool) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, genAIChat, attribute.String(AttrGenAIProvider, family))
	if model != "" {
		attrs = append(attrs, attribute.String(AttrGenAIRequestModel, model))
	}
	if m := msg.GetResponseModel(); m != "" {
		attrs = append(attrs, attribute.String(AttrGenAIResponseModel, m))
	}
	if e := ErrorType(msg); withError && e != "" {
		attrs = append(attrs, attribute.String(AttrErrorType, e))
	}
	return attrs
}

// inputTokens is the input count the conventions ask for: every input
// token, those read from or written to the prompt cache included.
func inputTokens(u *messages.Usage) int64 {
	return u.GetInput() + u.GetCacheRead() + u.GetCacheWrite()
}

// familyOf is the gen_ai.provider.name of the provider configured as
// name: the one WrapProvider learnt, else provider.GenAIOther.
func (t *Telemetry) familyOf(name string) string {
	if f, ok := t.families[name]; ok {
		return f
	}
	return provider.GenAIOther
}
