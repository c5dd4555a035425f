// The types every line of `musepi rpc` is checked against: pi's own, as
// published in @mariozechner/pi-coding-agent (package.json pins the
// version), and MusePi's additional events.
import type { AgentSessionEvent, RpcResponse } from "@mariozechner/pi-coding-agent";

/** A response line. */
export type PiResponse = RpcResponse;
/** An event line (AgentEvent of pi-agent-core plus the session's events). */
export type PiEvent = AgentSessionEvent;
export type { MusePiEvent } from "./musepi-types.js";
