// Generates build/schema.json from pi's types (pi-types.ts) with
// ts-json-schema-generator: one JSON schema per kind of line.
import { writeFileSync } from "node:fs";
import { createGenerator } from "ts-json-schema-generator";

const generator = createGenerator({
	path: "pi-types.ts",
	tsconfig: "tsconfig.json",
	type: "*",
	skipTypeCheck: true,
	// pi's types say which fields must be there and of which type; more
	// fields (MusePi's additions) are allowed, as pi's client ignores them.
	additionalProperties: true,
});
const schemas: Record<string, any> = {};
for (const type of ["PiResponse", "PiEvent", "MusePiEvent"]) {
	const schema: any = generator.createSchema(type);
	// AgentMessage is pi-ai's Message or one of the coding agent's custom
	// messages (bash executions, summaries), which the generator turns into
	// {} (anything). MusePi sends LLM messages only, so they must be Message.
	if (schema.definitions?.AgentMessage) {
		schema.definitions.AgentMessage = { $ref: "#/definitions/Message" };
	}
	schemas[type] = schema;
}
writeFileSync("build/schema.json", JSON.stringify(schemas, null, 1));
