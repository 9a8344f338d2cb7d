// `pipetab plan`: the fastest hybrid-parallel layouts of a model on a cluster, by simulation.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "commands.hpp"
#include "options.hpp"
#include "progress.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/job_file.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/io/table_json.hpp"
#include "pipetab/report/text.hpp"
#include "pipetab/report/trace.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/study/measurements.hpp"
#include "pipetab/study/plan.hpp"

namespace pipetab::cli {
namespace {

std::string csv_report(const PlanRequest& q, const PlanResult& r) {
  std::string out =
      "rank,runtime_s,tokens_per_s,mfu,peak_memory_bytes,lower_bound_s,tensor_parallel,"
      "pipeline_parallel,data_parallel,schedule,chunks,micro_batch,microbatches,recompute,"
      "sequence_parallel,distributed_optimizer,compute_s,bubble_s,exposed_pipeline_s,tp_comm_s,"
      "reductions_s,optimizer_s,overhead_s,context_parallel,fsdp,expert_parallel,a2a_overlap,"
      "expert_comm_s,expert_tensor_parallel,moe_recompute,pipeline_layout,flop_count,runtime_low_s,"
      "runtime_high_s";
  // A column per searched option (--search), after the fixed ones.
  for (const auto& option : q.space.options)
    out += "," + option.key;
  out += "\n";
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    const auto& e = r.top[i];
    const auto& l = e.layout;
    const auto p = runtime_parts(e.metrics);
    out += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},"
        "{},{},{},{}",
        i + 1, e.metrics.runtime_s, e.metrics.tokens_per_s.value_or(0), e.metrics.mfu.value_or(0),
        e.peak_memory_bytes, e.lower_bound_s, l.tensor_parallel, l.pipeline_parallel,
        l.data_parallel, l.schedule, l.chunks > 0 ? std::to_string(l.chunks) : "", l.micro_batch,
        l.microbatches, to_string(l.recompute), l.sequence_parallel, l.distributed_optimizer,
        p.compute, p.bubble, p.pipeline, p.tp, p.reductions, p.optimizer, p.overhead,
        l.context_parallel, l.fsdp, l.expert_parallel, l.a2a_overlap, p.experts,
        l.expert_tensor_parallel, to_string(l.moe_recompute), l.pipeline_layout,
        e.metrics.flop_count,
        e.metrics.runtime_interval ? fmt::format("{}", e.metrics.runtime_interval->low_s) : "",
        e.metrics.runtime_interval ? fmt::format("{}", e.metrics.runtime_interval->high_s) : "");
    for (const auto& option : l.options)
      out += "," + option.value;
    out += "\n";
  }
  return out;
}

std::string header(const PlanRequest& q, const PlanResult& r, double seconds, std::size_t width) {
  const auto& m = *q.model.transformer();
  std::string out = wrap(
      fmt::format(
          "plan: {} ({} layers, hidden {}, sequence {}) on {} GPUs of {} ({}), global batch {}",
          q.model.name, m.layers, m.hidden, q.job.seq_len, q.gpus, q.system.name,
          q.system.device.name.empty() ? "device" : q.system.device.name, q.global_batch),
      width, "", "  ");
  if (q.shards > 1) out += fmt::format("  shard {}/{} of the layouts\n", q.shard, q.shards);
  out += fmt::format(
      "  {} layouts: {} rejected, {} pruned by their lower bound, {} simulated ({:.1f} s)\n",
      r.layouts, r.rejected, r.pruned, r.simulated, seconds);
  // What the space held beyond TP, PP, micro batch, schedule, recomputation, SP and the
  // distributed optimizer, and what it did not: a user sees what a better layout could need.
  const auto& s = q.space;
  const auto cps = s.context_parallel.empty() ? default_context_parallel(m, q.job.seq_len, q.gpus)
                                              : s.context_parallel;
  const auto both = [](const std::vector<bool>& v) {
    return v.size() > 1 ? std::string("off and on") : v.front() ? "on" : "off";
  };
  std::string not_searched = fmt::format("--cp-method ({})", to_string(s.cp_method));
  if (m.moe && s.expert_tensor_parallel.empty()) not_searched = "--etp (1), " + not_searched;
  if (s.options.empty()) not_searched += ", any other option (--search KEY=A,B)";
  out += wrap(fmt::format("tried: CP {}, FSDP {}; not searched: {}", fmt::join(cps, ","),
                          both(s.fsdp), not_searched),
              width, "  ", "    ");
  return out;
}

