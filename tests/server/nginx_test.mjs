// The scale-out example (examples/nginx/vlmspec.conf, docs/server.md): two `vlmspec serve` replicas behind
// nginx on loopback serve 20 requests round-robin; every greedy answer is the same and both replicas answered.
// Exit 77 (skip) without the models or nginx (apt-get install nginx).
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync, rmSync, mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const BIN = process.env.VLMSPEC_BIN || "build/vlmspec";
const FILES = ["target.gguf", "target-mmproj.gguf", "draft-llava.gguf", "draft-llava-mmproj.gguf"].map((f) => join("models", f));
const skip = (why) => { console.log(`server_nginx: SKIPPED: ${why}`); process.exit(77); };
for (const f of FILES) if (!existsSync(f)) skip(`${f} is missing`);
const NGINX = ["/usr/sbin/nginx", "/usr/bin/nginx"].find((p) => existsSync(p));
if (!NGINX) skip("nginx is not installed (apt-get install nginx)");

let failures = 0, checks = 0;
const check = (cond, what) => { checks++; if (!cond) { failures++; console.log(`FAIL: ${what}`); } };
const tmp = mkdtempSync(join(tmpdir(), "vlmspec-nginx-"));
const procs = [];
process.on("exit", () => { for (const p of procs) p.kill("SIGKILL"); rmSync(tmp, { recursive: true, force: true }); });

function replica() {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, ["serve", "-m", FILES[0], "--mmproj", FILES[1], "-md", FILES[2], "--mmproj-draft", FILES[3],
      "--port", "0", "-t", "1"], { stdio: ["ignore", "ignore", "pipe"] });
    procs.push(p);
    let err = "";
    p.stderr.on("data", (d) => { err += d; const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err); if (m) resolve(Number(m[1])); });
    p.on("exit", (c) => reject(new Error(`replica exited ${c}: ${err}`)));
  });
}
const freePort = () => new Promise((resolve) => { const s = createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); }); });

const [p1, p2] = await Promise.all([replica(), replica()]);
const front = await freePort();
const site = readFileSync("examples/nginx/vlmspec.conf", "utf8")
  .replace("127.0.0.1:8081", `127.0.0.1:${p1}`).replace("127.0.0.1:8082", `127.0.0.1:${p2}`).replace("127.0.0.1:8080", `127.0.0.1:${front}`);
check(site.includes(`:${p1};`) && site.includes(`:${p2};`) && site.includes(`listen 127.0.0.1:${front};`), "the example's ports were found");
mkdirSync(join(tmp, "logs"));
writeFileSync(join(tmp, "site.conf"), site);
writeFileSync(join(tmp, "nginx.conf"), `worker_processes 1;\nerror_log ${tmp}/logs/error.log;\npid ${tmp}/nginx.pid;\n` +
  `events { worker_connections 256; }\nhttp {\n  access_log off;\n  client_body_temp_path ${tmp}/body;\n  proxy_temp_path ${tmp}/proxy;\n` +
  `  include ${tmp}/site.conf;\n}\n`);
const ng = spawn(NGINX, ["-p", tmp, "-c", join(tmp, "nginx.conf"), "-g", "daemon off;"], { stdio: ["ignore", "ignore", "pipe"] });
procs.push(ng);
let ngErr = "";
ng.stderr.on("data", (d) => { ngErr += d; });
const base = `http://127.0.0.1:${front}`;
for (let i = 0; i < 100; i++) { // until nginx listens
  try { await fetch(`${base}/health`); break; } catch { await new Promise((r) => setTimeout(r, 100)); }
}

execFileSync(BIN, ["data", "gen", "--out", join(tmp, "world"), "--seed", "13", "--train", "1", "--test", "1", "--suites", "vqa", "--quiet"]);
const sample = JSON.parse(readFileSync(join(tmp, "world", "test.jsonl"), "utf8").split("\n")[0]);
const uri = `data:image/png;base64,${readFileSync(join(tmp, "world", sample.images[0])).toString("base64")}`;
const body = JSON.stringify({ temperature: 0, max_tokens: 24, messages: [{ role: "user", content: [
  { type: "image_url", image_url: { url: uri } }, { type: "text", text: "Describe the picture." }] }] });
const answers = [];
for (let i = 0; i < 20; i++) {
  const r = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body });
  const j = await r.json().catch(() => null);
  check(r.status === 200 && j?.choices?.[0]?.message, `request ${i}: ${r.status} ${ngErr}`);
  answers.push(j?.choices?.[0]?.message?.content);
}
check(answers.every((a) => a === answers[0]), "every greedy answer is the same");
const served = [];
for (const p of [p1, p2]) {
  const m = await (await fetch(`http://127.0.0.1:${p}/metrics`)).text();
  served.push(Number(/vlmspec_requests_total (\d+)/.exec(m)?.[1]));
}
check(served[0] === 10 && served[1] === 10, `round-robin: the replicas served ${served.join(" and ")} requests`);
// a stream through the proxy
const rs = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
  body: body.replace('"temperature":0', '"temperature":0,"stream":true') });
const text = await rs.text();
check(rs.status === 200 && text.trim().endsWith("data: [DONE]"), "a stream through nginx");
console.log(failures ? `server_nginx: ${failures} of ${checks} checks failed` : `server_nginx: all ${checks} checks passed (replicas served ${served.join(" + ")})`);
process.exit(failures ? 1 : 0);
