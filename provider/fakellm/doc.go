// Package fakellm is a fault-injecting fake LLM server for integration
// tests and local storms. It speaks the real wire formats of the OpenAI
// Chat Completions API, the OpenAI Responses API and the Anthropic
// Messages API (streaming SSE and plain JSON), and answers each request as
// a Scenario says: realistic HTTP errors (presets per API), in-stream
// errors, streams of text, thinking, tool calls and refusals, and network
// faults (dropped connections, stalls, delays), selected by API, key,
// model, time window and request count. Its rate limits (requests, tokens,
// input and output tokens per minute, per key and model, over the minute
// or a shorter window) follow the rules the providers publish, and send
// their rate-limit headers and 429s. Its capacity (calls in flight per
// model, changing over time) answers the providers' overload errors
// beyond it and slows the answers as it fills. See README.md for the
// scenario format and the rules, with their sources.
//
//	sc, err := fakellm.LoadScenario("testdata/outage.json")
//	srv := fakellm.New(sc)
//	base, err := srv.Start("127.0.0.1:0") // OpenAI clients use base+"/v1"
//	defer srv.Close()
package fakellm