// "7", or ">= 33" when layouts pruned by their bound might be faster than the reference.
std::string rank_text(const PlanResult& r) {
  return r.reference_rank_exact ? std::to_string(r.reference_rank)
                                : fmt::format(">= {}", r.reference_rank);
}

std::string reference_text(const PlanResult& r) {
  if (r.reference_error.empty() && !r.reference) return {};
  std::string out = "  reference layout: ";
  if (!r.reference) return out + "cannot run here: " + r.reference_error + "\n";
  const auto& e = *r.reference;
  out += fmt::format("{}\n    {:.4f} s, {:.0f} tokens/s, MFU {:.3f}, peak {:.2f} GB: rank {}",
                     describe(e.layout), e.metrics.runtime_s, e.metrics.tokens_per_s.value_or(0),
                     e.metrics.mfu.value_or(0), e.peak_memory_bytes / 1e9, rank_text(r));
  if (!r.top.empty()) {
    out += fmt::format("; the best layout is predicted {:.1f}% faster",
                       100 * (e.metrics.runtime_s / r.top.front().metrics.runtime_s - 1));
  }
  return out + "\n";
}

// "43.03–75.20": both ends with the decimals that give the larger four significant figures.
std::string range_text(double low, double high) {
  const int decimals = std::clamp(3 - static_cast<int>(std::floor(std::log10(high))), 0, 6);
  return fmt::format("{:.{}f}–{:.{}f}", low, decimals, high, decimals);
}

// A column of the ranking: its header, its share of a layout's runtime, and what it means.
struct ShareColumn {
  const char* header;
  double (*share)(const SimulationMetrics::Breakdown&);
  const char* meaning;
};
constexpr ShareColumn kShares[] = {
    {"compute", [](const SimulationMetrics::Breakdown& b) { return b.compute; }, "compute"},
    {"bubble", [](const SimulationMetrics::Breakdown& b) { return b.bubble; }, "pipeline bubble"},
    {"p2p", [](const SimulationMetrics::Breakdown& b) { return b.exposed_pipeline; },
     "exposed pipeline transfers (p2p)"},
    {"TP", [](const SimulationMetrics::Breakdown& b) { return b.tp_comm; },
     "tensor-parallel communication"},
    {"A2A", [](const SimulationMetrics::Breakdown& b) { return b.expert_comm; },
     "the experts' all-to-alls (A2A)"},
    {"DP", [](const SimulationMetrics::Breakdown& b) { return b.reductions; },
     "exposed data-parallel reduction (DP)"},
    {"optim", [](const SimulationMetrics::Breakdown& b) { return b.optimizer; },
     "optimizer step (optim)"},
    {"ovh",
     [](const SimulationMetrics::Breakdown& b) { return b.host_overhead + b.comm_interference; },
     "overheads (ovh: the host's time per step and per kernel, compute slowed by communication)"},
};

