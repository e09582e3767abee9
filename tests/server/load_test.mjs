// Load on `vlmspec serve` (loopback only), also a benchmark (docs/server.md):
//   node tests/server/load_test.mjs [--clients 8] [--requests 25] [--slots 1,4] [--disconnects 200] [--tokens 32]
//                                   [--pictures 4]    (distinct requests, a picture each; the clients cycle through them)
//                                   [--method NAME]   (the requests' drafting method; default: the server's: m, or
//                                                     ar with --draft none)
//                                   [--server-args "ARGS"] (more `vlmspec serve` flags, split at spaces)
//                                   [--model LM --mmproj P] [--draft LM|none --mmproj-draft P]
//                                   (other models than the shipped ones: e.g. a target whose forward is bound by
//                                   reading its weights; --draft none serves the target alone, method ar)
// For each slot count it starts a server with the shipped models (or the ones named), runs CLIENTS concurrent
// streaming clients of REQUESTS requests each (greedy, each with one of PICTURES pictures), and checks: no errors,
// every answer equals the single-client answer to the same request, the server's peak RSS (VmHWM); then
// DISCONNECTS clients that go away after their first token, after which no slot is busy and no request waits.
// Prints tokens/s per slot count and their ratio, and of the concurrent phase the prompt rows evaluated per
// request and the verify blocks per target forward. Exit 77 (skip) without the models.
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const arg = (name, def) => { const i = process.argv.indexOf(`--${name}`); return i > 0 ? process.argv[i + 1] : def; };
const CLIENTS = Number(arg("clients", 8)), REQUESTS = Number(arg("requests", 25)), DISCONNECTS = Number(arg("disconnects", 200));
const PICTURES = Number(arg("pictures", 4)), TOKENS = Number(arg("tokens", 32)), SLOTS = arg("slots", "1,4").split(",").map(Number), METHOD = arg("method", null);
const BIN = process.env.VLMSPEC_BIN || "build/vlmspec";
const SERVER_ARGS = (arg("server-args", "") || "").split(" ").filter((a) => a);
const DRAFT = arg("draft", join("models", "draft-llava.gguf"));
const FILES = [arg("model", join("models", "target.gguf")), arg("mmproj", join("models", "target-mmproj.gguf")),
  ...(DRAFT === "none" ? [] : [DRAFT, arg("mmproj-draft", join("models", "draft-llava-mmproj.gguf"))])];
for (const f of FILES) if (!existsSync(f)) { console.log(`server_load: SKIPPED: ${f} is missing`); process.exit(77); }

let failures = 0;
const check = (cond, what) => { if (!cond) { failures++; console.log(`FAIL: ${what}`); } };
const tmp = mkdtempSync(join(tmpdir(), "vlmspec-load-"));
let server = null;
process.on("exit", () => { server?.kill("SIGKILL"); rmSync(tmp, { recursive: true, force: true }); });

