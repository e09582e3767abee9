// `vlmspec serve` end to end: starts the server with the shipped models on a free loopback port and drives it
// with curl (and with npm's openai client when tests/server/node_modules has it: .ci/run installs it).
// Checks: /health, /v1/models, /metrics, the API key, chat with a base64 image (non-stream and stream, usage,
// stop strings), /v1/completions, greedy replies identical to `vlmspec generate` for a chain and a tree
// drafter and target-only, prefix reuse on a second turn, every refusal's status and JSON, clients that
// disconnect mid-stream. Exit 77 (skip) without the models, curl or node's fetch.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const BIN = process.env.VLMSPEC_BIN || "build/vlmspec";
const M = "models";
const FILES = ["target.gguf", "target-mmproj.gguf", "draft-llava.gguf", "draft-llava-mmproj.gguf"].map((f) => join(M, f));
const skip = (why) => { console.log(`server: SKIPPED: ${why}`); process.exit(77); };
for (const f of FILES) if (!existsSync(f)) skip(`${f} is missing`);
try { execFileSync("curl", ["--version"], { stdio: "ignore" }); } catch { skip("curl is not installed (apt-get install curl)"); }

let failures = 0, checks = 0;
function check(cond, what) {
  checks++;
  if (!cond) { failures++; console.log(`FAIL: ${what}`); }
}
const KEY = "sekret";
const tmp = mkdtempSync(join(tmpdir(), "vlmspec-server-"));
const servers = [];
function cleanup() { for (const s of servers) s.kill("SIGKILL"); rmSync(tmp, { recursive: true, force: true }); }
process.on("exit", cleanup);

