// Drives `musepi rpc` through pi's own, unmodified RpcClient (its cliPath is
// musepi-shim.mjs, which runs the musepi binary) against the fake LLM server
// the Go test started, then checks every line the client received against
// the JSON schemas generated from pi's TypeScript types (build/schema.json).
//
// Environment: MUSEPI_BIN, MUSEPI_CONFIG_A (no model fallback),
// MUSEPI_CONFIG_B (model fallback, history in files), MUSEPI_LINES_DIR,
// MUSEPI_SECRETS (API key values that must never appear on the wire).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { RpcClient, type RpcSessionState } from "@mariozechner/pi-coding-agent";
import { Ajv } from "ajv";

const here = dirname(fileURLToPath(import.meta.url));
const shim = join(here, "..", "musepi-shim.mjs");
const linesDir = env("MUSEPI_LINES_DIR");

function env(name: string): string {
	const v = process.env[name];
	if (!v) throw new Error(`${name} is not set`);
	return v;
}

type Event = { type: string; [key: string]: any };
type State = RpcSessionState & { isRetrying?: boolean; retryAttempt?: number; nextAttemptAt?: number };

/** Starts pi's RpcClient on `musepi rpc --config <config>`. */
async function startClient(name: string, config: string): Promise<RpcClient> {
	const client = new RpcClient({
		cliPath: shim,
		env: {
			MUSEPI_BIN: env("MUSEPI_BIN"),
			MUSEPI_ARGS: JSON.stringify(["--config", config]),
			MUSEPI_LINES: join(linesDir, `${name}.jsonl`),
		},
	});
	await client.start();
	return client;
}

/** Collects events from now until one matches stop (default: agent_settled). */
function until(client: RpcClient, stop: (e: Event) => boolean = (e) => e.type === "agent_settled", ms = 30000): Promise<Event[]> {
	return new Promise((resolve, reject) => {
		const events: Event[] = [];
		const timer = setTimeout(() => {
			off();
			reject(new Error(`timeout; events so far: ${events.map((e) => e.type).join(",")}`));
		}, ms);
		const off = client.onEvent((e: any) => {
			events.push(e);
			if (stop(e)) {
				clearTimeout(timer);
				off();
				resolve(events);
			}
		});
	});
}

/** Prompts and returns the events up to agent_settled. */
async function run(client: RpcClient, message: string): Promise<Event[]> {
	const done = until(client);
	await client.prompt(message);
	return done;
}

const types = (events: Event[]) => events.map((e) => e.type);
const of = (events: Event[], type: string) => events.filter((e) => e.type === type);
const last = <T>(xs: T[]): T => xs[xs.length - 1];

function checkTimestamps(messages: any[]) {
	for (const m of messages) assert.ok(m.timestamp > 1.6e12, `timestamp in ms: ${JSON.stringify(m)}`);
}

const checks: string[] = [];
async function check(name: string, body: () => Promise<void>) {
	await body();
	checks.push(name);
	console.log(`ok   ${name}`);
}

