// The web engine against the native command: every request of a grid is run by
// build-web/site/pipetab.{js,wasm} under node (through web/engine.js, as the page runs it) and by
// the native `pipetab`; stdout, stderr, the exit code and the files written must be byte-equal.
//   node tests/web/engine_test.js NATIVE_PIPETAB SITE_DIR
// Exit 0 when all agree; 77 (ctest's skip) when SITE_DIR has no module, unless
// PIPETAB_REQUIRE_WEB=1 (as .ci/run sets), then 1.
"use strict";
const fs = require("fs");
const path = require("path");
const os = require("os");
const { spawnSync } = require("child_process");

const [native, site] = process.argv.slice(2);
if (!native || !site) {
  console.error("usage: node tests/web/engine_test.js NATIVE_PIPETAB SITE_DIR");
  process.exit(2);
}
if (!fs.existsSync(path.join(site, "pipetab.wasm"))) {
  console.error(`${site}: no pipetab.wasm (build it with scripts/build-web)`);
  process.exit(process.env.PIPETAB_REQUIRE_WEB === "1" ? 1 : 77);
}
const createPipetab = require(path.resolve(site, "pipetab.js"));
const { createEngine } = require(path.resolve(site, "engine.js"));

// A PyTorch schedule CSV, as a user would drop it on the page (1F1B, 2 stages, 2 microbatches).
const csv = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n";
const model = 'name = "tiny"\n[transformer]\nlayers = 8\nhidden = 1024\nheads = 16\nseq_len = 2048\nvocab = 32000\n';

const json = ["--format", "json"];
const requests = [];
for (const schedule of ["1f1b", "gpipe", "interleaved", "zb-v", "zb-h1", "chimera", "dualpipev", "v-min"])
  for (const [S, M] of [["4", "8"], ["8", "16"]])
    requests.push({ args: ["analyze", schedule, "-S", S, "-M", M, "--model", "gpt3-13b", "--system", "dgx-a100", ...json] });
for (const system of ["balanced", "network-bound", "dgx-h100"])
  requests.push({ args: ["compare", "-S", "4", "-M", "8", "--system", system, ...json] });
requests.push({ args: ["compare", "-S", "8", "-M", "32", "--model", "llama2-70b", "--system", "dgx-h100", ...json] });
requests.push({ args: ["compare", "-S", "4", "-M", "8"] });  // the text report too
for (const schedule of ["1f1b", "interleaved", "zb-v"])
  requests.push({ args: ["simulate", schedule, "-S", "4", "-M", "8", "--model", "llama2-13b", "--system", "dgx-a100", "--tp", "8", "--dp", "2", ...json] });