// The ranked layouts. Within kTextWidth columns a layout's description has a line of its own
// under its figures and a share every layout prints as 0.0% is left out; --wide keeps every
// share and one line per layout.
std::string ranking(const PlanResult& r, bool wide) {
  std::vector<const ShareColumn*> shown;
  for (const auto& c : kShares) {
    const bool any = std::any_of(r.top.begin(), r.top.end(), [&](const PlanEntry& e) {
      return std::round(1000 * c.share(e.metrics.breakdown())) != 0;
    });
    if (wide || any) shown.push_back(&c);
  }
  std::string out = fmt::format("\n{:>4} {:>10} {:>13} {:>10} {:>6} {:>8} ", "rank", "runtime s",
                                "90% range s", "tokens/s", "MFU", "peak GB");
  for (const auto* c : shown)
    out += fmt::format(" {:>7}", c->header);
  out += wide ? "  layout\n" : "\n";
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    const auto& e = r.top[i];
    const auto b = e.metrics.breakdown();
    const auto& bar = e.metrics.runtime_interval;
    out += fmt::format("{:>4} {:>10.4f} {:>13} {:>10.0f} {:>6.3f} {:>8.2f} ", i + 1,
                       e.metrics.runtime_s, bar ? range_text(bar->low_s, bar->high_s) : "–",
                       e.metrics.tokens_per_s.value_or(0), e.metrics.mfu.value_or(0),
                       e.peak_memory_bytes / 1e9);
    for (const auto* c : shown)
      out += fmt::format(" {:>7}", fmt::format("{:.1f}%", 100 * c->share(b)));
    // With activation offload, the host memory it takes (a host's, its GPUs' peaks summed).
    const std::string host = e.metrics.offloads() ? fmt::format(", host {:.4g} GB of {:.4g}",
                                                                e.metrics.host_peak_bytes / 1e9,
                                                                e.metrics.host_memory_bytes / 1e9)
                                                  : "";
    out += wide ? "  " + describe(e.layout) + host + "\n"
                : "\n" + wrap(describe(e.layout) + host, kTextWidth, "      ", "        ");
  }
  std::vector<std::string> meanings;
  for (const auto* c : shown)
    meanings.emplace_back(c->meaning);
  std::string note = fmt::format("shares of the runtime: {}", fmt::join(meanings, ", "));
  if (shown.size() < std::size(kShares)) note += "; the others are 0.0% for every layout (--wide)";
  if (!r.top.empty()) {
    const auto& m = r.top.front().metrics;
    const auto count = parse_flop_count(m.flop_count).value_or(FlopCount::Palm);
    note += fmt::format("; MFU counts model FLOPs as {} (--flop-count)", describe(count));
    // Each row's range comes from the published runs of its own regime (docs/accuracy.md).
    note +=
        "; 90% range: where a measured runtime falls, from the published runs of the layout's "
        "kind (dense, CP or MoE; docs/accuracy.md, \"Error bars\")";
    if (!m.interval_note.empty()) note += "; " + m.interval_note;
  }
  return out + wrap(note, wide ? std::string::npos : kTextWidth, "  ", "    ");
}

std::string text_report(const PlanRequest& q, const PlanResult& r, double seconds, bool wide) {
  const auto width = wide ? std::string::npos : kTextWidth;
  std::string out = header(q, r, seconds, width) + reference_text(r);
  if (r.top.empty()) {
    out += "  no layout fits and runs\n";
  } else {
    out += ranking(r, wide);
  }
  if (!r.rejections.empty()) {
    out += "\nnot ranked:\n";
    for (const auto& x : r.rejections) {
      out += wrap(x.reason, width, fmt::format("{:>8}  ", x.count), "          ");
      out += wrap("e.g. " + x.example, width, "          ", "            ");
    }
  }
  return out;
}