async function clientA() {
	const c = await startClient("a", env("MUSEPI_CONFIG_A"));
	try {
		await check("get_state: pi's RpcSessionState with pi's Model", async () => {
			const s = await c.getState();
			assert.equal(s.model?.id, "plain");
			assert.equal(s.model?.provider, "fake");
			assert.equal(s.model?.api, "openai-completions");
			assert.equal(s.thinkingLevel, "off");
			assert.equal(s.isStreaming, false);
			assert.equal(s.pendingMessageCount, 0);
			assert.equal(s.steeringMode, "one-at-a-time");
		});
		await check("prompt: pi's event sequence, waitForIdle", async () => {
			const settled = until(c);
			const events = (await c.promptAndWait("hello")) as Event[];
			await settled;
			assert.deepEqual(types(events).filter((t) => t !== "message_update"), [
				"agent_start", "turn_start", "message_start", "message_end", "message_start", "message_end", "turn_end", "agent_end",
			]);
			const updates = of(events, "message_update");
			assert.ok(updates.length >= 2, "streamed in pieces");
			// pi's block events: text_start, the text_deltas, text_end.
			const kinds = updates.map((u: any) => u.assistantMessageEvent.type);
			assert.equal(kinds[0], "text_start");
			assert.equal(kinds[kinds.length - 1], "text_end");
			assert.ok(kinds.slice(1, -1).every((k: string) => k === "text_delta"), kinds.join(","));
			const textEnd = updates[updates.length - 1].assistantMessageEvent;
			assert.equal(textEnd.content, textEnd.partial.content[textEnd.contentIndex].text);
			const end = last(of(events, "agent_end"));
			assert.deepEqual(end.messages.map((m: any) => m.role), ["user", "assistant"]);
			assert.equal(end.messages[1].stopReason, "stop");
			assert.equal(end.messages[1].provider, "fake");
			assert.equal(end.messages[1].api, "openai-completions");
			assert.equal(end.messages[1].errorMessage, undefined);
			assert.equal(end.willRetry, false);
			checkTimestamps(end.messages);
		});
		await check("thinking (OpenAI reasoning_content)", async () => {
			await c.setModel("fake", "thinker");
			const events = await run(c, "think");
			assert.ok(of(events, "message_update").some((e) => e.assistantMessageEvent.type === "thinking_delta"));
			const msg = last(of(events, "message_end")).message;
			assert.equal(msg.content[0].type, "thinking");
			assert.equal(msg.content[1].type, "text");
		});
		await check("thinking with signature (Anthropic)", async () => {
			// The client declares a narrower type than the wire's Model; the
			// schema check below holds the response to pi's Model.
			const model = (await c.setModel("ant", "athinker")) as { api?: string };
			assert.equal(model.api, "anthropic-messages");
			const events = await run(c, "think hard");
			const msg = last(of(events, "message_end")).message;
			assert.equal(msg.api, "anthropic-messages");
			assert.equal(msg.content[0].type, "thinking");
			assert.ok(msg.content[0].thinkingSignature, "thinkingSignature");
		});
		await check("thinking level", async () => {
			await c.setThinkingLevel("high");
			assert.equal((await c.getState()).thinkingLevel, "high");
			assert.deepEqual(await c.cycleThinkingLevel(), { level: "xhigh" });
			await c.setThinkingLevel("off");
		});
		await check("tool call and tool result", async () => {
			await c.setModel("fake", "tooluse");
			const events = await run(c, "use a tool");
			const call = of(events, "message_end").map((e) => e.message).find((m) => m.role === "assistant" && m.stopReason === "toolUse");
			assert.ok(call, "an assistant message that stops for tool use");
			assert.deepEqual(call.content.find((b: any) => b.type === "toolCall").arguments, { q: "weather" });
			assert.equal(of(events, "tool_execution_start")[0].toolName, "lookup");
			assert.equal(of(events, "tool_execution_end")[0].isError, true); // musepi rpc has no tools
			const turns = of(events, "turn_end");
			assert.equal(turns.length, 2);
			assert.equal(turns[0].toolResults[0].role, "toolResult");
			assert.deepEqual(last(of(events, "agent_end")).messages.map((m: any) => m.role), ["user", "assistant", "toolResult", "assistant"]);
		});
		await check("retry: agent_end willRetry, auto_retry_start/end", async () => {
			await c.setModel("fake", "flaky");
			const events = await run(c, "retry me");
			const ends = of(events, "agent_end");
			assert.deepEqual(ends.map((e) => e.willRetry), [true, false]);
			assert.equal(ends[0].messages[1].stopReason, "error");
			assert.ok(ends[0].messages[1].errorMessage);
			const start = of(events, "auto_retry_start")[0];
			assert.equal(start.attempt, 1);
			assert.equal(start.errorClass, "transient");
			assert.deepEqual(of(events, "auto_retry_end").map((e) => e.success), [true]);
			assert.equal(last(events).success, true);
		});
		await check("abort while streaming", async () => {
			await c.setModel("fake", "slow");
			const firstDelta = until(c, (e) => e.type === "message_update");
			const done = until(c);
			await c.prompt("take your time");
			await firstDelta;
			await c.abort();
			const events = await done;
			assert.equal(last(of(events, "agent_end")).messages[1].stopReason, "aborted");
			assert.equal(last(events).success, false);
		});
		await check("get_state during backoff; abort during backoff", async () => {
			await c.setModel("fake", "waiter");
			const waiting = until(c, (e) => e.type === "auto_retry_start");
			const done = until(c);
			await c.prompt("wait for it");
			const start = last(await waiting);
			assert.ok(start.delayMs >= 10000, `retry-after honoured: ${start.delayMs}`);
			const s = (await c.getState()) as State;
			assert.equal(s.isStreaming, false);
			assert.equal(s.isRetrying, true);
			assert.equal(s.retryAttempt, 1);
			assert.ok(s.nextAttemptAt! > Date.now(), "next attempt in the future");
			await c.abort();
			const events = await done;
			assert.equal(of(events, "auto_retry_end")[0].success, false);
			assert.equal(((await c.getState()) as State).isRetrying, false);
		});
		await check("abort_retry", async () => {
			const waiting = until(c, (e) => e.type === "auto_retry_start");
			const done = until(c);
			await c.prompt("wait again");
			await waiting;
			await c.abortRetry();
			const events = await done;
			assert.equal(of(events, "auto_retry_end")[0].finalError, "Retry cancelled");
		});
		await check("auto-retry off", async () => {
			await c.setAutoRetry(false);
			await c.setModel("fake", "broken");
			const events = await run(c, "fail once");
			assert.equal(of(events, "auto_retry_start").length, 0);
			assert.deepEqual(of(events, "agent_end").map((e) => e.willRetry), [false]);
			assert.equal(last(events).success, false);
			await c.setAutoRetry(true);
		});
		await check("credential switch on a usage limit (names only)", async () => {
			await c.setModel("fake", "quota");
			const events = await run(c, "spend");
			const sw = of(events, "credential_switch");
			assert.equal(sw.length, 1);
			assert.equal(sw[0].provider, "fake");
			assert.deepEqual([sw[0].from, sw[0].to].sort(), ["first", "second"]);
			assert.equal(sw[0].reason, "usage_limit");
			assert.equal(last(events).success, true);
		});
		await check("queueing: steer, follow_up, streamingBehavior", async () => {
			await c.setModel("fake", "queued");
			const started = until(c, (e) => e.type === "message_update");
			const queueUpdates: Event[] = [];
			const off = c.onEvent((e: any) => e.type === "queue_update" && queueUpdates.push(e));
			let settled = 0;
			const all = until(c, (e) => e.type === "agent_settled" && ++settled === 4, 60000);
			await c.prompt("first");
			await started;
			await c.followUp("third");
			await c.steer("second");
			const res: any = await (c as any).send({ type: "prompt", message: "fourth", streamingBehavior: "followUp" });
			assert.equal(res.success, true);
			assert.equal((await c.getState()).pendingMessageCount, 3);
			const busy: any = await (c as any).send({ type: "prompt", message: "rejected" });
			assert.equal(busy.success, false);
			await all;
			off();
			assert.deepEqual(queueUpdates[2], { type: "queue_update", steering: ["second"], followUp: ["third", "fourth"], sessionId: queueUpdates[2].sessionId });
			assert.deepEqual(last(queueUpdates).followUp, []);
			const users = (await c.getMessages()).filter((m: any) => m.role === "user").map((m: any) => m.content);
			assert.deepEqual(users.slice(-4), ["first", "second", "third", "fourth"]);
		});
		await check("models: list, cycle, set", async () => {
			const models = await c.getAvailableModels();
			assert.ok(models.length >= 10);
			assert.ok(models.every((m) => (m as { api?: string }).api && m.provider && m.id && typeof m.contextWindow === "number"));
			const cycled = await c.cycleModel();
			assert.equal(cycled?.isScoped, false);
			assert.equal((await c.getState()).model?.id, cycled?.model.id);
			const set = await c.setModel("fake", "plain");
			assert.equal(set.id, "plain");
		});
		await check("messages, last assistant text, stats", async () => {
			const messages = await c.getMessages();
			assert.ok(messages.every((m: any) => ["user", "assistant", "toolResult"].includes(m.role)));
			checkTimestamps(messages);
			const text = await c.getLastAssistantText();
			assert.equal(typeof text, "string");
			const stats: any = await c.getSessionStats();
			assert.ok(stats.userMessages >= 12 && stats.assistantMessages > stats.userMessages);
			assert.ok(stats.toolCalls >= 1 && stats.toolResults >= 1);
			// Retries made: "retry me" and "spend" made theirs; the pending ones
			// that abort and abort_retry cancelled were never made.
			assert.ok(stats.retries >= 2, `retries counted: ${stats.retries}`);
			assert.ok(stats.tokens.input > 0 && stats.tokens.output > 0, "the providers' usage is counted");
			assert.ok(stats.cost > 0, "priced models have a cost");
		});
		await check("session name, commands", async () => {
			await c.setSessionName("compat run");
			assert.equal((await c.getState()).sessionName, "compat run");
			assert.deepEqual(await c.getCommands(), []);
		});
		await check("unsupported commands fail naming the command", async () => {
			for (const [name, call] of [
				["bash", () => c.bash("ls")],
				["export_html", () => c.exportHtml()],
				["fork", () => c.fork("x")],
				["clone", () => c.clone()],
				["get_fork_messages", () => c.getForkMessages()],
			] as const) {
				await assert.rejects(call, new RegExp(`^Error: ${name} is not supported by MusePi$`));
			}
			// compact runs the runtime's compaction hook; `musepi rpc` has none.
			await assert.rejects(() => c.compact(), /no compaction hook is configured/);
			await c.setAutoCompaction(false);
			assert.equal((await c.getState()).autoCompactionEnabled, false);
		});
		await check("new_session", async () => {
			const before = (await c.getState()).sessionId;
			assert.deepEqual(Object.keys(await c.newSession()).includes("cancelled"), true);
			const s = await c.getState();
			assert.notEqual(s.sessionId, before);
			assert.equal(s.messageCount, 0);
			assert.equal(s.sessionName, undefined);
		});
	} finally {
		await c.stop();
	}
}

