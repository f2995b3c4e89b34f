// Opens a session file in the real Pi 1.6.0 agent (its SDK, as `pi --session FILE` would), sends
// one prompt to a fake model and prints, as one JSON object, what Pi sent and what it appended:
//   { "request": { "roles": [...], "texts": [...], "tools": N },
//     "appended": ["message:user", ...] }
// `texts` holds each request message's text (its text blocks joined), so a test can find the
// summary and the kept tail in the order Pi sent them.
// usage: node resume.mjs FILE HOME   (HOME: a scratch folder; Pi's settings and models go there)
import fs from "node:fs";
import path from "node:path";
import { startFakeLlm } from "./fake-llm.mjs";

const [file, home] = process.argv.slice(2);
if (!file || !home) {
	console.error("usage: node resume.mjs FILE HOME");
	process.exit(2);
}
const agentDir = path.join(home, ".pi", "agent");
const cwd = path.join(home, "work");
fs.mkdirSync(agentDir, { recursive: true });
fs.mkdirSync(cwd, { recursive: true });
process.env.HOME = home;

const fake = await startFakeLlm();
fake.state.replies = { history: "reply after resuming", turnPrefix: "unused" };
const model = {
	id: "fake-model",
	name: "Fake",
	reasoning: false,
	input: ["text"],
	contextWindow: 200000,
	maxTokens: 16000,
	cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
};
fs.writeFileSync(
	path.join(agentDir, "models.json"),
	JSON.stringify({
		providers: {
			fake: { baseUrl: `http://127.0.0.1:${fake.port}/v1`, api: "openai-completions", apiKey: "k", models: [model] },
		},
	}),
);
fs.writeFileSync(path.join(agentDir, "settings.json"), JSON.stringify({ defaultProvider: "fake", defaultModel: "fake-model" }));

const sdk = await import("./node_modules/@earendil-works/pi-coding-agent/dist/index.js");
const linesBefore = fs.readFileSync(file, "utf8").trim().split("\n").length;
const sessionManager = sdk.SessionManager.open(file, path.dirname(file));
const { session } = await sdk.createAgentSession({ cwd, agentDir, sessionManager });
await session.prompt("resume check");

const textOf = (content) =>
	typeof content === "string"
		? content
		: Array.isArray(content)
			? content.filter((b) => b && b.type === "text").map((b) => b.text).join("\n")
			: "";
const sent = fake.state.requests.find((r) => r.body?.messages)?.body ?? { messages: [] };
const appended = fs
	.readFileSync(file, "utf8")
	.trim()
	.split("\n")
	.slice(linesBefore)
	.map((l) => JSON.parse(l))
	.map((e) => (e.message ? `${e.type}:${e.message.role}` : e.type));
console.log(
	JSON.stringify({
		request: {
			roles: sent.messages.map((m) => m.role),
			texts: sent.messages.map((m) => textOf(m.content)),
			tools: (sent.tools ?? []).length,
		},
		appended,
	}),
);
session.dispose?.();
await fake.close();
process.exit(0);
