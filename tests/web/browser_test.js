// The explorer page in a real browser (Debian's Chromium, driven by playwright-core): the page is
// served from SITE_DIR on 127.0.0.1 and
//   1. the test contract: ?cmd=analyze|compare|simulate&... puts in #result-json exactly what
//      the native `pipetab ... --format json` prints for the same request;
//   2. an interaction: moving the M slider re-runs the comparison, and the ranking shown and
//      #result-json follow (equal to the native command at the new M);
//   3. no console errors, no page errors, no request leaves 127.0.0.1;
// and it leaves screenshots in SCREENSHOT_DIR (default SITE_DIR/../screenshots).
//   node tests/web/browser_test.js NATIVE_PIPETAB SITE_DIR [SCREENSHOT_DIR]
// Exit 77 (ctest's skip) without a built site, Chromium or playwright-core (tests/web: npm ci),
// unless PIPETAB_REQUIRE_WEB=1 (.ci/run), then 1.
"use strict";
const fs = require("fs");
const http = require("http");
const os = require("os");
const path = require("path");
const { spawnSync } = require("child_process");

const [native, site, shotsArg] = process.argv.slice(2);
const require_web = process.env.PIPETAB_REQUIRE_WEB === "1";
function skip(why) {
  console.error(`skipped: ${why}`);
  process.exit(require_web ? 1 : 77);
}
if (!native || !site) {
  console.error("usage: node tests/web/browser_test.js NATIVE_PIPETAB SITE_DIR [SCREENSHOT_DIR]");
  process.exit(2);
}
if (!fs.existsSync(path.join(site, "index.html")) || !fs.existsSync(path.join(site, "pipetab.wasm")))
  skip(`${site} has no built site (scripts/build-web)`);
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
if (!fs.existsSync(chromiumPath)) skip(`no Chromium at ${chromiumPath} (apt-get install chromium)`);
let chromium;
try {
  ({ chromium } = require("playwright-core"));
} catch (e) {
  skip("playwright-core is not installed (cd tests/web && npm ci)");
}
const shots = shotsArg || path.join(site, "..", "screenshots");
fs.mkdirSync(shots, { recursive: true });

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css",
                ".wasm": "application/wasm", ".svg": "image/svg+xml", ".png": "image/png" };
function serve(root) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://127.0.0.1");
    const rel = url.pathname === "/" ? "index.html" : decodeURIComponent(url.pathname).replace(/^\/+/, "");
    const file = path.join(root, rel);
    if (!file.startsWith(path.resolve(root)) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404);
      res.end("not found");
      return;
    }
    res.writeHead(200, { "Content-Type": TYPES[path.extname(file)] || "application/octet-stream" });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

function nativeJson(args) {
  const r = spawnSync(path.resolve(native), args, { encoding: "utf8", maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`native pipetab ${args.join(" ")} failed: ${r.stderr}`);
  return r.stdout;
}

// The page's number format (app.js fmt): 4 significant digits, trailing zeros of the fraction
// dropped.
const fmt4 = (x) => Number(x).toPrecision(4).replace(/(\.\d*?)0+(e|$)/, "$1$2").replace(/\.(e|$)/, "$1");

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
}

