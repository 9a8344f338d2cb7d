// How long the web engine takes per request under node (V8, as in Chromium), beside the native
// command on the same machine: the median of 5 runs each, one thread.
//   node tests/web/timings.js NATIVE_PIPETAB SITE_DIR
"use strict";
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");

const [native, site] = process.argv.slice(2);
const createPipetab = require(path.resolve(site, "pipetab.js"));
const { createEngine } = require(path.resolve(site, "engine.js"));
const requests = [
  ["analyze", "zb-v", "-S", "4", "-M", "8", "--model", "gpt3-13b", "--system", "dgx-a100", "--format", "json"],
  ["compare", "-S", "8", "-M", "32", "--model", "llama2-70b", "--system", "dgx-h100", "--format", "json"],
  ["simulate", "interleaved", "-S", "8", "-M", "64", "--model", "llama2-70b", "--system", "dgx-h100", "--tp", "8", "--format", "json"],
  ["plan", "--model", "llama2-70b", "--system", "dgx-h100", "--gpus", "64", "--global-batch", "64", "--format", "json", "-j", "1"],
];
const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
(async () => {
  const t0 = performance.now();
  const engine = await createEngine(createPipetab, { wasmBinary: fs.readFileSync(path.join(site, "pipetab.wasm")) });
  console.log(`module instantiated in ${(performance.now() - t0).toFixed(0)} ms; ` +
              `pipetab.wasm ${fs.statSync(path.join(site, "pipetab.wasm")).size} bytes`);
  console.log("request | web ms | native ms | web / native");
  for (const args of requests) {
    const web = [], nat = [];
    for (let i = 0; i < 5; i++) {
      let t = performance.now();
      const r = await engine.run(args);
      web.push(performance.now() - t);
      if (r.code !== 0) throw new Error(r.stderr);
      t = performance.now();
      spawnSync(path.resolve(native), args, { maxBuffer: 1 << 28 });
      nat.push(performance.now() - t);
    }
    const w = median(web), n = median(nat);
    console.log(`pipetab ${args.join(" ")} | ${w.toFixed(1)} | ${n.toFixed(1)} | ${(w / n).toFixed(2)}`);
  }
})();