// Why the layout at `rank` (1-based) wins over the next ones: the runtime's parts side by side.
std::string explain(const PlanResult& r, std::size_t rank) {
  if (rank < 1 || rank > r.top.size()) {
    throw Error(
        fmt::format("--explain {}: the plan ranked {} layouts (see --top)", rank, r.top.size()));
  }
  const auto& a = r.top[rank - 1];
  const auto pa = runtime_parts(a.metrics);
  std::string out = "\n" + wrap(fmt::format("why rank {} ({}) wins:", rank, describe(a.layout)),
                                kTextWidth, "", "  ");
  const auto row = [](const char* name, double x, double y) {
    return fmt::format("  {:<34} {:>10.2f} {:>10.2f} {:>+10.2f}\n", name, 1e3 * x, 1e3 * y,
                       1e3 * (y - x));
  };
  if (rank == r.top.size()) out += "  it is the last ranked layout; raise --top to compare more\n";
  for (std::size_t j = rank; j < r.top.size() && j < rank + 3; ++j) {
    const auto& b = r.top[j];
    const auto pb = runtime_parts(b.metrics);
    out += "\n" + wrap(fmt::format("against rank {}: {}", j + 1, describe(b.layout)), kTextWidth,
                       "  ", "    ");
    out += fmt::format("  {:<34} {:>10} {:>10} {:>10}\n", "ms per iteration", "this", "other",
                       "other - this");
    out += row("runtime", a.metrics.runtime_s, b.metrics.runtime_s);
    out += row("compute (table ops, less TP comm)", pa.compute, pb.compute);
    out += row("pipeline bubble (idle)", pa.bubble, pb.bubble);
    out += row("exposed pipeline transfers", pa.pipeline, pb.pipeline);
    out += row("tensor-parallel communication", pa.tp, pb.tp);
    if (pa.experts > 0 || pb.experts > 0) out += row("expert all-to-all", pa.experts, pb.experts);
    out += row("exposed data-parallel reduction", pa.reductions, pb.reductions);
    out += row("optimizer step", pa.optimizer, pb.optimizer);
    out += row("overheads (host steps, interference)", pa.overhead, pb.overhead);
    out += fmt::format("  {:<34} {:>10.2f} {:>10.2f} {:>+10.2f}  (GB, largest device)\n",
                       "peak memory", a.peak_memory_bytes / 1e9, b.peak_memory_bytes / 1e9,
                       (b.peak_memory_bytes - a.peak_memory_bytes) / 1e9);
    // The largest difference says why.
    const std::pair<const char*, double> deltas[] = {
        {"compute", pb.compute - pa.compute},
        {"pipeline bubble", pb.bubble - pa.bubble},
        {"exposed pipeline transfers", pb.pipeline - pa.pipeline},
        {"tensor-parallel communication", pb.tp - pa.tp},
        {"expert all-to-all", pb.experts - pa.experts},
        {"exposed data-parallel reduction", pb.reductions - pa.reductions},
        {"optimizer step", pb.optimizer - pa.optimizer},
        {"overheads", pb.overhead - pa.overhead}};
    const auto* most = &deltas[0];
    for (const auto& d : deltas) {
      if (d.second > most->second) most = &d;
    }
    out += fmt::format(
        "  it is {:.2f}% faster; the part that decides: {}, {:.2f} ms less than rank {}'s\n",
        100 * (b.metrics.runtime_s / a.metrics.runtime_s - 1), most->first, 1e3 * most->second,
        j + 1);
  }
  return out;
}

struct PlanState {
  std::string model = "llama2-70b", system = "dgx-h100";
  // Unset unless given: 0 or -1 given is refused by plan() with the rule, not read as "unset".
  std::optional<std::int64_t> gpus, global_batch;
  PlanSpaceText space;
  RunFlags run;  // the run's options plan does not search (sim/options.hpp)
  bool no_prune = false;
  bool progress_lines = false;  // --progress-lines
  bool wide = false;            // --wide
  int top = 10;
  std::size_t explain = 0;
  unsigned threads = 0;
  std::string shard, format, output, table, trace, svg, table_format, runnable_by, job_out;
  bool force = false;
  std::string from_run, runs = "published-runs";
  bool keep_run_options = false;
};

// The request the options describe; with a run id, the run's model, system, GPUs, batch, job and
// layout, its layout as the reference (and with --keep-run-options its recomputation, sequence
// parallelism and optimizer sharding as the only choices). The run's flags apply over the model's
// defaults, or over the run's own options.
PlanRequest make_request(const PlanState& s, const std::string& run_id) {
  PlanRequest q;
  SimulationSetup base;
  if (!run_id.empty()) {
    plan_from_run(q, s.runs, run_id);
    if (s.gpus) q.gpus = *s.gpus;
    if (s.global_batch) q.global_batch = *s.global_batch;
    base = {q.model, q.job, q.layout, q.system, q.lowering, q.sim};
  } else {
    if (!s.gpus) throw Error("plan: --gpus is required (or --from-run ID)");
    if (!s.global_batch) {
      throw Error("plan: --global-batch is required (or --from-run ID)");
    }
    base = default_setup(io::load_model(s.model), io::load_system(s.system));
    for (const auto& note : base.model.notes)
      fmt::print(stderr, "note: {}\n", note);
    q.gpus = *s.gpus;
    q.global_batch = *s.global_batch;
  }
  apply_settings(base, s.run.all());
  q.model = std::move(base.model);
  q.system = std::move(base.system);
  q.job = base.job;
  q.layout = base.layout;
  q.lowering = base.lowering;
  q.sim = base.options;
  q.space = parse_plan_space(s.space);
  if (!s.runnable_by.empty()) q.runnable_by = parse_runtime(s.runnable_by);
  q.top = s.top;
  q.prune = !s.no_prune;
  q.threads = s.threads;
  if (!s.shard.empty()) std::tie(q.shard, q.shards) = parse_shard(s.shard);
  if (!run_id.empty() && s.keep_run_options) keep_reference_options(q);
  // A job file's layout is the reference to rank, as a measured run's is.
  if (s.run.job() != nullptr && run_id.empty())
    q.reference = job_reference(q, fmt::format("--job {}", s.run.job_path));
  return q;
}