(async () => {
  const server = await serve(path.resolve(site));
  const origin = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({ executablePath: chromiumPath, headless: true,
                                          // Root in a container: no sandbox; a small /dev/shm: use /tmp.
                                          args: ["--no-sandbox", "--disable-dev-shm-usage"] });
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const problems = [];
  context.on("request", (req) => {
    if (!req.url().startsWith(origin) && !req.url().startsWith("data:") && !req.url().startsWith("blob:"))
      problems.push(`request outside the site: ${req.url()}`);
  });
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));

  async function resultAfter(action) {
    const before = await page.$eval("#result-json", (e) => e.textContent).catch(() => "");
    await action();
    await page.waitForFunction((old) => {
      const text = document.getElementById("result-json").textContent;
      return text && text !== old && !document.getElementById("run-status").textContent.startsWith("Running");
    }, before, { timeout: 60000 });
    return page.$eval("#result-json", (e) => e.textContent);
  }

  // 1. The contract, for each command.
  const contract = [
    ["?cmd=analyze&schedule=zb-v&S=4&M=8&model=gpt3-13b&system=dgx-a100",
     ["analyze", "zb-v", "-S", "4", "-M", "8", "--model", "gpt3-13b", "--system", "dgx-a100", "--format", "json"]],
    ["?cmd=compare&S=4&M=8&system=dgx-h100",
     ["compare", "-S", "4", "-M", "8", "--system", "dgx-h100", "--format", "json"]],
    ["?cmd=simulate&schedule=interleaved&S=4&M=8&v=2&model=llama2-13b&system=dgx-a100&bw=0.5",
     ["simulate", "interleaved", "-S", "4", "-M", "8", "-v", "2", "--model", "llama2-13b", "--system", "dgx-a100", "--bandwidth-scale", "0.5", "--format", "json"]],
    // The layout and job keys are the command line's flags.
    ["?cmd=simulate&schedule=1f1b&S=4&M=8&model=llama2-70b&system=dgx-h100&tp=8&cp=1&dp=2&seq=4096&mb=1&precision=bf16&recompute=selective&sp=on&fsdp=on",
     ["simulate", "1f1b", "-S", "4", "-M", "8", "--model", "llama2-70b", "--system", "dgx-h100", "--tp", "8", "--cp", "1", "--dp", "2", "--seq-len", "4096", "--micro-batch", "1", "--precision", "bf16", "--recompute", "selective", "--sequence-parallel", "--fsdp", "--format", "json"]],
    ["?cmd=analyze&schedule=zb-v&S=4&M=8&model=llama2-13b&system=dgx-a100&tp=2&ep=1&fsdp=off&sp=off",
     ["analyze", "zb-v", "-S", "4", "-M", "8", "--model", "llama2-13b", "--system", "dgx-a100", "--tp", "2", "--ep", "1", "--no-sequence-parallel", "--no-fsdp", "--format", "json"]],
  ];
  for (const [query, args] of contract) {
    const got = await resultAfter(() => page.goto(origin + "/" + query));
    check(got === nativeJson(args), `${query}: #result-json equals pipetab ${args.join(" ")}`);
    await page.waitForFunction(() => document.querySelector("#timeline svg"), null, { timeout: 60000 });
  }
  await page.screenshot({ path: path.join(shots, "simulate.png"), fullPage: true });

  // 1a. The answer first: the headline of a simulated step, and what to do when it does not fit
  // (Llama 2 70B on 4 GPUs: one stage holds 17.5B parameters).
  const fits = JSON.parse(nativeJson(["simulate", "1f1b", "-S", "4", "-M", "8", "--model", "llama2-70b", "--system", "dgx-h100", "--tp", "8", "--cp", "1", "--dp", "2", "--seq-len", "4096", "--micro-batch", "1", "--precision", "bf16", "--recompute", "selective", "--sequence-parallel", "--fsdp", "--format", "json"]));
  await resultAfter(() => page.goto(origin + "/?cmd=simulate&schedule=1f1b&S=4&M=8&model=llama2-70b&system=dgx-h100&tp=8&cp=1&dp=2&seq=4096&mb=1&precision=bf16&recompute=selective&sp=on&fsdp=on"));
  await page.waitForFunction(() => document.getElementById("headline").textContent.startsWith("Step"), null, { timeout: 60000 });
  const headline = await page.$eval("#headline", (e) => e.textContent);
  check(headline.startsWith(`Step ${fmt4(fits.runtime_s)} s · `) &&
        headline.includes(`${Math.round(fits.tokens_per_s).toLocaleString("en-US")} tokens/s`) &&
        headline.includes(`MFU ${(100 * fits.mfu).toFixed(1)} %`) &&
        headline.includes(`90 % range ${fmt4(fits.runtime_interval_s.low)}–${fmt4(fits.runtime_interval_s.high)} s`),
        `the headline gives step, its error bar, tokens/s and MFU (${headline})`);
  const tooBig = JSON.parse(nativeJson(["simulate", "1f1b", "-S", "4", "-M", "8", "--model", "llama2-70b", "--system", "dgx-h100", "--format", "json"]));
  await resultAfter(() => page.goto(origin + "/?cmd=simulate&schedule=1f1b&S=4&M=8&model=llama2-70b&system=dgx-h100"));
  await page.waitForFunction(() => !document.getElementById("fit").hidden, null, { timeout: 60000 }).catch(() => {});
  const fit = await page.$eval("#fit", (e) => (e.hidden ? "" : e.textContent));
  check(tooBig.over_capacity.some((x) => x) &&
        fit.startsWith(`Does not fit: the busiest device needs ${(tooBig.peak_memory_max_bytes / 1e9).toFixed(1)} GB of ${(tooBig.memory_capacity_bytes / 1e9).toFixed(0)} GB usable. Try a larger TP`),
        `a step that does not fit says so and what to try (${fit})`);
  // The fields: TP typed in the form enters the URL and the command line, and the result follows.
  const byField = await resultAfter(async () => { await page.fill("#tp", "8"); await page.press("#tp", "Enter"); });
  check(byField === nativeJson(["simulate", "1f1b", "-S", "4", "-M", "8", "--model", "llama2-70b", "--system", "dgx-h100", "--tp", "8", "--format", "json"]) &&
        (await page.url()).includes("tp=8"), "TP typed in the form: the URL holds tp=8 and #result-json equals simulate ... --tp 8");

  // 1b. The first view (no system in the query) ranks on the system its selector shows and names
  // it: the command compares the three regimes, the page draws the selector's, balanced.
  await resultAfter(() => page.goto(origin + "/?cmd=compare&S=4&M=8"));
  await page.waitForFunction(() => document.querySelector("#ranking tbody tr"), null, { timeout: 60000 });
  const selector = await page.$eval("#system", (e) => e.value);
  const named = await page.$eval("#levels-system", (e) => e.textContent);
  // Each schedule with its simulated rank, as drawn and as each regime ranks them (compute-bound,
  // which the page once drew, ranks interleaved first; balanced ranks 1F1B first).
  const regimes = JSON.parse(nativeJson(["compare", "-S", "4", "-M", "8", "--format", "json"])).comparisons;
  const simRanks = (c) => c.schedules.map((x) => `${x.schedule} ${x.rank.simulation}`).join(", ");
  const drawn = (await page.$$eval("#ranking tbody tr", (rows) =>
    rows.map((r) => `${r.cells[0].textContent.trim()} ${/\((\d+)\)/.exec(r.cells[4].textContent)[1]}`))).join(", ");
  const balanced = simRanks(regimes.find((c) => c.system === "balanced"));
  check(selector === "balanced" && named.startsWith("on balanced"),
        `the first view names the system its selector shows (${selector}: "${named}")`);
  check(drawn === balanced && balanced !== simRanks(regimes[0]),
        `the first view ranks on balanced (${drawn}), not on ${regimes[0].system} (${simRanks(regimes[0])})`);

  // 2. An interaction: M from 8 to 16 on the comparison re-ranks, as the native command does.
  await resultAfter(() => page.goto(origin + "/?cmd=compare&S=4&M=8&system=dgx-h100"));
  await page.waitForFunction(() => document.querySelector("#timeline svg"), null, { timeout: 60000 });
  await page.screenshot({ path: path.join(shots, "compare.png"), fullPage: true });
  const skipped = await page.$eval("#skipped", (e) => (e.hidden ? "" : e.textContent));
  check(skipped.startsWith("hanayo: M = 8 must equal S = 4"), `the comparison says what it left out (${skipped})`);
  const before = await page.$eval("#ranking", (e) => e.textContent);
  const got = await resultAfter(() => page.$eval("#M", (e) => {
    e.value = "16";
    e.dispatchEvent(new Event("input", { bubbles: true }));
  }));
  const want = nativeJson(["compare", "-S", "4", "-M", "16", "--system", "dgx-h100", "--format", "json"]);
  check(got === want, "M slider to 16: #result-json equals pipetab compare -S 4 -M 16 --system dgx-h100");
  const after = await page.$eval("#ranking", (e) => e.textContent);
  check(after !== before, "M slider to 16: the ranking table changed");
  const ranks = JSON.parse(want).comparisons[0].schedules.map((s) => `${s.schedule}:${s.rank.simulation}`);
  // The rank shown in the simulated-step column, "0.8192 (4)".
  const shown = await page.$$eval("#ranking tbody tr", (rows) => rows.map((r) =>
    `${r.cells[0].textContent}:${(/\((\d+)\)$/.exec(r.cells[4].textContent) || [])[1]}`));
  // Clicking a schedule's name shows its own timeline.
  await page.click("#ranking tbody tr:nth-child(2) button");
  const shows = await page.waitForFunction(() => document.getElementById("detail-title").textContent.startsWith("1f1b"),
                                           null, { timeout: 60000 }).then(() => true, () => false);
  check(shows, "clicking 1f1b in the table shows its timeline");
  check(JSON.stringify(shown) === JSON.stringify(ranks), `the table shows the simulation ranks of M = 16 (${shown.join(" ")})`);
  check((await page.url()).includes("M=16"), "the URL holds the new M");

  // The keyboard alone: Tab reaches the M slider, and an arrow key moves it and re-runs.
  let tabs = 0;
  while (tabs < 60 && (await page.evaluate(() => document.activeElement && document.activeElement.id)) !== "M") {
    await page.keyboard.press("Tab");
    tabs++;
  }
  check(tabs < 60, `Tab reaches the M slider (${tabs} presses)`);
  const byKeys = await resultAfter(() => page.keyboard.press("ArrowRight"));
  check(byKeys === nativeJson(["compare", "-S", "4", "-M", "17", "--system", "dgx-h100", "--format", "json"]),
        "ArrowRight on the slider: M = 17, #result-json equals the native comparison");

  // Your own schedule: a PyTorch CSV picked (as dropped) on the analyze view.
  const csv = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n";
  await resultAfter(() => page.goto(origin + "/?cmd=analyze&schedule=1f1b&S=2&M=2"));
  const fromCsv = await resultAfter(() => page.setInputFiles("#table-file",
    { name: "mine.csv", mimeType: "text/csv", buffer: Buffer.from(csv) }));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "pipetab-browser-"));
  fs.writeFileSync(path.join(tmp, "mine.csv"), csv);
  const csvArgs = ["analyze", "--table", "mine.csv", "--format", "json"];
  const csvWant = spawnSync(path.resolve(native), csvArgs, { cwd: tmp, encoding: "utf8" }).stdout;
  fs.rmSync(tmp, { recursive: true, force: true });
  check(fromCsv === csvWant, "a dropped PyTorch CSV keeps its name: #result-json equals pipetab analyze --table mine.csv");
  const line = await page.$eval("#command-line", (e) => e.textContent);
  check(line.includes("--table mine.csv"), `the command line names the dropped file (${line})`);
  // A custom model: "custom" starts from the preset's TOML, an edit re-runs, and the URL carries
  // the TOML so that the link reproduces the view.
  await resultAfter(() => page.goto(origin + "/?cmd=analyze&schedule=1f1b&S=4&M=8&model=gpt3-13b"));
  await page.selectOption("#model", "custom");
  const start = await page.$eval("#model-toml", (e) => e.value);
  check(start.includes('name = "gpt3-13b"'), "custom model starts from the chosen preset's TOML");
  const tiny = 'name = "tiny"\n[transformer]\nlayers = 8\nhidden = 1024\nheads = 16\nseq_len = 2048\nvocab = 32000\n';
  const fromToml = await resultAfter(() => page.fill("#model-toml", tiny));
  const tomlDir = fs.mkdtempSync(path.join(os.tmpdir(), "pipetab-browser-"));
  fs.writeFileSync(path.join(tomlDir, "model.toml"), tiny);
  const tomlArgs = ["analyze", "1f1b", "-S", "4", "-M", "8", "--model", "model.toml", "--format", "json"];
  const tomlWant = spawnSync(path.resolve(native), tomlArgs, { cwd: tomlDir, encoding: "utf8" }).stdout;
  fs.rmSync(tomlDir, { recursive: true, force: true });
  check(fromToml === tomlWant, "an edited model TOML: #result-json equals pipetab analyze ... --model model.toml");
  const shared = page.url();
  await page.goto(shared);
  await page.waitForFunction(() => document.getElementById("result-json").textContent &&
                                   document.getElementById("run-status").textContent.startsWith("Done"),
                             null, { timeout: 60000 });
  const reloaded = await page.$eval("#result-json", (e) => e.textContent);
  check(reloaded === tomlWant, "the page's link reproduces the custom model's result");

  // Downloads: the JSON of the request and the trace, as files.
  const [json] = await Promise.all([page.waitForEvent("download"), page.click("#dl-json")]);
  check(fs.readFileSync(await json.path(), "utf8") === reloaded, "Download the JSON gives #result-json");
  const [trace] = await Promise.all([page.waitForEvent("download"), page.click("#dl-trace")]);
  const events = JSON.parse(fs.readFileSync(await trace.path(), "utf8"));
  check(Array.isArray(events.traceEvents) && events.traceEvents.length > 0, `Download the trace gives a Chrome trace (${(events.traceEvents || []).length} events)`);

  // A plan with its progress and its top layouts.
  // Plan opens with its form filled: the GPU count and batch it needs (64 and 64), not an error.
  {
    const opened = await resultAfter(() => page.goto(origin + "/?cmd=plan"));
    const form = await page.$eval("#gpus", (e) => e.value) + " " + await page.$eval("#batch", (e) => e.value);
    check(form === "64 64" && opened === nativeJson(["plan", "--gpus", "64", "--global-batch", "64", "--format", "json"]),
          `?cmd=plan opens with GPUs and batch filled (${form}) and runs pipetab plan --gpus 64 --global-batch 64`);
  }
  await resultAfter(() => page.goto(origin + "/?cmd=plan&model=llama2-13b&system=dgx-a100&gpus=32&batch=64"));
  const rows = await page.$$eval("#plan-table tbody tr", (r) => r.length);
  check(rows > 0, `plan shows its top layouts (${rows})`);
  const best = JSON.parse(nativeJson(["plan", "--model", "llama2-13b", "--system", "dgx-a100", "--gpus", "32", "--global-batch", "64", "--format", "json"])).top[0];
  const first = await page.$$eval("#plan-table tbody tr:first-child td", (cells) => cells.map((c) => c.textContent));
  check(first[3] === Math.round(best.simulation.tokens_per_s).toLocaleString("en-US") &&
        first[4] === `${(100 * best.simulation.mfu).toFixed(1)} %` && first[6].startsWith("compute "),
        `plan's rows give tokens/s, MFU and where the step goes (${first.slice(3).join(" | ")})`);
  // A layout's name shows its own simulated step: the timeline of that layout.
  await page.click("#plan-table tbody tr:first-child button");
  const layoutShown = await page.waitForFunction((d) => document.getElementById("detail-title").textContent.startsWith(d) &&
                                                 document.querySelector("#timeline svg") && !document.getElementById("detail").hidden,
                                                 best.description, { timeout: 60000 }).then(() => true, () => false);
  const layoutHead = await page.$eval("#headline", (e) => e.textContent);
  check(layoutShown && layoutHead.startsWith(`Step ${fmt4(best.runtime_s)} s`),
        `clicking plan's best layout shows its timeline and its step (${layoutHead})`);
  await page.waitForFunction(() => document.getElementById("grid").textContent, null, { timeout: 60000 });
  const grid = await page.$eval("#grid", (e) => e.textContent);
  check(!grid.startsWith("pipetab: error") && grid.includes("dev"), `and its table (${grid.slice(0, 60).trim()}…)`);
  await page.screenshot({ path: path.join(shots, "plan.png"), fullPage: true });
  // Plan with layout fields: the lists go to the command line as they are.
  const planned = await resultAfter(() => page.goto(origin + "/?cmd=plan&model=llama2-13b&system=dgx-a100&gpus=32&batch=64&tp=2,4&fsdp=off&mb=1"));
  check(planned === nativeJson(["plan", "--model", "llama2-13b", "--system", "dgx-a100", "--gpus", "32", "--global-batch", "64", "--tp", "2,4", "--micro-batch", "1", "--fsdp", "off", "--format", "json"]),
        "?cmd=plan&...&tp=2,4&fsdp=off&mb=1 equals pipetab plan ... --tp 2,4 --micro-batch 1 --fsdp off");

  // On a phone: the answer comes before the form, and the charts' labels are 11 px or more.
  {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
    const p = await phone.newPage();
    p.on("pageerror", (e) => problems.push(`page error (phone): ${e.message}`));
    await p.goto(origin + "/?cmd=compare&S=4&M=8&system=dgx-h100");
    await p.waitForFunction(() => document.querySelector("#slope svg text") && document.querySelector("#timeline svg"), null, { timeout: 90000 });
    const order = await p.evaluate(() => [document.getElementById("results").getBoundingClientRect().top,
                                          document.getElementById("controls").getBoundingClientRect().top]);
    check(order[0] < order[1], `on a phone the results come first (results at ${Math.round(order[0])} px, form at ${Math.round(order[1])} px)`);
    // Rendered size: the text's font size times the SVG's scale on screen. The timeline's op
    // labels are sized to fit their cells (each op also has a tooltip) and are left out.
    const smallest = await p.evaluate(() => {
      let least = Infinity;
      for (const t of document.querySelectorAll("#slope svg text, #timeline svg text:not(.label)")) {
        const svg = t.ownerSVGElement;
        const scale = svg.getScreenCTM().a;
        least = Math.min(least, parseFloat(getComputedStyle(t).fontSize) * scale);
      }
      return least;
    });
    check(smallest >= 11, `on a phone the charts' labels are at least 11 px (smallest ${smallest.toFixed(1)} px)`);
    await p.screenshot({ path: path.join(shots, "phone.png"), fullPage: true });
    await phone.close();
  }

  check(problems.length === 0, `no console errors, page errors or outside requests${problems.length ? ": " + problems.join("; ") : ""}`);
  await browser.close();
  server.close();
  console.log(failures ? `${failures} check(s) failed` : "all browser checks passed");
  process.exit(failures ? 1 : 0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