async function clientB() {
	const c = await startClient("b", env("MUSEPI_CONFIG_B"));
	try {
		let file = "";
		await check("model fallback events", async () => {
			const events = await run(c, "primary is down");
			assert.equal(of(events, "retry_fallback_applied")[0].to, "fake/backup");
			assert.equal(of(events, "model_change")[0].reason, "fallback");
			assert.equal(of(events, "retry_fallback_succeeded")[0].model, "fake/backup");
			const ok = last(of(events, "agent_end")).messages;
			assert.equal(last<any>(ok).model, "backup");
			file = (await c.getState()).sessionFile ?? "";
			assert.ok(file.endsWith(".jsonl"), `sessionFile ${file}`);
			assert.ok(readFileSync(file, "utf8").includes(`"timestamp":`), "history uses timestamp");
		});
		await check("switch_session back to a session file", async () => {
			await c.newSession();
			assert.equal((await c.getState()).messageCount, 0);
			assert.deepEqual(await c.switchSession(file), { cancelled: false, sessionId: file.replace(/^.*\//, "").replace(/\.jsonl$/, "") });
			const messages = await c.getMessages();
			assert.equal(messages[0].role, "user");
			assert.equal(last<any>(messages).role, "assistant");
		});
	} finally {
		await c.stop();
	}
}

/** Checks every line both clients received against pi's types. */
function checkLines(): Record<string, number> {
	const schemas = JSON.parse(readFileSync(join(here, "schema.json"), "utf8"));
	const ajv = new Ajv({ strict: false, allErrors: true });
	const validate = {
		response: ajv.compile(schemas.PiResponse),
		pi: ajv.compile(schemas.PiEvent),
		musepi: ajv.compile(schemas.MusePiEvent),
	};
	// pi's event types, read off its schema: a line of one of these types
	// must be that pi event; any other type must be one of MusePi's.
	const piTypes = new Set<string>();
	const collect = (node: any) => {
		if (!node || typeof node !== "object") return;
		if (node.properties?.type?.const) piTypes.add(node.properties.type.const);
		for (const v of Object.values(node)) collect(v);
	};
	collect(schemas.PiEvent.definitions.AgentSessionEvent);
	collect(schemas.PiEvent.definitions.AgentEvent);
	// The check can fail: lines in the shapes musepi rpc sent before it spoke
	// pi's wire format are rejected.
	const before = [
		{ type: "message_end", sessionId: "s", message: { content: [{ type: "tool_call", id: "1", name: "f", arguments: "{}" }], stopReason: "tool_use", timestampMs: 1 } },
		{ type: "message_update", sessionId: "s", kind: "text", delta: "hi" },
		{ type: "agent_end", sessionId: "s", message: {}, willRetry: false },
	];
	for (const line of before) assert.equal(validate.pi(line), false, `accepted ${JSON.stringify(line)}`);
	assert.equal(validate.response({ type: "response", command: "new_session", success: true, data: { sessionId: "s" } }), false);
	assert.equal(validate.response({ type: "response", command: "get_state", success: true, data: { sessionId: "s", model: { id: "m", provider: "p" }, isStreaming: false } }), false);
	const secrets = env("MUSEPI_SECRETS").split(",");
	const counts: Record<string, number> = {};
	for (const name of ["a", "b"]) {
		const lines = readFileSync(join(linesDir, `${name}.jsonl`), "utf8").split("\n").filter((l) => l !== "");
		for (const line of lines) {
			for (const s of secrets) assert.ok(!line.includes(s), `a key value on the wire: ${line}`);
			const obj: { type: string; command?: string } = JSON.parse(line);
			const kind = obj.type === "response" ? "response" : piTypes.has(obj.type) ? "pi" : "musepi";
			const v = validate[kind];
			if (!v(obj)) {
				throw new Error(`line does not match ${kind} types: ${line.slice(0, 2000)}\n${JSON.stringify(v.errors?.slice(0, 5), null, 1)}`);
			}
			const key = obj.type === "response" ? `response:${obj.command}` : obj.type;
			counts[key] = (counts[key] ?? 0) + 1;
		}
	}
	return counts;
}

await clientA();
await clientB();
const counts = checkLines();
const total = Object.values(counts).reduce((a, b) => a + b, 0);
console.log(JSON.stringify({ checks: checks.length, lines: total, byType: counts }));
