// The only glue between pi's RpcClient and MusePi: RpcClient.start() runs
// `node <cliPath> --mode rpc …`; this script, given as cliPath, runs
// `$MUSEPI_BIN rpc $MUSEPI_ARGS` instead (pi's own arguments are dropped)
// and passes stdin, stdout and stderr through. When MUSEPI_LINES is set,
// every stdout line is also appended to that file, so a test can check
// each line the client received.
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";

const bin = process.env.MUSEPI_BIN ?? "musepi";
const args = ["rpc", ...JSON.parse(process.env.MUSEPI_ARGS ?? "[]")];
const child = spawn(bin, args, { stdio: ["inherit", "pipe", "inherit"] });
child.stdout.on("data", (chunk) => {
	process.stdout.write(chunk);
	if (process.env.MUSEPI_LINES) appendFileSync(process.env.MUSEPI_LINES, chunk);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => child.kill(sig));
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