// Every iteration run of the file planned and compared with its published layout (Markdown).
std::string published_comparison(const PlanState& s) {
  const auto runs = load_measurements(s.runs);
  std::string out = fmt::format(
      "| run | GPUs | batch | published layout | predicted s | its rank | plan's best layout | "
      "predicted s | best / published |\n|---|---:|---:|---|---:|---:|---|---:|---:|\n");
  for (const auto& run : runs.runs) {
    if (run.kind != MeasurementKind::Iteration) continue;
    PlanRequest q = make_request(s, run.id);
    q.top = 1;
    const auto r = plan(q);
    const auto cell = [](const std::optional<PlanEntry>& e) {
      return e ? fmt::format("{:.3f}", e->metrics.runtime_s) : std::string("—");
    };
    std::optional<PlanEntry> best;
    if (!r.top.empty()) best = r.top.front();
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", run.id, q.gpus, q.global_batch,
        describe(*q.reference),
        r.reference ? cell(r.reference) : "cannot run: " + r.reference_error,
        r.reference ? rank_text(r) : "—", best ? describe(best->layout) : "none fits", cell(best),
        best && r.reference
            ? fmt::format("{:+.1f}%",
                          100 * (best->metrics.runtime_s / r.reference->metrics.runtime_s - 1))
            : "—");
  }
  return out;
}
}  // namespace

