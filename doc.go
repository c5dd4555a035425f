// Package musepi is the embedding API of the MusePi runtime: LLM agent
// sessions as actors that ride out provider failures with the auto-retry
// policy of package retry.
//
//	rt, err := musepi.NewRuntime(musepi.WithProvider("openai", p))
//	s, err := rt.NewSession(ctx, musepi.WithModel("openai/gpt-4o"))
//	msg, err := s.Prompt(ctx, "hello") // returns once all retries are over
package musepi
