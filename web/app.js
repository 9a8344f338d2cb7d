// The explorer page: the form is the request (request.js), the engine runs in a worker
// (worker.js -> engine.js -> pipetab.wasm), and every view is drawn from the JSON the command
// line prints. The JSON of the request itself goes, unchanged, into #result-json.
"use strict";

(function () {
  const R = window.pipetabRequest;
  const $ = (id) => document.getElementById(id);
  const form = $("controls");
  const SVG = "http://www.w3.org/2000/svg";

  // ---- the engine, in a worker -------------------------------------------------------------
  const worker = new Worker("worker.js");
  let nextId = 1;
  const pending = new Map();
  let ready;
  const engineReady = new Promise((resolve, reject) => { ready = { resolve, reject }; });
  worker.onmessage = (event) => {
    const m = event.data;
    if (m.ready) return ready.resolve();
    if (m.failed) return ready.reject(new Error(m.failed));
    const p = pending.get(m.id);
    if (!p) return;
    if (m.line !== undefined) {
      if (p.onLine) p.onLine(m.line);
      return;
    }
    pending.delete(m.id);
    p.resolve(m.result);
  };
  worker.onerror = (event) => ready.reject(new Error(event.message));

  async function run(args, { inputs = {}, outputs = [], onLine = null } = {}) {
    await engineReady;
    const id = nextId++;
    return new Promise((resolve) => {
      pending.set(id, { resolve, onLine });
      worker.postMessage({ id, args, inputs, outputs });
    });
  }

  // ---- state: the URL's query string, the form, and pasted or dropped files -----------------
  let state = R.parse(location.search);
  // The dropped table (too large for a URL; the model and system TOML live in the state).
  const custom = { table: "", file: R.FILES.table };
  const lastPreset = { model: "llama2-7b", system: "balanced" };
  const PLAN_FORM = { gpus: "64", batch: "64" };
  let presets = { models: [], systems: [], schedules: [] };

  const scaleOf = (slider) => Math.round(Math.pow(10, Number(slider)) * 1000) / 1000;
  const sliderOf = (scale) => String(Math.round(Math.log10(Number(scale)) * 10) / 10);

  function fillSelect(select, names, withCustom) {
    select.replaceChildren();
    for (const name of names) select.append(new Option(name, name));
    if (withCustom) select.append(new Option("custom (paste TOML)…", "custom"));
  }

  function showFor(cmd) {
    document.querySelectorAll(".for-one").forEach((e) => { e.hidden = cmd === "compare" || cmd === "plan"; });
    document.querySelectorAll(".for-compare").forEach((e) => { e.hidden = cmd !== "compare"; });
    document.querySelectorAll(".for-schedules, .for-network").forEach((e) => { e.hidden = cmd === "plan"; });
    document.querySelectorAll(".for-plan").forEach((e) => { e.hidden = cmd !== "plan"; });
    document.querySelectorAll(".for-not-plan").forEach((e) => { e.hidden = cmd === "plan"; });
  }

  // The layout and job fields (request.js: their keys are the command line's flags).
  const LAYOUT_KEYS = ["tp", "cp", "ep", "dp", "sp", "fsdp", "seq", "mb", "precision", "recompute"];

  // The form shows the state; what the state leaves out shows the command line's default.
  function stateToForm() {
    form.elements.cmd.value = state.cmd;
    $("model").value = state.model || (state.cmd === "plan" ? "llama2-70b" : "llama2-7b");
    $("system").value = state.system || (state.cmd === "plan" ? "dgx-h100" : "balanced");
    $("model-toml").hidden = $("model").value !== "custom";
    $("system-toml").hidden = $("system").value !== "custom";
    $("model-toml").value = state.model_toml || "";
    $("system-toml").value = state.system_toml || "";
    $("schedule").value = state.schedule || "1f1b";
    const ticked = new Set((state.schedules || "").split(",").filter((s) => s));
    document.querySelectorAll("#schedules input").forEach((box) => { box.checked = ticked.has(box.value); });
    $("S").value = state.S || "";
    $("v").value = state.v || "";
    $("M").value = state.M || "8";
    $("M-out").value = $("M").value;
    $("bw").value = state.bw ? sliderOf(state.bw) : "0";
    $("bw-out").value = state.bw || "1";
    $("lat").value = state.lat ? sliderOf(state.lat) : "0";
    $("lat-out").value = state.lat || "1";
    // plan needs a GPU count and a global batch (the command has no default for them): the form
    // opens with the placeholders' 64 and 64 filled in, so that Plan runs as it opens.
    $("gpus").value = state.gpus || (state.cmd === "plan" ? PLAN_FORM.gpus : "");
    $("batch").value = state.batch || (state.cmd === "plan" ? PLAN_FORM.batch : "");
    $("plan_schedules").value = state.plan_schedules || "";
    for (const key of LAYOUT_KEYS) $(key).value = state[key] || "";
    showFor(state.cmd);
    $("command-line").textContent = R.shell(R.args(state));
  }

  // A control the user touched enters the state; the others stay at the command's default.
  function formToState(changed) {
    const s = { ...state, cmd: form.elements.cmd.value };
    const take = (key, value, fallback) => {
      if (changed === key || s[key] !== undefined) s[key] = value;
      if (s[key] === fallback && changed !== key) delete s[key];
    };
    take("model", $("model").value);
    take("system", $("system").value);
    for (const key of ["model", "system"]) if ($(key).value !== "custom") lastPreset[key] = $(key).value;
    take("schedule", $("schedule").value);
    const ticked = [...document.querySelectorAll("#schedules input:checked")].map((b) => b.value);
    if (ticked.length) s.schedules = ticked.join(","); else delete s.schedules;
    if (s.cmd === "plan") {
      for (const key of ["gpus", "batch"]) if (!$(key).value.trim()) $(key).value = PLAN_FORM[key];
    }
    for (const key of ["S", "v", "gpus", "batch", "plan_schedules", ...LAYOUT_KEYS]) {
      const value = $(key).value.trim();
      if (value) s[key] = value; else delete s[key];
    }
    if (changed === "M" || s.M !== undefined) s.M = $("M").value;
    const bw = scaleOf($("bw").value), lat = scaleOf($("lat").value);
    if (bw !== 1) s.bw = String(bw); else delete s.bw;
    if (lat !== 1) s.lat = String(lat); else delete s.lat;
    if (custom.table) {
      s.table = "custom";
      s.table_file = custom.file;
    } else {
      delete s.table;
      delete s.table_file;
    }
    state = s;
    $("model-toml").hidden = $("model").value !== "custom";
    $("system-toml").hidden = $("system").value !== "custom";
    showFor(state.cmd);
    $("command-line").textContent = R.shell(R.args(state));
  }

  function inputsFor() {
    const inputs = {};
    if (state.model === "custom") inputs[R.FILES.model] = state.model_toml || "";
    if (state.system === "custom") inputs[R.FILES.system] = state.system_toml || "";
    if (state.table === "custom") inputs[custom.file] = custom.table;
    return inputs;
  }

  // ---- running a request ------------------------------------------------------------------
  let generation = 0;
  let lastJson = "";

  async function refresh() {
    const mine = ++generation;
    if (state.cmd === "plan") {
      for (const key of ["gpus", "batch"]) if (!state[key]) state[key] = PLAN_FORM[key];
    }
    const args = R.args(state);
    history.replaceState(null, "", "?" + R.query(state));
    $("run-status").textContent = `Running ${R.shell(args)} …`;
    $("error").hidden = true;
    if (state.cmd === "plan") {
      // A plan takes seconds: what an earlier request drew goes now, not when the plan ends.
      for (const id of ["levels", "detail", "plan-result"]) $(id).hidden = true;
      $("plan-table").replaceChildren();
      $("result-json").textContent = "";
    }
    const started = performance.now();
    const progress = $("plan-progress");
    progress.hidden = state.cmd !== "plan";
    progress.removeAttribute("value");
    // plan reports its progress as lines on stderr; stdout is the same with or without them.
    const result = await run(state.cmd === "plan" ? [...args, "--progress-lines"] : args, {
      inputs: inputsFor(),
      onLine: (line) => {
        const m = /^progress (\w+) (\d+) (\d+)$/.exec(line);
        if (!m || mine !== generation) return;
        progress.max = Number(m[3]);
        progress.value = Number(m[2]);
        $("run-status").textContent = `Plan: ${m[1]} ${m[2]} of ${m[3]} layouts…`;
      },
    });
    if (mine !== generation) return;  // a newer request replaced this one
    progress.hidden = true;
    const ms = Math.round(performance.now() - started);
    if (result.code !== 0) {
      $("error").textContent = result.stderr.trim() || `pipetab exited ${result.code}`;
      $("error").hidden = false;
      $("run-status").textContent = `Failed after ${ms} ms (exit ${result.code}).`;
      return;
    }
    lastJson = result.stdout;
    $("result-json").textContent = result.stdout;
    const data = JSON.parse(result.stdout);
    $("run-status").textContent = `Done in ${ms} ms in your browser.`;
    $("levels").hidden = !(state.cmd === "compare" || state.cmd === "analyze");
    $("plan-result").hidden = state.cmd !== "plan";
    $("detail").hidden = state.cmd === "plan";
    $("fit").hidden = true;
    if (state.cmd === "compare") {
      // Without a system the command compares every regime; the page ranks on the one its
      // System selector shows, and names it (it once drew the first, compute-bound, under a
      // "balanced" selector).
      const shown = $("system").value;
      const comparison = data.comparisons.find((c) => c.system === shown) || data.comparisons[0];
      const others = data.comparisons.map((c) => c.system).filter((name) => name !== comparison.system);
      $("levels-system").textContent = `on ${comparison.system}` +
        (others.length ? ` (the run also compared ${others.join(", ")}: choose one under System)` : "");
      drawLevels(comparison.schedules);
      // What the comparison left out, and why (hanayo needs M = S; a dropped table of other sizes).
      $("skipped").textContent = (comparison.skipped || []).map((k) => `${k.schedule}: ${k.reason}`).join("\n");
      $("skipped").hidden = !(comparison.skipped || []).length;
      const pick = comparison.schedules.find((s) => s.rank.simulation === 1) || comparison.schedules[0];
      if (pick) await showDetail(pick.schedule, pick.params, mine);
    } else if (state.cmd === "analyze") {
      $("skipped").hidden = true;
      $("levels-system").textContent = data.simulation ? `on ${data.simulation.system}` : "";
      drawLevels([data]);
      await showDetail(data.schedule, data.params, mine);
    } else if (state.cmd === "simulate") {
      await showDetail(state.table === "custom" ? null : (state.schedule || "1f1b"), null, mine, data);
    } else {
      drawPlan(data);
    }
  }

  // ---- the three levels -------------------------------------------------------------------
  function fmt(x, digits = 3) {
    if (x === null || x === undefined) return "–";
    // Trailing zeros of the fraction only: "1000" stays 1000 ("3.150" is 3.15).
    return Number(x).toPrecision(digits).replace(/(\.\d*?)0+(e|$)/, "$1$2").replace(/\.(e|$)/, "$1");
  }

  function drawLevels(rows) {
    const table = $("ranking");
    table.replaceChildren();
    const head = table.createTHead().insertRow();
    for (const h of ["schedule", "stages", "formula bubble (rank)", "table bubble (rank)",
                     "simulated step s (rank)", "idle", "peak memory GB", "flips"]) {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = h;
      head.append(th);
    }
    const body = table.createTBody();
    const ranked = (value, rank) => (rank ? `${value} (${rank})` : value);
    for (const s of rows) {
      const tr = body.insertRow();
      const sim = s.simulation || {};
      const flips = [];
      if (s.rank && s.rank.changed) flips.push("formula → table");
      if (s.rank && s.rank.changed_simulation) flips.push("table → simulation");
      const rank = s.rank || {};
      const cells = [s.schedule, s.params.stages,
                     ranked(s.formula ? fmt(s.formula.published_bubble_ratio) : "–", rank.formula),
                     ranked(fmt(s.table.bubble_ratio), rank.table),
                     s.simulation ? ranked(fmt(sim.runtime_s, 4), rank.simulation)
                       : `not simulated${s.simulation_error ? `: ${s.simulation_error}` : ""}`,
                     fmt(sim.idle_ratio, 2),
                     sim.peak_memory_max_bytes ? fmt(sim.peak_memory_max_bytes / 1e9, 4) : "–",
                     flips.join(", ")];
      cells.forEach((c, i) => {
        const td = tr.insertCell();
        td.textContent = c === null || c === undefined ? "–" : String(c);
        if (i === 7 && c) td.className = "flip";
        if (i === 6 && sim.over_capacity && sim.over_capacity.some((x) => x)) td.className = "over";
      });
      // The name is a button: its timeline, memory and table below.
      const button = document.createElement("button");
      button.type = "button";
      button.className = "link";
      button.textContent = s.schedule;
      button.title = `Show ${s.schedule}'s timeline, memory and table`;
      button.onclick = () => showDetail(s.schedule, s.params, generation);
      tr.cells[0].replaceChildren(button);
    }
    drawSlope(rows.filter((s) => s.rank));
  }

  // Ranks per level as a slope chart: one line per schedule across formula, table, simulation.
  function drawSlope(rows) {
    const box = $("slope");
    box.replaceChildren();
    if (rows.length < 2) return;
    const levels = ["formula", "table", "simulation"];
    const n = Math.max(...rows.flatMap((s) => levels.map((l) => s.rank[l] || 0)));
    const W = 620, H = 40 + 28 * n, x0 = 60, dx = 200;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "Rank of each schedule at the formula, table and simulation levels: " +
      rows.map((s) => `${s.schedule} ${levels.map((l) => s.rank[l] || "none").join(", ")}`).join("; "));
    const el = (name, attrs, text) => {
      const e = document.createElementNS(SVG, name);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text !== undefined) e.textContent = text;
      svg.append(e);
      return e;
    };
    // Tied schedules (the same rank at a level) sit a few pixels apart so that each stays visible.
    const y = (level, s) => {
      const tied = rows.filter((o) => o.rank[level] === s.rank[level]);
      const k = tied.indexOf(s);
      return 30 + 28 * (s.rank[level] - 1) + (tied.length > 1 ? (k - (tied.length - 1) / 2) * 7 : 0);
    };
    levels.forEach((l, i) => el("text", { x: x0 + dx * i, y: 14, "text-anchor": "middle", class: "axis" }, l));
    const palette = ["#1b5e9e", "#b5432b", "#2e7d32", "#6a3d9a", "#8a6d00", "#00796b", "#ad1457", "#455a64", "#5d4037", "#283593"];
    rows.forEach((s, i) => {
      const color = palette[i % palette.length];
      const points = levels.map((l, j) => (s.rank[l] ? [x0 + dx * j, y(l, s)] : null)).filter((p) => p);
      if (points.length > 1) el("polyline", { points: points.map((p) => p.join(",")).join(" "), fill: "none", stroke: color, "stroke-width": 2.5 });
      points.forEach((p) => el("circle", { cx: p[0], cy: p[1], r: 5, fill: color }));
      const last = points[points.length - 1];
      // A schedule the simulation refused ends at the table level, labelled with why.
      const label = s.rank.simulation ? `${s.schedule} (${s.rank.simulation})`
        : `${s.schedule}: not simulated${s.simulation_error ? ` (${s.simulation_error.slice(0, 60)})` : ""}`;
      if (last) el("text", { x: last[0] + 12, y: last[1] + 4, fill: color, class: "name" }, label);
    });
    box.append(svg);
  }

  // ---- one schedule: breakdown, memory, timeline, table --------------------------------------
  let detailArgs = null;

  function oneArgs(name, params) {
    // The schedule at the request's S, M (and its own v), model, system and network scales.
    const s = { ...state, cmd: "simulate", schedule: name || undefined, schedules: undefined };
    if (params) {
      s.S = String(params.devices);
      s.M = String(params.microbatches);
      if (params.chunks > 1 && (state.v || name === "interleaved")) s.v = String(params.chunks);
    }
    if (name) delete s.table;
    return R.args(s).filter((a, i, all) => !(a === "--format" || all[i - 1] === "--format"));
  }

  async function showDetail(name, params, mine, simulated) {
    if (name === custom.file) name = null;  // the user's table: evaluated by its file
    const title = name ? `${name}: one step, simulated` : `${custom.file}: one step, simulated`;
    return showRun(oneArgs(name, params), title, name || custom.file, mine, simulated);
  }

  // One simulated step (base: the simulate command line without --format): its headline, the
  // breakdown, the memory, the timeline and the table.
  async function showRun(base, title, name, mine, simulated) {
    detailArgs = base;
    $("detail").hidden = false;
    $("detail-title").textContent = title;
    const inputs = inputsFor();
    const sim = await run([...base, "--svg", "timeline.svg", "--format", "json"], { inputs, outputs: ["timeline.svg"] });
    if (mine !== generation) return;
    if (sim.code !== 0) {
      $("timeline").textContent = sim.stderr.trim();
      return;
    }
    const data = simulated || JSON.parse(sim.stdout);
    drawHeadline(data);
    drawBreakdown(data.breakdown);
    drawMemory(data);
    const svgText = new TextDecoder().decode(sim.files["timeline.svg"]);
    const doc = new DOMParser().parseFromString(svgText, "image/svg+xml");
    const svg = doc.documentElement;
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `Timeline of ${name} on each device`);
    // Drawn at its own width at least (scrolled on a narrow screen), so that its labels keep the
    // size they were drawn at instead of shrinking with the page.
    const width = parseFloat(svg.getAttribute("width"));
    if (width > 0) svg.style.minWidth = `${width}px`;
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    $("timeline").replaceChildren(document.importNode(svg, true));
    const grid = await run(["show", ...gridArgs(base), "--width", "0", "--color", "never"], { inputs });
    if (mine !== generation) return;
    $("grid").textContent = grid.code === 0 ? grid.stdout : grid.stderr;
  }

  // show takes the table's options only: the schedule or table (request.js puts it right after
  // the command) and its sizes, not the model, system, network, layout or job.
  function gridArgs(base) {
    const keep = base[1] && !base[1].startsWith("-") ? [base[1]] : [];
    for (let i = 1; i < base.length; i++) {
      if (["-S", "-M", "-v", "--table"].includes(base[i])) keep.push(base[i], base[++i]);
    }
    return keep;
  }

  const PARTS = [
    ["compute", "compute", "#1b5e9e"], ["bubble", "bubble (idle)", "#c9c9c9"],
    ["exposed_pipeline", "pipeline transfers", "#b5432b"], ["tp_comm", "TP / CP / FSDP exposed", "#6a3d9a"],
    ["reductions", "gradient reductions", "#2e7d32"], ["optimizer", "optimizer", "#8a6d00"],
    ["host_overhead", "host overhead", "#00796b"], ["comm_interference", "compute slowed by comms", "#ad1457"],
  ];

  // The convention MFU's model FLOPs are counted by, as the engine names it (--flop-count).
  function flopCount(sim) {
    return sim.flop_count === "causal" ? "causal count, 6N + 6·L·h·s" : "PaLM's count, 6N + 12·L·h·s";
  }

  // The answer first: step time, tokens/s and MFU, and whether it fits (its peak against the
  // usable capacity the simulation judged it by), with what to try when it does not.
  function drawHeadline(sim) {
    const parts = [`Step ${fmt(sim.runtime_s, 4)} s`];
    // The error bar: where a measured step falls, from published runs like this one.
    const bar = sim.runtime_interval_s;
    if (bar) parts.push(`${Math.round(100 * bar.level)} % range ${fmt(bar.low, 4)}–${fmt(bar.high, 4)} s`);
    if (sim.tokens_per_s) parts.push(`${Math.round(sim.tokens_per_s).toLocaleString("en-US")} tokens/s`);
    if (sim.mfu) parts.push(`MFU ${(100 * sim.mfu).toFixed(1)} % (${flopCount(sim)})`);
    if (sim.gpus) parts.push(`${sim.gpus} GPU${sim.gpus > 1 ? "s" : ""}`);
    $("headline").textContent = parts.join(" · ");
    const over = (sim.over_capacity || []).some((x) => x);
    $("fit").hidden = !over;
    if (over) {
      const need = (sim.peak_memory_max_bytes || 0) / 1e9, have = (sim.memory_capacity_bytes || 0) / 1e9;
      $("fit").textContent = `Does not fit: the busiest device needs ${need.toFixed(1)} GB of ${have.toFixed(0)} GB ` +
        `usable. Try a larger TP, FSDP, recompute or a smaller micro batch (Layout and job), or Plan a layout.`;
    }
  }

  function drawBreakdown(b) {
    const box = $("breakdown");
    box.replaceChildren();
    const bar = document.createElement("div");
    bar.className = "stack";
    bar.setAttribute("role", "img");
    const list = document.createElement("ul");
    list.className = "legend";
    const words = [];
    for (const [key, label, color] of PARTS) {
      const share = b[key] || 0;
      if (share <= 0) continue;
      const part = document.createElement("span");
      part.style.width = `${(100 * share).toFixed(2)}%`;
      part.style.background = color;
      bar.append(part);
      const li = document.createElement("li");
      li.innerHTML = `<span class="swatch" style="background:${color}"></span>`;
      li.append(`${label} ${(100 * share).toFixed(1)}%`);
      list.append(li);
      words.push(`${label} ${(100 * share).toFixed(1)}%`);
    }
    bar.setAttribute("aria-label", `Share of the step: ${words.join(", ")}`);
    box.append(bar, list);
  }

  function drawMemory(sim) {
    const box = $("memory");
    box.replaceChildren();
    const peaks = sim.peak_memory_bytes || [];
    const statics = sim.static_bytes || [];
    const capacity = sim.memory_capacity_bytes || 0;
    const top = Math.max(capacity, ...peaks) || 1;
    const table = document.createElement("div");
    table.className = "membars";
    peaks.forEach((peak, d) => {
      const row = document.createElement("div");
      row.className = "membar";
      const label = document.createElement("span");
      label.className = "dev";
      label.textContent = `device ${d}`;
      const track = document.createElement("span");
      track.className = "track";
      const st = document.createElement("span");
      st.className = "static";
      st.style.width = `${(100 * (statics[d] || 0) / top).toFixed(2)}%`;
      const act = document.createElement("span");
      act.className = "act";
      act.style.width = `${(100 * Math.max(0, peak - (statics[d] || 0)) / top).toFixed(2)}%`;
      track.append(st, act);
      if (capacity) {
        const cap = document.createElement("span");
        cap.className = "cap";
        cap.style.left = `${(100 * capacity / top).toFixed(2)}%`;
        track.append(cap);
      }
      const value = document.createElement("span");
      value.className = peak > capacity && capacity ? "val over" : "val";
      value.textContent = `${(peak / 1e9).toFixed(1)} GB`;
      row.setAttribute("aria-label", `device ${d}: peak ${(peak / 1e9).toFixed(1)} GB of ${(capacity / 1e9).toFixed(0)} GB`);
      row.append(label, track, value);
      table.append(row);
    });
    const note = document.createElement("p");
    note.className = "help";
    note.innerHTML = `<span class="swatch static"></span> weights, gradients, optimizer
      <span class="swatch act"></span> activations at the peak
      <span class="swatch cap"></span> capacity ${(capacity / 1e9).toFixed(0)} GB`;
    box.append(table, note);
  }

  // ---- plan ---------------------------------------------------------------------------------
  function drawPlan(data) {
    $("plan-summary").textContent =
      `${data.layouts} layouts on ${data.gpus} GPUs: ${data.rejected} rejected (memory or rules), ` +
      `${data.pruned} pruned by the lower bound, ${data.simulated} simulated.`;
    const table = $("plan-table");
    table.replaceChildren();
    const head = table.createTHead().insertRow();
    const first = data.top.length ? data.top[0].simulation : null;
    const mfu = first ? `MFU (${first.flop_count === "causal" ? "causal" : "PaLM's"} count)` : "MFU";
    for (const h of ["rank", "layout", "step (s; 90 % range)", "tokens/s", mfu, "peak memory (GB)", "where the step goes"]) {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = h;
      head.append(th);
    }
    const body = table.createTBody();
    for (const t of data.top) {
      const tr = body.insertRow();
      const sim = t.simulation || {};
      const shares = PARTS.map(([key, label]) => [label, (sim.breakdown || {})[key] || 0])
        .filter(([, share]) => share >= 0.005).map(([label, share]) => `${label} ${(100 * share).toFixed(0)}%`);
      const bar = sim.runtime_interval_s;
      const cells = [t.rank, t.description,
                     fmt(t.runtime_s, 4) + (bar ? ` (${fmt(bar.low, 3)}–${fmt(bar.high, 3)})` : ""),
                     sim.tokens_per_s ? Math.round(sim.tokens_per_s).toLocaleString("en-US") : "–",
                     sim.mfu ? `${(100 * sim.mfu).toFixed(1)} %` : "–", fmt(t.peak_memory_bytes / 1e9, 4),
                     shares.join(", ")];
      for (const c of cells) tr.insertCell().textContent = String(c);
      tr.cells[1].className = "layout-name";
      tr.cells[6].className = "shares";
      // The layout is a button: its own simulated step below.
      const button = document.createElement("button");
      button.type = "button";
      button.className = "link";
      button.textContent = t.description;
      button.title = "Show this layout's timeline, memory and table";
      button.onclick = () => showRun(layoutArgs(data, t.layout), `${t.description}: one step, simulated`,
                                     t.layout.schedule, generation);
      tr.cells[1].replaceChildren(button);
    }
  }

  // The simulate command line of one of plan's layouts: its schedule, sizes and options, on the
  // plan's model and system with the job the request gave.
  function layoutArgs(data, l) {
    const s = { cmd: "simulate", schedule: l.schedule, S: String(l.pipeline_parallel),
                M: String(l.microbatches), model: state.model, system: state.system,
                tp: String(l.tensor_parallel), cp: String(l.context_parallel),
                ep: String(l.expert_parallel), dp: String(l.data_parallel),
                mb: String(l.micro_batch), recompute: l.recompute,
                sp: l.sequence_parallel ? "on" : "off", fsdp: l.fsdp ? "on" : "off",
                seq: state.seq, precision: state.precision };
    if (l.chunks) s.v = String(l.chunks);
    const a = R.args(s).filter((x, i, all) => !(x === "--format" || all[i - 1] === "--format"));
    if (l.distributed_optimizer) a.push("--distributed-optimizer");
    if (l.expert_tensor_parallel > 1) a.push("--etp", String(l.expert_tensor_parallel));
    if (l.pipeline_layout) a.push("--pipeline-layout", String(l.pipeline_layout));
    if (l.a2a_overlap) a.push("--a2a-overlap");
    if (l.moe_recompute && l.moe_recompute !== "none") a.push("--moe-recompute", l.moe_recompute);
    return a;
  }

  // ---- downloads ----------------------------------------------------------------------------
  function download(name, data, type) {
    const url = URL.createObjectURL(new Blob([data], { type }));
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }
  $("dl-json").onclick = () => download("pipetab.json", lastJson, "application/json");
  $("dl-table").onclick = async () => {
    if (!detailArgs) return;
    const r = await run(["show", ...gridArgs(detailArgs), "--format", "pytorch", "--force"], { inputs: inputsFor() });
    if (r.code === 0) download("schedule.csv", r.stdout, "text/csv");
    else { $("error").textContent = r.stderr.trim(); $("error").hidden = false; }
  };
  $("dl-trace").onclick = async () => {
    if (!detailArgs) return;
    const r = await run([...detailArgs, "--trace", "trace.json"], { inputs: inputsFor(), outputs: ["trace.json"] });
    if (r.code === 0) download("trace.json", r.files["trace.json"], "application/json");
    else { $("error").textContent = r.stderr.trim(); $("error").hidden = false; }
  };

  // ---- events -------------------------------------------------------------------------------
  let timer = 0;
  const soon = () => { clearTimeout(timer); timer = setTimeout(refresh, 120); };

  form.addEventListener("submit", (e) => { e.preventDefault(); formToState(); refresh(); });
  form.addEventListener("change", (e) => {
    const key = e.target.name || e.target.id;
    if (e.target.name === "cmd") {
      state.cmd = e.target.value;
      stateToForm();
    } else {
      formToState(key);
    }
    if (key !== "model" && key !== "system") soon();
    else if ($(key).value !== "custom") soon();
  });
  for (const [id, out, scale] of [["M", "M-out", false], ["bw", "bw-out", true], ["lat", "lat-out", true]]) {
    $(id).addEventListener("input", () => {
      $(out).value = scale ? String(scaleOf($(id).value)) : $(id).value;
      formToState(id);
      soon();
    });
  }
  for (const key of ["model", "system"]) {
    $(`${key}-toml`).addEventListener("input", () => { state[`${key}_toml`] = $(`${key}-toml`).value; soon(); });
  }
  $("copy-link").onclick = async () => {
    const link = location.href;
    try { await navigator.clipboard.writeText(link); $("run-status").textContent = "Link copied."; }
    catch (e) { $("run-status").textContent = link; }
  };

  // A dropped or picked schedule file is evaluated as a table.
  async function takeTable(file) {
    custom.table = await file.text();
    custom.file = R.tableFile(file.name);
    $("table-name").textContent = `Using ${file.name}` + (custom.file !== file.name ? ` (as ${custom.file}).` : ".");
    $("table-clear").hidden = false;
    if (state.cmd === "plan") state.cmd = "analyze";
    formToState("table");
    stateToForm();
    refresh();
  }
  const drop = $("drop");
  drop.addEventListener("click", (e) => { if (e.target === drop || e.target.id === "drop-help") $("table-file").click(); });
  drop.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); $("table-file").click(); } });
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files.length) takeTable(e.dataTransfer.files[0]);
  });
  $("table-file").addEventListener("change", (e) => { if (e.target.files.length) takeTable(e.target.files[0]); });
  $("table-clear").onclick = () => {
    custom.table = "";
    custom.file = R.FILES.table;
    $("table-name").textContent = "";
    $("table-clear").hidden = true;
    formToState("table");
    refresh();
  };

  // ---- start: presets from the engine, then the URL's request -------------------------------
  (async () => {
    try {
      await engineReady;
    } catch (e) {
      $("engine-status").textContent = `The engine did not start: ${e.message}`;
      return;
    }
    const [models, systems, schedules] = await Promise.all([
      run(["list", "models", "--format", "json"]), run(["list", "systems", "--format", "json"]),
      run(["list", "--format", "json"])]);
    presets = { models: JSON.parse(models.stdout), systems: JSON.parse(systems.stdout), schedules: JSON.parse(schedules.stdout) };
    fillSelect($("model"), presets.models.map((p) => p.name), true);
    fillSelect($("system"), presets.systems.map((p) => p.name), true);
    fillSelect($("schedule"), presets.schedules.map((p) => p.name), false);
    const checks = $("schedules");
    for (const s of presets.schedules) {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = s.name;
      box.name = "schedules";
      label.title = s.title;
      label.append(box, ` ${s.name}`);
      checks.append(label);
    }
    for (const key of ["model", "system"]) {
      // A custom file starts from the TOML of the preset chosen before.
      $(key).addEventListener("change", () => {
        if ($(key).value !== "custom") {
          delete state[`${key}_toml`];
          return;
        }
        if (!state[`${key}_toml`]) {
          const from = presets[`${key}s`].find((p) => p.name === lastPreset[key]);
          state[`${key}_toml`] = from ? from.toml : "";
          $(`${key}-toml`).value = state[`${key}_toml`];
        }
        soon();
      });
    }
    $("engine-status").textContent = "Engine ready: pipetab compiled to WebAssembly, running in this tab.";
    stateToForm();
    for (const key of ["model", "system"]) if ($(key).value !== "custom") lastPreset[key] = $(key).value;
    refresh();
  })();
})();
