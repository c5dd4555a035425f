// Package musepi is the embedding API of the MusePi runtime: LLM agent
// sessions as actors that ride out provider failures with the auto-retry
// policy of package retry.
//
//	rt, err := musepi.NewRuntime(musepi.WithProvider("openai", p))
//	s, err := rt.NewSession(ctx, musepi.WithModel("openai/gpt-4o"))
//	res, err := s.Prompt(ctx, "hello") // returns once all retries are over
//	fmt.Println(res.Text(), res.StopReason)
//
// Results (AssistantMessage), history entries (Entry) and events (Event:
// AutoRetryStart, AgentSettled, ...) are Go types; errors are sentinels and
// types for errors.Is and errors.As. The protobuf messages of package
// messages are the wire protocol behind this API.
package musepi