Subcommand add_plan(CLI::App& app) {
  auto s = std::make_shared<PlanState>();
  auto* cmd = app.add_subcommand(
      "plan",
      "The fastest hybrid-parallel layouts (TP, PP, DP, schedule, micro batch, recomputation, "
      "sequence parallelism, distributed optimizer) of a model on a cluster, by simulation");
  cmd->add_option("--model", s->model, "model preset or file")->capture_default_str();
  cmd->add_option("--system", s->system, "system preset or file")->capture_default_str();
  cmd->add_option("--gpus", s->gpus, "GPUs in all (TP · PP · DP); required unless --from-run");
  cmd->add_option("--global-batch", s->global_batch,
                  "sequences per iteration; required unless --from-run");
  cmd->add_option("--from-run", s->from_run,
                  "plan the model, system, GPUs, batch and runtime options of a measured run "
                  "(an id of --runs) and compare its layout with the plan's; all: every run, "
                  "as a Markdown table");
  cmd->add_flag("--keep-run-options", s->keep_run_options,
                "with --from-run: keep the run's recomputation, sequence parallelism and optimizer "
                "sharding, and plan only the layout");
  cmd->add_option("--runs", s->runs,
                  "measured runs for --from-run: a TOML file, or published-runs (built in)")
      ->capture_default_str();
  cmd->add_option("--tp", s->space.tp,
                  "tensor-parallel sizes (default: the divisors of the node size)")
      ->delimiter(',');
  cmd->add_option("--pp", s->space.pp, "pipeline-parallel sizes (default: every divisor)")
      ->delimiter(',');
  cmd->add_option("--micro-batch", s->space.micro_batch, "micro-batch sizes (default: 1,2,4,8,16)")
      ->delimiter(',');
  cmd->add_option("--schedules", s->space.schedules,
                  "schedules to try (default: every registered one but gis and gis-h, and "
                  "zb-authors and zb-authors-v: the "
                  "zero-bubble authors' schedulers planned for each layout)")
      ->delimiter(',');
  cmd->add_option(
         "--chunks", s->space.chunks,
         "virtual chunks for schedules that take -v (default: each v in 2..8 dividing the layers "
         "per device)")
      ->delimiter(',');
  cmd->add_option("--recompute", s->space.recompute,
                  "recomputation: none, selective, full, selective-op, every-other-layer")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--sequence-parallel", s->space.sequence_parallel,
                  "both, on or off (with TP > 1)")
      ->capture_default_str();
  cmd->add_option("--distributed-optimizer", s->space.distributed_optimizer,
                  "both, on or off (with DP > 1)")
      ->capture_default_str();
  cmd->add_option("--cp", s->space.cp,
                  "context-parallel sizes to try, e.g. 1,2,4 (default: 1 and each power of two "
                  "that leaves every rank 2,048 tokens or more); each must split the sequence "
                  "into 2·CP chunks")
      ->delimiter(',');
  cmd->add_option("--cp-method", s->space.cp_method,
                  "the CP exchange: ring (default), allgather or a2a (heads must divide)");
  cmd->add_option("--ep", s->space.ep,
                  "expert-parallel sizes to try for a mixture of experts, e.g. 8,16,32 (default: "
                  "every power of two dividing the experts and TP × CP × DP)")
      ->delimiter(',');
  cmd->add_option(
         "--etp", s->space.etp,
         "expert-tensor-parallel sizes to try for a mixture of experts, e.g. 1,2 (default: "
         "1); EP × ETP must divide TP × CP × DP")
      ->delimiter(',');
  cmd->add_option("--moe-recompute", s->space.moe_recompute,
                  "what a mixture of experts recomputes, the values to try: none, moe_act, mlp "
                  "(default: the job's own)")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "moe_act", "mlp"}));
  cmd->add_option("--a2a-overlap", s->space.a2a_overlap,
                  "Megatron-Core's 1F1B all-to-all overlap where EP > 1: both, on or off")
      ->capture_default_str();
  cmd->add_option("--fsdp", s->space.fsdp,
                  "fully sharded data parallelism over DP × CP: both, on or off (never with the "
                  "distributed optimizer)")
      ->capture_default_str();
  cmd->add_option("--search", s->space.search,
                  "KEY=A,B,...: also try each of these values of any other run option (its key "
                  "as `pipetab options` lists it, e.g. moe_dispatcher=alltoall,deepep or "
                  "tp_overlap=backward,all); repeat for more options, every combination is tried")
      ->type_name("KEY=VALUES");
  add_run_flags(*cmd, s->run, kPlanSearched, false);
  cmd->add_flag("--wide", s->wide,
                "one line per layout with every share of the runtime, and no line folded to the "
                "120 columns of the default");
  cmd->add_option("--top", s->top, "layouts ranked")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--no-prune", s->no_prune,
                "simulate every layout that fits (no branch and bound; slower, same ranking)");
  cmd->add_option("--explain", s->explain, "why the layout at this rank wins over the next ones");
  cmd->add_flag("--progress-lines", s->progress_lines,
                "report progress on stderr as lines \"progress PHASE DONE TOTAL\" (PHASE: "
                "checking, then simulating; at most ten a second), for a program that runs plan "
                "(the web page) rather than a terminal's bar");
  cmd->add_option("-j,--threads", s->threads, "threads (default: all cores)");
  cmd->add_option("--shard", s->shard,
                  "K/N: plan only the K-th of N contiguous slices of the layouts (job arrays); "
                  "the shards' top layouts together hold the whole plan's");
  add_format(*cmd, s->format, {"text", "csv", "json"});
  cmd->add_option("-o,--output", s->output, "write the report here instead of stdout");
  cmd->add_option("-t,--table-out", s->table,
                  "write the best layout's schedule table (.csv PyTorch pipelining, .json)");
  add_search_export_options(*cmd, s->table_format, s->force, s->runnable_by, "plan");
  cmd->add_option("--job-out", s->job_out,
                  "write the best layout as the job file its framework runs: a torchtitan job "
                  "TOML (FILE.toml) or Megatron-LM arguments (any other name); docs/jobs.md");
  cmd->add_option("--trace", s->trace, "simulate the best layout and write a Chrome trace");
  cmd->add_option("--svg", s->svg, "simulate the best layout and write an SVG timeline");
  return {
      cmd, [s] {
        if (s->from_run == "all") {
          emit(s->output, published_comparison(*s));
          return;
        }
        s->run.gpus = s->gpus;  // a job file's implicit degrees are plan's GPUs'
        PlanRequest q = make_request(*s, s->from_run);
        std::optional<Progress> bar;
        int phase = 0;
        std::int64_t last = 0;
        auto last_line = std::chrono::steady_clock::time_point{};
        q.progress = [&](int p, std::int64_t done, std::int64_t total) {
          if (s->progress_lines) {
            const auto now = std::chrono::steady_clock::now();
            if (p != phase || done == total || now - last_line >= std::chrono::milliseconds(100)) {
              std::fprintf(stderr, "progress %s %lld %lld\n", p == 1 ? "checking" : "simulating",
                           static_cast<long long>(done), static_cast<long long>(total));
              std::fflush(stderr);
              last_line = now;
            }
            phase = p;
            return;
          }
          if (p != phase) {
            if (bar) bar->update(last, true);
            if (isatty(fileno(stderr)) != 0)
              std::fprintf(stderr, p == 1 ? "checking layouts (memory, lower bounds)\n"
                                          : "simulating in order of the lower bound\n");
            bar.emplace(total, 0);
            phase = p;
          }
          bar->update(done);
          last = done;
        };
        const auto start = std::chrono::steady_clock::now();
        const auto result = plan(q);
        if (bar) bar->update(last, true);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::string report;
        if (s->format == "json") {
          report = to_json(q, result).dump(2) + "\n";
        } else if (s->format == "csv") {
          report = csv_report(q, result);
        } else {
          report = text_report(q, result, seconds, s->wide);
          if (s->explain > 0) report += explain(result, s->explain);
        }
        if (s->format != "text" && s->explain > 0) {
          throw Error("--explain prints text: use it with --format text");
        }
        // The report first: a table, trace or picture that cannot be written must not lose it.
        emit(s->output, report);
        if (!result.top.empty() && !s->job_out.empty()) {
          const auto& best = result.top.front();
          auto setup = layout_setup(q, best.layout);
          setup.job.global_batch = q.global_batch;
          const std::string comment =
              fmt::format("pipetab plan: {} on {} GPUs of {}: {}", q.model.name, q.gpus,
                          q.system.name, describe(best.layout));
          io::write_file(s->job_out,
                         s->job_out.ends_with(".toml")
                             ? io::torchtitan_job_toml(setup.job, setup.layout, q.gpus, comment)
                             : io::megatron_arguments(setup.job, setup.layout, q.gpus, comment));
        }
        if (!result.top.empty() && (!s->table.empty() || !s->trace.empty() || !s->svg.empty())) {
          const auto& best = result.top.front();
          const auto table = layout_table(q, best.layout);
          if (!s->table.empty()) {
            io::TableSource source{best.layout.schedule,
                                   {{"devices", best.layout.pipeline_parallel},
                                    {"microbatches", best.layout.microbatches},
                                    {"layout", describe(best.layout)}}};
            export_table(s->table, table, table_format_for(s->table, s->table_format), source,
                         s->force);
          }
          if (!s->trace.empty() || !s->svg.empty()) {
            // Checked from the table before simulating, as simulate does.
            if (!s->svg.empty()) {
              if (const auto refusal = timeline_svg_refusal(table))
                throw Error(fmt::format("--svg {}: {}", s->svg, *refusal));
            }
            auto setup = layout_setup(q, best.layout);
            setup.options.record_memory = !s->trace.empty();
            const auto simulation = simulate_table(table, setup, best.layout.schedule);
            if (!s->trace.empty()) {
              const auto stats = write_chrome_trace(s->trace, table, simulation);
              std::fputs(trace_size_warning(s->trace, stats).c_str(), stderr);
            }
            if (!s->svg.empty()) {
              io::write_file(s->svg,
                             timeline_svg(table, simulation,
                                          fmt::format("pipetab plan: {}", describe(best.layout))));
            }
          }
        }
        if (result.top.empty()) {
          throw Error(fmt::format(
              "plan: no layout of {} GPUs fits and runs (see the reasons above)", q.gpus));
        }
      }};
}

}  // namespace pipetab::cli
