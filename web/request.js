// The page's request: its state (the query string of the page's URL) and the command line it
// runs. The test contract (docs/web.md): ?cmd=analyze&schedule=zb-v&S=4&M=8&model=gpt3-13b&
// system=dgx-a100 runs exactly `pipetab analyze zb-v -S 4 -M 8 --model gpt3-13b --system
// dgx-a100 --format json`, and a parameter left out is the command line's default, not the page's.
"use strict";

(function (root) {
  const COMMANDS = ["compare", "analyze", "simulate", "plan"];
  // The layout and the job, as the command line's flags: a value passed as it is (plan takes
  // comma-separated lists of sizes, micro batches and recompute modes to try), except that "sp"
  // and "fsdp" are switches for one run ("on", "off") and on, off or both for plan, and "dp" is
  // plan's to choose.
  const LAYOUT = [["tp", "--tp"], ["cp", "--cp"], ["ep", "--ep"], ["dp", "--dp"],
                  ["seq", "--seq-len"], ["mb", "--micro-batch"], ["precision", "--precision"],
                  ["recompute", "--recompute"]];
  const SWITCHES = [["sp", "sequence-parallel"], ["fsdp", "fsdp"]];
  function LAYOUT_KEYS() { return [...LAYOUT.map(([key]) => key), ...SWITCHES.map(([key]) => key)]; }
  // Query parameters, in the order the URL writes them.
  const KEYS = ["cmd", "schedule", "schedules", "S", "M", "v", "model", "system", "bw", "lat",
                "gpus", "batch", "plan_schedules", ...LAYOUT_KEYS(), "table", "model_toml",
                "system_toml"];
  // Files the page writes into the engine's file system for pasted or dropped inputs.
  // A dropped table keeps its own name (tableFile): the command line, its messages and its JSON
  // cite the file the user gave.
  const FILES = { model: "model.toml", system: "system.toml", table: "schedule.csv" };
  const RESERVED = ["model.toml", "system.toml", "timeline.svg", "trace.json"];
  function tableFile(name) {
    const base = String(name || "").split(/[\\/]/).pop().replace(/[^\w.+-]/g, "_").slice(-100);
    if (!base || base.startsWith(".") || base.startsWith("-")) return FILES.table;
    return RESERVED.includes(base) ? "dropped-" + base : base;
  }

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
    const table = state.table_file || FILES.table;  // not in the URL: the file is the user's
    const layout = () => {
      for (const [key, flag] of LAYOUT) if (!(key === "dp" && state.cmd === "plan")) opt(flag, key);
      for (const [key, name] of SWITCHES) {
        const value = state[key];
        if (value === undefined || value === "") continue;
        if (state.cmd === "plan") a.push("--" + name, value);
        else if (value === "on") a.push("--" + name);
        else if (value === "off") a.push("--no-" + name);
        else a.push("--" + name + "=" + value);  // refused by the command, with its rule
      }
    };
    if (state.cmd === "plan") {
      presetOrFile("--model", "model");
      presetOrFile("--system", "system");
      opt("--gpus", "gpus");
      opt("--global-batch", "batch");
      if (state.plan_schedules) a.push("--schedules", ...list(state.plan_schedules));
      layout();
      a.push("--format", "json");
      return a;
    }
    if (state.cmd === "compare") {
      if (state.schedules) a.push(...list(state.schedules));
      if (state.table === "custom") a.push("--table", table);
    } else if (state.table === "custom") {
      a.push("--table", table);
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
    layout();
    a.push("--format", "json");
    return a;
  }

  // A shell-quoted command line, shown on the page so that it can be run natively.
  function shell(argv) {
    const quote = (s) => (/^[\w@%+=:,./-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'");
    return ["pipetab", ...argv].map(quote).join(" ");
  }

  const api = { COMMANDS, KEYS, FILES, parse, query, args, shell, tableFile };
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.pipetabRequest = api;
})(typeof self !== "undefined" ? self : this);
