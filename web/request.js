// The page's request: its state (the query string of the page's URL) and the command line it
// runs. The test contract (docs/web.md): ?cmd=analyze&schedule=zb-v&S=4&M=8&model=gpt3-13b&
// system=dgx-a100 runs exactly `pipetab analyze zb-v -S 4 -M 8 --model gpt3-13b --system
// dgx-a100 --format json`, and a parameter left out is the command line's default, not the page's.
"use strict";

(function (root) {
  const COMMANDS = ["compare", "analyze", "simulate", "plan"];
  // Query parameters, in the order the URL writes them.
  const KEYS = ["cmd", "schedule", "schedules", "S", "M", "v", "model", "system", "bw", "lat",
                "gpus", "batch", "plan_schedules", "table", "model_toml", "system_toml"];
  // Files the page writes into the engine's file system for pasted or dropped inputs.
  const FILES = { model: "model.toml", system: "system.toml", table: "schedule.csv" };

  function parse(search) {
    const params = new URLSearchParams(search);
    const state = {};
    for (const key of KEYS) if (params.has(key)) state[key] = params.get(key);
    if (!COMMANDS.includes(state.cmd)) state.cmd = "compare";
    return state;
  }

  function query(state) {
    const params = new URLSearchParams();
    for (const key of KEYS) {
      if (state[key] !== undefined && state[key] !== "") params.set(key, state[key]);
    }
    return params.toString();
  }

  const list = (text) => String(text).split(",").map((s) => s.trim()).filter((s) => s);

  // The command line for a state. Where it names "custom", the model or system is the TOML the
  // state carries (model_toml, system_toml: in the URL, so that a shared link holds it) and the
  // table is the file the user dropped; the page writes them to FILES before the run.
  function args(state) {
    const a = [state.cmd];
    const opt = (flag, key) => { if (state[key] !== undefined && state[key] !== "") a.push(flag, String(state[key])); };
    const scales = () => { opt("--bandwidth-scale", "bw"); opt("--latency-scale", "lat"); };
    const presetOrFile = (flag, key) => {
      if (state[key] === "custom") a.push(flag, FILES[key]);
      else opt(flag, key);
    };
    if (state.cmd === "plan") {
      presetOrFile("--model", "model");
      presetOrFile("--system", "system");
      opt("--gpus", "gpus");
      opt("--global-batch", "batch");
      if (state.plan_schedules) a.push("--schedules", ...list(state.plan_schedules));
      a.push("--format", "json");
      return a;
    }
    if (state.cmd === "compare") {
      if (state.schedules) a.push(...list(state.schedules));
      if (state.table === "custom") a.push("--table", FILES.table);
    } else if (state.table === "custom") {
      a.push("--table", FILES.table);
    } else if (state.schedule) {
      a.push(state.schedule);
    }
    // A table file sets its own sizes (analyze, simulate); compare keeps S and M to compare at.
    if (state.table !== "custom" || state.cmd === "compare") {
      opt("-S", "S");
      opt("-M", "M");
      opt("-v", "v");
    }
    presetOrFile("--model", "model");
    presetOrFile("--system", "system");
    scales();
    a.push("--format", "json");
    return a;
  }

  // A shell-quoted command line, shown on the page so that it can be run natively.
  function shell(argv) {
    const quote = (s) => (/^[\w@%+=:,./-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'");
    return ["pipetab", ...argv].map(quote).join(" ");
  }

  const api = { COMMANDS, KEYS, FILES, parse, query, args, shell };
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.pipetabRequest = api;
})(typeof self !== "undefined" ? self : this);
