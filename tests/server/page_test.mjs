// The chat page of `vlmspec serve` in a real browser: headless Debian chromium driven by npm's playwright-core
// uploads a picture, asks its question, and the streamed answer read from the page must equal the server's
// greedy answer to the same request; drafted tokens are marked on the page. Exit 77 (skip) without the
// models, chromium (apt-get install chromium) or playwright-core (npm install --prefix tests/server).
import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const BIN = process.env.VLMSPEC_BIN || "build/vlmspec";
const FILES = ["target.gguf", "target-mmproj.gguf", "draft-llava.gguf", "draft-llava-mmproj.gguf"].map((f) => join("models", f));
const skip = (why) => { console.log(`server_page: SKIPPED: ${why}`); process.exit(77); };
for (const f of FILES) if (!existsSync(f)) skip(`${f} is missing`);
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
if (!existsSync(CHROMIUM)) skip(`${CHROMIUM} is missing (apt-get install chromium)`);
let chromium;
try { ({ chromium } = await import("playwright-core")); } catch { skip("playwright-core is not installed (npm install --prefix tests/server playwright-core)"); }

let failures = 0, checks = 0;
const check = (cond, what) => { checks++; if (!cond) { failures++; console.log(`FAIL: ${what}`); } };
const tmp = mkdtempSync(join(tmpdir(), "vlmspec-page-"));
let server = null, browser = null;
process.on("exit", () => { server?.kill("SIGKILL"); rmSync(tmp, { recursive: true, force: true }); });

execFileSync(BIN, ["data", "gen", "--out", join(tmp, "world"), "--seed", "12", "--train", "1", "--test", "1", "--suites", "vqa", "--quiet"]);
const sample = JSON.parse(readFileSync(join(tmp, "world", "test.jsonl"), "utf8").split("\n")[0]);
const image = join(tmp, "world", sample.images[0]);
const question = sample.turns[0].user.replace(/<image>\n?/g, "").trim();

const url = await new Promise((resolve, reject) => {
  server = spawn(BIN, ["serve", "-m", FILES[0], "--mmproj", FILES[1], "-md", FILES[2], "--mmproj-draft", FILES[3], "--port", "0",
    "-n", "64"], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  server.stderr.on("data", (d) => {
    err += d;
    const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(err);
    if (m) resolve(m[1]);
  });
  server.on("exit", (code) => reject(new Error(`server exited ${code}: ${err}`)));
});

// the server's own greedy answer to the request the page sends
const ref = await (await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ temperature: 0, messages: [{ role: "user", content: [
    { type: "image_url", image_url: { url: `data:image/png;base64,${readFileSync(image).toString("base64")}` } },
    { type: "text", text: question }] }] }) })).json();
const want = ref.choices[0].message.content;
check(typeof want === "string" && want.length > 0, "the reference answer");

try {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--headless=new"] });
  const page = await browser.newPage();
  await page.goto(url);
  await page.setInputFiles("#image", image);
  await page.fill("#text", question);
  await page.click("#send");
  await page.waitForSelector(".assistant .stats, .assistant .error", { timeout: 60000 });
  const got = await page.textContent(".assistant .reply");
  const err = await page.$(".assistant .error");
  check(!err, `the page shows an error: ${err ? await err.textContent() : ""}`);
  check(got === want, `the page's answer '${got}' differs from the server's '${want}'`);
  const drafted = await page.$$eval(".assistant .reply .drafted", (els) => els.length);
  check(drafted > 0, "drafted tokens are marked");
  const stats = await page.textContent(".assistant .stats");
  check(/tokens, .* tok\/s, method m/.test(stats) && /drafted tokens accepted, tau/.test(stats), `statistics: '${stats}'`);
  check(await page.$eval(".user img", (im) => im.naturalWidth > 0), "the uploaded picture is shown");
} finally {
  await browser?.close();
}
console.log(failures ? `server_page: ${failures} of ${checks} checks failed` : `server_page: all ${checks} checks passed`);
process.exit(failures ? 1 : 0);