function start(extra) {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, ["serve", "-m", FILES[0], "--mmproj", FILES[1], "-md", FILES[2], "--mmproj-draft", FILES[3],
      "--port", "0", "-t", "2", ...extra], { stdio: ["ignore", "ignore", "pipe"] });
    servers.push(p);
    let err = "";
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${err}`)), 120000);
    p.stderr.on("data", (d) => {
      err += d;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err);
      if (m) { clearTimeout(timer); resolve({ proc: p, url: `http://127.0.0.1:${m[1]}`, log: () => err }); }
    });
    p.on("exit", (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${err}`)); });
  });
}

// curl: returns {status, body} (body parsed as JSON when it is)
function curl(url, { body, key = KEY, method } = {}) {
  const args = ["-s", "-w", "\n%{http_code}", url];
  if (key) args.push("-H", `Authorization: Bearer ${key}`);
  if (method) args.push("-X", method);
  if (body !== undefined) {
    const f = join(tmp, "body.json");
    writeFileSync(f, typeof body === "string" ? body : JSON.stringify(body));
    args.push("-H", "Content-Type: application/json", "--data-binary", `@${f}`);
  }
  const out = execFileSync("curl", args, { maxBuffer: 64 << 20 }).toString();
  const at = out.lastIndexOf("\n");
  const text = out.slice(0, at), status = Number(out.slice(at + 1));
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status, text, json };
}

// the SSE events of a streamed reply, read with curl -N
function curlStream(url, body) {
  const f = join(tmp, "stream.json");
  writeFileSync(f, JSON.stringify(body));
  const out = execFileSync("curl", ["-sN", url, "-H", `Authorization: Bearer ${KEY}`, "-H", "Content-Type: application/json",
    "--data-binary", `@${f}`]).toString();
  return out.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
}

function generate(image, question, extra) {
  const out = execFileSync(BIN, ["generate", "-m", FILES[0], "--mmproj", FILES[1], "-md", FILES[2], "--mmproj-draft",
    FILES[3], "--image", image, "-p", question, "--temp", "0", "-n", "48", "-t", "2", "--json", "-", ...extra]).toString();
  return JSON.parse(out);
}

// a test picture and its question from the generated world
execFileSync(BIN, ["data", "gen", "--out", join(tmp, "world"), "--seed", "11", "--train", "1", "--test", "2", "--suites", "vqa",
  "--quiet"]);
const sample = JSON.parse(readFileSync(join(tmp, "world", "test.jsonl"), "utf8").split("\n")[0]);
const image = join(tmp, "world", sample.images[0]);
const question = sample.turns[0].user.replace(/<image>\n?/g, "").trim();
const dataUri = `data:image/png;base64,${readFileSync(image).toString("base64")}`;
const chatBody = (extra = {}) => ({
  model: "whatever", temperature: 0, max_tokens: 48,
  messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: dataUri } }, { type: "text", text: question }] }],
  ...extra,
});

const A = await start(["--api-key", KEY, "-np", "2", "--max-body", "200000"]);
const chat = `${A.url}/v1/chat/completions`;

// health, models, auth
let r = curl(`${A.url}/health`, { key: null });
check(r.status === 200 && r.json?.status === "ok", `/health: ${r.status} ${r.text}`);
r = curl(`${A.url}/v1/models`, { key: null });
check(r.status === 401 && r.json?.error?.type === "authentication_error", `/v1/models without the key: ${r.status}`);
r = curl(`${A.url}/v1/models`, { key: "wrong" });
check(r.status === 401, `/v1/models with a wrong key: ${r.status}`);
r = curl(`${A.url}/v1/models`);
check(r.status === 200 && r.json?.data?.[0]?.id === "target.gguf", `/v1/models: ${r.text}`);
r = curl(`${A.url}/`, { key: null });
check(r.status === 200 && r.text.includes("<title>vlmspec chat</title>"), "the chat page");

// greedy replies: identical to vlmspec generate, for a chain (m), a tree (m, width 2) and target-only
const ref = generate(image, question, ["--method", "m"]);
check(typeof ref.text === "string" && ref.text.length > 0, "vlmspec generate --json gave a text");
const cases = [[{}, "chain m"], [{ vlmspec: { tree_width: 2 } }, "tree m width 2"], [{ vlmspec: { method: "t" } }, "chain t"],
  [{ vlmspec: { method: "ar" } }, "target only"]];
let reply = null;
for (const [extra, what] of cases) {
  r = curl(chat, { body: chatBody(extra) });
  const c = r.json?.choices?.[0];
  check(r.status === 200 && c?.message?.role === "assistant", `${what}: ${r.status} ${r.text.slice(0, 300)}`);
  check(c?.message?.content === ref.text, `${what}: '${c?.message?.content}' differs from generate's '${ref.text}'`);
  check(["stop", "length"].includes(c?.finish_reason), `${what}: finish_reason ${c?.finish_reason}`);
  check(r.json?.usage?.total_tokens === r.json?.usage?.prompt_tokens + r.json?.usage?.completion_tokens, `${what}: usage`);
  check(what !== "target only" ? r.json?.timings?.verify_passes > 0 && r.json?.timings?.draft_n > 0 : r.json?.timings?.draft_n === 0,
    `${what}: timings ${JSON.stringify(r.json?.timings)}`);
  if (!reply) reply = c?.message?.content;
}
const treeRef = generate(image, question, ["--method", "m", "--tree-width", "2"]);
check(treeRef.text === ref.text, "generate's tree and chain agree");

// a second turn reuses the slot's cache: fewer rows evaluated than the prompt has
const turn2 = chatBody();
turn2.messages.push({ role: "assistant", content: reply }, { role: "user", content: "And what else is there?" });
r = curl(chat, { body: turn2 });
check(r.status === 200 && r.json.timings.prompt_n < r.json.usage.prompt_tokens,
  `second turn: evaluated ${r.json?.timings?.prompt_n} of ${r.json?.usage?.prompt_tokens} prompt rows`);

// streaming with usage and a stop string
const words = reply.trim().split(" ");
const stopWord = words[Math.min(2, words.length - 1)];
const ev = curlStream(chat, chatBody({ stream: true, stream_options: { include_usage: true }, stop: [stopWord] }));
check(ev.at(-1) === "[DONE]", "the stream ends with [DONE]");
const chunks = ev.filter((e) => e !== "[DONE]").map((e) => JSON.parse(e));
check(chunks.every((c) => c.object === "chat.completion.chunk"), "chunk objects");
check(chunks[0].choices[0].delta.role === "assistant", "the first chunk carries the role");
const streamed = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
const cut = reply.slice(0, reply.indexOf(stopWord));
check(streamed === cut, `streamed '${streamed}' is the reply cut at '${stopWord}': '${cut}'`);
const last = chunks.at(-2), usage = chunks.at(-1);
check(last.choices[0].finish_reason === "stop", `finish_reason of the last chunk: ${last.choices[0].finish_reason}`);
check(usage.choices.length === 0 && usage.usage?.completion_tokens > 0 && usage.timings, "the usage chunk");
const segs = chunks.flatMap((c) => c.vlmspec?.segments ?? []);
check(segs.length > 0 && segs.some((s) => s.drafted) && segs.some((s) => !s.drafted), "drafted and own segments");

// a plain stream without usage: content equals the non-stream reply
const ev2 = curlStream(chat, chatBody({ stream: true }));
const s2 = ev2.filter((e) => e !== "[DONE]").map((e) => JSON.parse(e));
check(s2.map((c) => c.choices[0]?.delta?.content ?? "").join("") === reply, "stream without stop = the reply");
check(s2.every((c) => !c.usage), "no usage chunk unless asked");

// completions
r = curl(`${A.url}/v1/completions`, { body: { prompt: "USER: What is 2 + 3? ASSISTANT:", max_tokens: 8, temperature: 0 } });
check(r.status === 200 && r.json.object === "text_completion" && typeof r.json.choices[0].text === "string",
  `completions: ${r.text.slice(0, 200)}`);

// refusals: status and OpenAI's error body
const errs = [
  ["{", 400, "malformed JSON"],
  [{ messages: [] }, 400, "empty messages"],
  [{ messages: [{ role: "user", content: 3 }] }, 400, "wrong type"],
  [{ messages: [{ role: "user", content: "hi" }], vlmspec: { method: "nope" } }, 400, "unknown method"],
  [{ messages: [{ role: "user", content: "hi" }], max_tokens: 100000 }, 400, "beyond the context"],
  [{ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://example.com/a.png" } }] }] }, 400, "http URL"],
  [{ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,aGVsbG8=" } }] }] }, 400, "broken image"],
  [{ messages: [{ role: "user", content: "x".repeat(300000) }] }, 413, "body too large"],
  [{ messages: Array.from({ length: 9 }, () => ({ role: "user", content: [{ type: "image_url", image_url: { url: dataUri } }] })) }, 400, "too many images"],
];
for (const [body, status, what] of errs) {
  r = curl(chat, { body });
  check(r.status === status && typeof r.json?.error?.message === "string" && r.json.error.type, `${what}: ${r.status} ${r.text.slice(0, 200)}`);
}
r = curl(chat, { body: { messages: [{ role: "user", content: "hi" }], max_tokens: 100000 } });
check(r.json?.error?.type === "exceed_context_size_error", "the context error's type");
r = curl(`${A.url}/v1/nothing`);
check(r.status === 404 && r.json?.error, `unknown route: ${r.status}`);
r = curl(chat, { method: "GET" });
check(r.status === 405 && r.json?.error, `GET on a POST route: ${r.status}`);

// clients that disconnect mid-stream leave nothing running
const aborts = [];
for (let i = 0; i < 6; i++) {
  const ac = new AbortController();
  aborts.push(fetch(chat, { method: "POST", signal: ac.signal, headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify(chatBody({ stream: true, max_tokens: 200, temperature: 1, seed: i })) })
    .then(async (resp) => { const rd = resp.body.getReader(); await rd.read(); ac.abort(); }).catch(() => {}));
}
await Promise.all(aborts);
// a non-streamed request whose client leaves: the server notices while it computes and stops it
{
  const ac = new AbortController();
  const p = fetch(chat, { method: "POST", signal: ac.signal, headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify(chatBody({ max_tokens: 600, temperature: 1, seed: 99 })) }).catch(() => {});
  await new Promise((res) => setTimeout(res, 700));
  ac.abort();
  await p;
  let idle = false;
  for (let t = 0; t < 50 && !idle; t++) {
    await new Promise((res) => setTimeout(res, 100));
    idle = /vlmspec_requests_processing 0/.test(curl(`${A.url}/metrics`).text);
  }
  check(idle, "a non-streamed request stops when its client leaves");
}
r = curl(chat, { body: chatBody(), key: "wrong" });
check(r.status === 401, `a completion with a wrong key: ${r.status}`);
r = curl(chat, { body: chatBody() });
check(r.status === 200 && r.json.choices[0].message.content === reply, "a request after the aborted streams");
await new Promise((res) => setTimeout(res, 200));
r = curl(`${A.url}/metrics`);
check(r.status === 200 && /vlmspec_requests_processing 0/.test(r.text) && /vlmspec_requests_deferred 0/.test(r.text),
  `metrics after disconnects: ${r.text.match(/vlmspec_requests_(processing|deferred) \d+/g)}`);
const accepted = Number(/vlmspec_draft_tokens_accepted_total (\d+)/.exec(r.text)?.[1]);
check(accepted > 0 && /vlmspec_draft_accepted_at_position_total\{position="1"\} [1-9]/.test(r.text), "speculative counters");

// a full queue: with one slot and no queue, concurrent requests beyond the running one get 503
const B = await start(["-np", "1", "--queue", "0"]);
const many = await Promise.all(Array.from({ length: 4 }, (_, i) => fetch(`${B.url}/v1/chat/completions`, { method: "POST",
  headers: { "Content-Type": "application/json" }, body: JSON.stringify(chatBody({ max_tokens: 48, seed: i })) })
  .then(async (resp) => ({ status: resp.status, body: await resp.json() }))));
const busy = many.filter((m) => m.status === 503), ok = many.filter((m) => m.status === 200);
check(ok.length >= 1 && busy.length >= 1 && busy.every((m) => m.body.error?.type === "unavailable_error") &&
  ok.length + busy.length === many.length, `a full queue: ${many.map((m) => m.status).join(" ")}`);
r = curl(`${B.url}/health`, { key: null });
check(r.status === 200, "the server is fine after refusing");
B.proc.kill("SIGTERM");
const code = await new Promise((res) => B.proc.on("exit", res));
check(code === 0, `SIGTERM: exit ${code}`);

// npm's openai client, when installed
let OpenAI = null;
try { OpenAI = (await import("openai")).default; } catch { console.log("server: openai client not installed (npm install --prefix tests/server openai@6): its checks skipped"); }
if (OpenAI) {
  const client = new OpenAI({ baseURL: `${A.url}/v1`, apiKey: KEY });
  const body = chatBody();
  const res = await client.chat.completions.create(body);
  check(res.choices[0].message.content === reply, `openai client: '${res.choices[0].message.content}'`);
  const st = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = "", usageSeen = false;
  for await (const ch of st) { text += ch.choices[0]?.delta?.content ?? ""; if (ch.usage) usageSeen = true; }
  check(text === reply && usageSeen, "openai client stream");
  const models = await client.models.list();
  check(models.data[0].id === "target.gguf", "openai client models");
}

console.log(failures ? `server: ${failures} of ${checks} checks failed` : `server: all ${checks} checks passed`);
process.exit(failures ? 1 : 0);