requests.push({ args: ["simulate", "1f1b", "-S", "4", "-M", "8", "--model", "llama3.1-8b", "--system", "dgx-h100", "--cp", "2", "--fsdp", "--dp", "2", ...json] });
// A mixture of experts with expert parallelism, its all-to-all overlapped (issue 25).
requests.push({ args: ["simulate", "interleaved", "-S", "2", "-M", "4", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--dp", "8", "--ep", "8", "--a2a-overlap", ...json] });
requests.push({ args: ["cost", "--model", "deepseek-v3", "--ep", "8", "--dp", "8", "--format", "json"] });
requests.push({ args: ["simulate", "zb-v", "-S", "4", "-M", "8", "--svg", "timeline.svg", "--trace", "trace.json", ...json], outputs: ["timeline.svg", "trace.json"] });
requests.push({ args: ["analyze", "hanayo", "-S", "4", "-M", "4", ...json] });
requests.push({ args: ["show", "zb-v", "-S", "4", "-M", "8"] });
requests.push({ args: ["analyze", "--table", "mine.csv", "--format", "json"], inputs: { "mine.csv": csv } });
requests.push({ args: ["analyze", "1f1b", "-S", "4", "-M", "8", "--model", "tiny.toml", "--format", "json"], inputs: { "tiny.toml": model } });
requests.push({ args: ["sensitivity", "-S", "4", "-M", "8", "--format", "json"] });
requests.push({ args: ["plan", "--model", "llama2-13b", "--system", "dgx-a100", "--gpus", "32", "--global-batch", "64", "--format", "json", "-j", "1"] });
// Failures: the same one line and exit code.
requests.push({ args: ["analyze", "no-such-schedule"], fails: true });
requests.push({ args: ["analyze", "1f1b", "-S", "0"], fails: true });
requests.push({ args: ["simulate", "1f1b", "--model", "missing.toml"], fails: true });
requests.push({ args: ["analyze", "--table", "bad.csv"], inputs: { "bad.csv": "0F0,0X1\n" }, fails: true });
requests.push({ args: ["analyze", "hanayo", "-S", "4", "-M", "8"], fails: true });


function nativeRun(request) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pipetab-web-test-"));
  for (const [name, data] of Object.entries(request.inputs || {})) fs.writeFileSync(path.join(dir, name), data);
  const r = spawnSync(path.resolve(native), request.args, { cwd: dir, encoding: "buffer", maxBuffer: 1 << 28 });
  const files = {};
  for (const name of request.outputs || []) {
    const p = path.join(dir, name);
    if (fs.existsSync(p)) files[name] = fs.readFileSync(p);
  }
  fs.rmSync(dir, { recursive: true, force: true });
  return { code: r.status, stdout: r.stdout.toString("utf8"), stderr: r.stderr.toString("utf8"), files };
}

function firstDifference(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return `at byte ${i}: native ${JSON.stringify(a.slice(i, i + 60))} / web ${JSON.stringify(b.slice(i, i + 60))}`;
}

(async () => {
  const engine = await createEngine(createPipetab, { wasmBinary: fs.readFileSync(path.join(site, "pipetab.wasm")) });
  let failed = 0;
  for (const request of requests) {
    const want = nativeRun(request);
    const got = await engine.run(request.args, { inputs: request.inputs, outputs: request.outputs });
    const problems = [];
    if (want.code !== got.code) problems.push(`exit code: native ${want.code}, web ${got.code}`);
    if (want.stdout !== got.stdout) problems.push(`stdout differs ${firstDifference(want.stdout, got.stdout)}`);
    if (want.stderr !== got.stderr) problems.push(`stderr differs ${firstDifference(want.stderr, got.stderr)}`);
    for (const name of request.outputs || []) {
      const a = want.files[name], b = got.files[name];
      if (!a || !b) problems.push(`${name}: written natively ${!!a}, on the web ${!!b}`);
      else if (Buffer.compare(Buffer.from(a), Buffer.from(b)) !== 0) problems.push(`${name} differs ${firstDifference(Buffer.from(a).toString(), Buffer.from(b).toString())}`);
    }
    if ((want.code !== 0) !== !!request.fails) problems.push(`the native command exited ${want.code}: ${want.stderr.trim()}`);
    if (want.code === 0 && want.stdout.length === 0 && !(request.outputs || []).length) problems.push("the native command printed nothing");
    const label = `pipetab ${request.args.join(" ")}`;
    if (problems.length) {
      failed++;
      console.log(`FAIL ${label}\n  ${problems.join("\n  ")}`);
    } else {
      console.log(`ok   ${label} (exit ${want.code}, ${want.stdout.length} bytes)`);
    }
  }
  // 2 MB of arguments, more than one native command line may carry (Linux's ARG_MAX): the
  // engine copied them onto its stack and trapped above about 1.3 MB. Now the command's own
  // error, one line, shortened.
  const huge = await engine.run(["analyze", ...Array.from({ length: 20 }, (_, i) => String(i % 10).repeat(100000))]);
  const hugeOk = huge.code === 2 && huge.stderr.startsWith("pipetab: error: unexpected arguments") &&
    huge.stderr.length < 4200 && huge.stderr.indexOf("\n") === huge.stderr.length - 1;
  console.log(`${hugeOk ? "ok  " : "FAIL"} 2 MB of arguments: exit ${huge.code}, ${huge.stderr.length} bytes of stderr`);
  if (!hugeOk) failed++;
  // A NUL inside an argument (no shell can pass one natively) is refused, not cut short.
  const nul = await engine.run(["analyze", "1f1b\u0000-S", "4"]);
  const nulOk = nul.code === 2 && nul.stdout === "" &&
    nul.stderr === "pipetab: error: argument 2 contains a NUL byte, which no command line can carry\n";
  console.log(`${nulOk ? "ok  " : "FAIL"} an argument with a NUL: exit ${nul.code}, ${JSON.stringify(nul.stderr)}`);
  if (!nulOk) failed++;
  console.log(`${requests.length - failed} of ${requests.length} requests byte-equal`);
  process.exit(failed ? 1 : 0);
})();