execFileSync(BIN, ["data", "gen", "--out", join(tmp, "world"), "--seed", "14", "--train", "1", "--test", String(PICTURES), "--suites", "vqa", "--quiet"]);
const samples = readFileSync(join(tmp, "world", "test.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
const bodies = samples.map((s) => ({ temperature: 0, max_tokens: TOKENS, stream: true, stream_options: { include_usage: true },
  ...(METHOD ? { vlmspec: { method: METHOD } } : {}),
  messages: [{ role: "user", content: [
    { type: "image_url", image_url: { url: `data:image/png;base64,${readFileSync(join(tmp, "world", s.images[0])).toString("base64")}` } },
    { type: "text", text: s.turns[0].user.replace(/<image>\n?/g, "").trim() }] }] }));

function start(slots) {
  return new Promise((resolve, reject) => {
    server = spawn(BIN, ["serve", "-m", FILES[0], "--mmproj", FILES[1],
      ...(FILES.length > 2 ? ["-md", FILES[2], "--mmproj-draft", FILES[3]] : []), "--port", "0",
      "-np", String(slots), "--queue", "1024", ...SERVER_ARGS], { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    server.stderr.on("data", (d) => { err += d; const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(err); if (m) resolve(m[1]); });
    server.on("exit", (c) => reject(new Error(`server exited ${c}: ${err}`)));
  });
}

// one streamed request: its text and completion tokens
async function ask(url, body, signal) {
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body), signal });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const ev = (await r.text()).split("\n\n").filter((e) => e.startsWith("data: ") && e !== "data: [DONE]").map((e) => JSON.parse(e.slice(6)));
  const err = ev.find((e) => e.error);
  if (err) throw new Error(err.error.message);
  return { text: ev.map((e) => e.choices[0]?.delta?.content ?? "").join(""), tokens: ev.at(-1).usage.completion_tokens,
    prompt_n: ev.at(-1).timings?.prompt_n ?? 0 };
}

const rate = {};
for (const slots of SLOTS) {
  const url = await start(slots);
  const single = [];
  for (const b of bodies) single.push((await ask(url, b)).text);
  let errors = 0, mismatched = 0, tokens = 0, evaluated = 0, answered = 0;
  const counters = async () => {
    const m = await (await fetch(`${url}/metrics`)).text();
    const c = (name) => Number(new RegExp(`^vlmspec_${name} (\\d+)`, "m").exec(m)?.[1] ?? 0);
    return { blocks: c("verify_blocks_total"), forwards: c("verify_forwards_total"), undrafted: c("verify_blocks_undrafted_total") };
  };
  const before = await counters();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CLIENTS }, async (_, c) => {
    for (let i = 0; i < REQUESTS; i++) {
      const k = (c * REQUESTS + i) % bodies.length;
      try {
        const a = await ask(url, bodies[k]);
        tokens += a.tokens;
        evaluated += a.prompt_n, answered++;
        if (a.text !== single[k]) mismatched++;
      } catch (e) { errors++; if (errors < 4) console.log(`error: ${e.message}`); }
    }
  }));
  const secs = (performance.now() - t0) / 1e3;
  rate[slots] = tokens / secs;
  const end = await counters();
  const blocks = end.blocks - before.blocks, forwards = end.forwards - before.forwards;
  const undrafted = end.undrafted - before.undrafted;
  const rss = Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${server.pid}/status`, "utf8"))?.[1]) / 1024;
  console.log(`slots ${slots}: ${CLIENTS} clients x ${REQUESTS} requests in ${secs.toFixed(1)} s, ${tokens} tokens, ` +
    `${rate[slots].toFixed(1)} tokens/s, ${(evaluated / Math.max(answered, 1)).toFixed(1)} prompt rows evaluated per request, ` +
    `${(blocks / Math.max(forwards, 1)).toFixed(2)} blocks per target forward (${undrafted} undrafted), ${errors} errors, ${mismatched} answers differing from the single-client ones, peak RSS ${rss.toFixed(0)} MiB`);
  check(errors === 0, `slots ${slots}: ${errors} errors`);
  check(mismatched === 0, `slots ${slots}: ${mismatched} answers differ`);
  // clients that go away after their first token
  await Promise.all(Array.from({ length: DISCONNECTS }, async (_, i) => {
    const ac = new AbortController();
    try {
      const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ ...bodies[i % bodies.length], max_tokens: 200, temperature: 1, seed: i }), signal: ac.signal });
      await r.body.getReader().read();
    } catch { /* refused or aborted */ }
    ac.abort();
  }));
  let busy = "";
  for (let t = 0; t < 100; t++) { // the cancelled requests drain
    const m = await (await fetch(`${url}/metrics`)).text();
    busy = m.match(/vlmspec_requests_(processing|deferred) \d+/g).join(", ");
    if (/processing 0/.test(busy) && /deferred 0/.test(busy)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  check(/processing 0/.test(busy) && /deferred 0/.test(busy), `after ${DISCONNECTS} disconnecting clients: ${busy}`);
  const after = await ask(url, bodies[0]);
  check(after.text === single[0], "an answer after the disconnects");
  console.log(`slots ${slots}: ${DISCONNECTS} clients disconnected mid-stream; then ${busy}`);
  server.kill("SIGTERM");
  await new Promise((r) => server.on("exit", r));
  server = null;
}
if (SLOTS.length > 1) console.log(`throughput ${SLOTS.at(-1)} slots / ${SLOTS[0]} slot: ${(rate[SLOTS.at(-1)] / rate[SLOTS[0]]).toFixed(2)}x`);
console.log(failures ? `server_load: ${failures} checks failed` : "server_load: passed");
process.exit(failures ? 1 : 0);
