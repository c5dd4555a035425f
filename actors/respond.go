package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
)

// respond answers the sender of the current message, if there is one,
// counting the reply in flight on clk.
func respond(ctx actor.Context, clk clock.Clock, msg track.Message) {
	if ctx.Sender() != nil {
		track.Send(ctx, clk, ctx.Sender(), msg)
	}
}
