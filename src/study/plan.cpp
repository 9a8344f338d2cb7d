#include "pipetab/study/plan.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "parallel.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/bounds.hpp"
#include "pipetab/study/measurements.hpp"
#include "pipetab/study/tune.hpp"

namespace pipetab {

namespace {

// In increasing order, in O(sqrt n) steps (the loop to n hung on `--gpus 2^62`).
std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> low, high;
  for (std::int64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// A layout being checked: its place in the enumeration, or why it was not ranked.
struct Checked {
  PlanLayout layout;
  std::int64_t index = 0;
  std::string reason;  // empty: it fits
  std::string detail;
  double lower_bound_s = 0.0;
  double peak_memory_bytes = 0.0;
};

ScheduleParams schedule_params(const PlanLayout& l) {
  ScheduleParams p;
  p.devices = l.pipeline_parallel;
  p.microbatches = l.microbatches;
  if (l.chunks > 0) p.chunks = l.chunks;
  return p;
}

// The zero-bubble authors' schedulers, planned for the layout's own pass times and transfer
// delay at 1F1B's memory (S microbatches in flight, the ZB paper's "1p" setting): `tune`'s
// family, one schedule each per layout.
constexpr std::string_view kAuthors = "zb-authors", kAuthorsV = "zb-authors-v";

}  // namespace

ScheduleTable layout_table(const PlanRequest& request, const PlanLayout& l) {
  if (l.schedule != kAuthors && l.schedule != kAuthorsV)
    return generate(find_schedule(l.schedule), schedule_params(l));
  const auto S = static_cast<std::int32_t>(l.pipeline_parallel);
  const auto M = static_cast<std::int32_t>(l.microbatches);
  ZeroBubbleProblem problem = measured_zero_bubble_problem(layout_setup(request, l), S, M);
  problem.memory_limit = S;
  std::optional<ZeroBubbleSchedule> schedule;
  if (l.schedule == kAuthors) {
    schedule = best_zero_bubble_authors_schedule(problem);
  } else {
    for (auto* times : {&problem.forward, &problem.input_grad, &problem.weight_grad}) {
      for (double& t : *times)
        t /= 2;  // a V stage is half a device share
    }
    schedule = best_zero_bubble_v_schedule(problem);
  }
  if (!schedule) {
    throw ParamError(
        fmt::format("{}: the authors' scheduler finds no order for S = {}, M = {} "
                    "within 1F1B's memory",
                    l.schedule, S, M));
  }
  return std::move(schedule->table);
}

namespace {

// Phase 1: build, lower and bound one layout; reject it with the rule it breaks.
void check(const PlanRequest& request, Checked& c) {
  const PlanLayout& l = c.layout;
  const auto& m = *request.model.transformer();
  // The model reader's rule (tensor_parallel_misfit): a layout it would refuse is never ranked.
  if (const auto misfit = tensor_parallel_misfit(m, l.tensor_parallel)) {
    c.reason = "tensor parallel: does not divide the heads, key-value heads and MLP evenly";
    c.detail = fmt::format("{} = {} over TP {}", misfit->what, misfit->value, l.tensor_parallel);
    return;
  }
  if (l.context_parallel > 1) {
    Layout layout;
    layout.tp = l.tensor_parallel;
    layout.cp = l.context_parallel;
    layout.cp_method = request.space.cp_method;
    try {
      require_layout(m, layout);
    } catch (const ParamError& e) {
      c.reason = "context parallel: the sequence or the heads do not split over the CP ranks";
      c.detail = e.what();
      return;
    }
  }
  if (request.lowering.runtime == Runtime::Megatron && l.schedule != "1f1b" &&
      l.schedule != "interleaved") {
    c.reason = "runtime: Megatron-LM runs only 1F1B and interleaved 1F1B";
    c.detail = fmt::format("{} under --runtime megatron", l.schedule);
    return;
  }
  // Every schedule's stage count is a multiple of PP, so PP must divide the layers before any
  // table is built (PP 1,024 of an 80-layer model would build the largest tables for nothing).
  // With balance_embedding the embedding and the output count as a layer each (Megatron's
  // account_for_embedding/loss_in_pipeline_split; Llama 3's one layer fewer on the first and last
  // stage), so layers + 2 must split.
  const std::int64_t units = m.layers + (m.balance_embedding ? 2 : 0);
  if (units % l.pipeline_parallel != 0) {
    c.reason = "pipeline: the layers do not split into equal stages";
    c.detail = fmt::format("{} layers{} over PP {} (Megatron-LM requires equal stages)", m.layers,
                           m.balance_embedding ? " and the embedding and output" : "",
                           l.pipeline_parallel);
    return;
  }
  const SimulationSetup setup = layout_setup(request, l);
  std::optional<ScheduleTable> table;
  try {
    table = layout_table(request, l);
  } catch (const ParamError& e) {
    c.reason = "schedule: its rules reject the layout";
    c.detail = e.what();
    return;
  }
  if (request.runnable_by) {
    if (const auto why = runtime_refuses(*table, l.schedule, *request.runnable_by)) {
      c.reason =
          fmt::format("runtime: {} cannot run it (--runnable-by)", to_string(*request.runnable_by));
      c.detail = *why;
      return;
    }
  }
  if (units % table->stages != 0) {
    c.reason = "pipeline: the layers do not split into equal stages";
    c.detail =
        fmt::format("{} layers{} over {} stages (Megatron-LM requires equal stages)", m.layers,
                    m.balance_embedding ? " and the embedding and output" : "", table->stages);
    return;
  }
  try {
    const Network network(setup.system, table->devices,
                          gpus_per_device(setup.model, setup.lowering));
    // The runtime that really runs the layout, resolved with the schedule's name as phase 2's
    // simulate_table does (lower() alone sees no name and took every table for PyTorch's).
    LoweringOptions lowering = setup.lowering;
    lowering.runtime = resolve_runtime(lowering.runtime, *table, l.schedule).runtime;
    const ExecGraph graph = lower(*table, setup.model, network, lowering);
    const GraphBounds bounds = graph_bounds(graph, network);
    const double capacity = setup.system.device.memory_bytes * (1 - request.memory_reserve);
    const double weights = *std::max_element(graph.static_bytes.begin(), graph.static_bytes.end());
    c.peak_memory_bytes =
        *std::max_element(bounds.peak_memory_bytes.begin(), bounds.peak_memory_bytes.end());
    c.lower_bound_s = bounds.runtime_lower_bound_s;
    if (weights > capacity) {
      c.reason = "memory: weights, gradients and optimizer state alone exceed the device";
      c.detail = fmt::format("{:.4g} GB of {:.4g} GB usable", weights / 1e9, capacity / 1e9);
    } else if (c.peak_memory_bytes > capacity) {
      c.reason = "memory: over the device with the schedule's activations";
      c.detail = fmt::format("{:.4g} GB of {:.4g} GB usable ({:.4g} GB static)",
                             c.peak_memory_bytes / 1e9, capacity / 1e9, weights / 1e9);
    }
  } catch (const ParamError& e) {
    c.reason = "system: the cluster or the simulator cannot take the layout";
    c.detail = e.what();
  }
}

// Every layout of the request, in enumeration order (TP, PP, micro batch, schedule, chunks,
// recompute, sequence parallelism, distributed optimizer), and the layouts that are rejected
// before they are built (the batch does not divide over the replicas).
struct Enumeration {
  std::vector<Checked> layouts;
  std::map<std::string, std::pair<std::int64_t, std::string>> early;  // reason -> count, example
};

Enumeration enumerate(const PlanRequest& r) {
  const PlanSpace& s = r.space;
  // The units the pipeline splits: the layers, and the embedding and output when balanced.
  const std::int64_t layers =
      r.model.transformer()->layers + (r.model.transformer()->balance_embedding ? 2 : 0);
  const std::int64_t node = std::max<std::int64_t>(1, r.system.devices_per_node);
  auto tps = s.tensor_parallel.empty() ? divisors(node) : s.tensor_parallel;
  // Registered schedules, then the authors' schedulers (no registry entry: null).
  std::vector<std::pair<std::string_view, const ScheduleInfo*>> schedules;
  if (s.schedules.empty()) {
    for (const auto* info : all_schedules())
      schedules.emplace_back(info->name, info);
    schedules.emplace_back(kAuthors, nullptr);
    schedules.emplace_back(kAuthorsV, nullptr);
  } else {
    for (const auto& name : s.schedules) {
      std::pair<std::string_view, const ScheduleInfo*> entry{kAuthors, nullptr};
      if (name == kAuthors || name == kAuthorsV) {
        entry.first = name == kAuthors ? kAuthors : kAuthorsV;
      } else {
        const auto& info = find_schedule(name);
        entry = {info.name, &info};
      }
      // A schedule named twice (zb-authors,zb-authors) is planned once: twice ranked the same
      // layouts twice.
      if (std::find(schedules.begin(), schedules.end(), entry) == schedules.end())
        schedules.push_back(entry);
    }
  }
  // With one stage every schedule runs each microbatch's forward and backward in turn; PP 1 tries
  // one of them: 1F1B (Megatron-LM's forward_backward_no_pipelining) when listed.
  std::string_view single = schedules.front().first;
  for (const auto& [name, info] : schedules) {
    if (name == "1f1b") single = name;
  }
  Enumeration e;
  const std::vector<std::int64_t> cps =
      s.context_parallel.empty() ? std::vector<std::int64_t>{1} : s.context_parallel;
  for (const auto tp : tps)
    for (const auto cp : cps) {
      if (tp < 1 || cp < 1 || r.gpus % (tp * cp) != 0) continue;
      const std::int64_t stage_gpus = tp * cp;
      const auto pps =
          s.pipeline_parallel.empty() ? divisors(r.gpus / stage_gpus) : s.pipeline_parallel;
      for (const auto pp : pps) {
        if (pp < 1 || (r.gpus / stage_gpus) % pp != 0) continue;
        const std::int64_t dp = r.gpus / (stage_gpus * pp);
        if (r.global_batch % dp != 0) {
          auto& [count, example] =
              e.early["batch: the global batch does not divide over the data-parallel replicas"];
          if (count++ == 0)
            example = fmt::format("TP {} · CP {} · PP {} · DP {}: {} sequences over {} replicas",
                                  tp, cp, pp, dp, r.global_batch, dp);
          continue;
        }
        const std::int64_t per_replica = r.global_batch / dp;
        const std::vector<std::int64_t> default_mbs{1, 2, 4, 8, 16};
        for (const auto mb : s.micro_batch.empty() ? default_mbs : s.micro_batch) {
          if (mb < 1 || per_replica % mb != 0) continue;
          for (const auto& [name, info] : schedules) {
            if (pp == 1 && name != single) continue;
            const std::int32_t default_chunks = info != nullptr ? info->default_chunks : 0;
            std::vector<std::int64_t> chunks{0};
            if (pp == 1 && default_chunks > 0) chunks = {1};
            if (pp > 1 && default_chunks > 0) {
              // Default: every v from 2 to 8 that splits the device's layers evenly (Megatron-LM
              // requires it), or the schedule's default when none does.
              chunks = s.chunks;
              if (chunks.empty()) {
                const std::int64_t per_device = layers % pp == 0 ? layers / pp : 0;
                for (std::int64_t v = 2; v <= 8; ++v) {
                  if (per_device > 0 && per_device % v == 0) chunks.push_back(v);
                }
                if (chunks.empty()) chunks.push_back(default_chunks);
              }
              std::sort(chunks.begin(), chunks.end());
              chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
            }
            for (const auto v : chunks)
              for (const auto rc : s.recompute)
                for (const bool sp : s.sequence_parallel) {
                  if (sp && tp == 1) continue;
                  for (const bool dist : s.distributed_optimizer) {
                    if (dist && dp == 1) continue;
                    for (const bool fsdp : s.fsdp) {
                      // FSDP shards what the distributed optimizer shards, and more; over one
                      // rank there is nothing to shard.
                      if (fsdp && (dist || dp * cp == 1)) continue;
                      Checked c;
                      c.layout = {tp, pp, dp, cp,  fsdp, mb, per_replica / mb, std::string(name),
                                  v,  rc, sp, dist};
                      c.index = static_cast<std::int64_t>(e.layouts.size());
                      e.layouts.push_back(std::move(c));
                    }
                  }
                }
          }
        }
      }
    }
  return e;
}

bool faster(const PlanEntry& a, const PlanEntry& b) {
  if (a.metrics.runtime_s != b.metrics.runtime_s) return a.metrics.runtime_s < b.metrics.runtime_s;
  return a.index < b.index;
}

}  // namespace

std::string describe(const PlanLayout& l) {
  std::string out = fmt::format(
      "TP {}{} · PP {} · {} {}, {}", l.tensor_parallel,
      l.context_parallel > 1 ? fmt::format(" · CP {}", l.context_parallel) : std::string(),
      l.pipeline_parallel, l.fsdp ? "FSDP" : "DP", l.data_parallel, l.schedule);
  if (l.chunks > 0) out += fmt::format(" v {}", l.chunks);
  out += fmt::format(", micro batch {} × {}, {}", l.micro_batch, l.microbatches,
                     l.recompute == Recompute::None   ? "no recompute"
                     : l.recompute == Recompute::Full ? "full recompute"
                                                      : "selective");
  if (l.sequence_parallel) out += ", SP";
  if (l.distributed_optimizer) out += ", distributed optimizer";
  return out;
}

SimulationSetup layout_setup(const PlanRequest& request, const PlanLayout& l) {
  SimulationSetup setup{request.model, request.system, request.lowering, request.sim};
  auto& m = std::get<TransformerConfig>(setup.model.spec);
  m.tensor_parallel = l.tensor_parallel;
  m.micro_batch = l.micro_batch;
  m.recompute = l.recompute;
  m.sequence_parallel = l.sequence_parallel;
  m.context_parallel = l.context_parallel;
  m.cp_method = request.space.cp_method;
  setup.lowering.data_parallel = static_cast<std::int32_t>(l.data_parallel);
  setup.lowering.iteration.distributed_optimizer = l.distributed_optimizer;
  setup.lowering.fsdp.enabled = l.fsdp;
  setup.lowering.costs.reset();
  return setup;
}

PlanResult plan(const PlanRequest& request) {
  if (request.model.transformer() == nullptr) {
    throw ParamError(
        fmt::format("plan: model '{}' gives explicit costs; planning a layout needs "
                    "a transformer (its shape decides TP, memory and costs)",
                    request.model.name));
  }
  // A bound checked before any work: the largest clusters have about 10^5 GPUs, and the search
  // enumerates the divisors of the count.
  if (request.gpus < 1 || request.gpus > kMaxPlanGpus) {
    throw ParamError(
        fmt::format("plan: --gpus {} must be from 1 to {}", request.gpus, kMaxPlanGpus));
  }
  if (request.global_batch < 1) {
    throw ParamError(
        fmt::format("plan: --global-batch {} must be at least 1", request.global_batch));
  }
  if (request.top < 1) throw ParamError("plan: --top must be at least 1");
  // A size below 1 was skipped without a word, and the plan then reported "no layout".
  const auto sizes = [](const std::vector<std::int64_t>& values, const char* option,
                        const char* what) {
    for (const auto v : values) {
      if (v < 1) {
        throw ParamError(fmt::format("plan: {} {}: {} must be at least 1", option, v, what));
      }
    }
  };
  sizes(request.space.tensor_parallel, "--tp", "a tensor-parallel size");
  sizes(request.space.pipeline_parallel, "--pp", "a pipeline-parallel size");
  sizes(request.space.micro_batch, "--micro-batch", "a micro-batch size");
  sizes(request.space.chunks, "--chunks", "a chunk count");
  sizes(request.space.context_parallel, "--cp", "a context-parallel size");
  const auto* m = request.model.transformer();
  if (m->seq_len < 1) {
    throw ParamError(fmt::format("plan: --seq-len {} must be at least 1", m->seq_len));
  }
  if (!(request.memory_reserve >= 0 && request.memory_reserve < 1)) {
    throw ParamError(
        fmt::format("plan: --memory-reserve {} must be in [0, 1)", request.memory_reserve));
  }
  if (request.shards < 1 || request.shard < 1 || request.shard > request.shards) {
    throw ParamError(fmt::format("plan: shard {}/{}: expected K/N with 1 <= K <= N", request.shard,
                                 request.shards));
  }
  Enumeration e = enumerate(request);
  if (e.layouts.empty()) {
    std::string why;
    for (const auto& [reason, v] : e.early)
      why += fmt::format("; {} ({})", reason, v.second);
    throw ParamError(fmt::format(
        "plan: no layout of {} GPUs for a global batch of {}: TP must divide the node ({} GPUs) "
        "and the GPU count, TP · PP must divide the GPU count, and the batch per replica must "
        "divide into micro batches{}",
        request.gpus, request.global_batch, request.system.devices_per_node, why));
  }
  // This shard's slice, contiguous in enumeration order.
  const auto total = static_cast<std::int64_t>(e.layouts.size());
  const std::int64_t begin = total * (request.shard - 1) / request.shards;
  const std::int64_t end = total * request.shard / request.shards;
  std::vector<Checked> layouts(std::make_move_iterator(e.layouts.begin() + begin),
                               std::make_move_iterator(e.layouts.begin() + end));
  PlanResult result;
  result.layouts = static_cast<std::int64_t>(layouts.size());
  std::map<std::string, PlanRejection> rejections;
  const auto reject = [&](const std::string& reason, const std::string& example,
                          std::int64_t count) {
    auto& r = rejections[reason];
    if (r.count == 0) {
      r.reason = reason;
      r.example = example;
    }
    r.count += count;
    result.rejected += count;
  };
  // The layouts refused before they are built are layouts too: "228 layouts: 229 rejected"
  // counted them among the rejected only.
  if (request.shard == 1) {
    for (const auto& [reason, v] : e.early) {
      reject(reason, v.second, v.first);
      result.layouts += v.first;
    }
  }

  // Phase 1: every layout built, lowered, bounded and checked against the memory, in blocks so
  // that progress is reported from this thread.
  constexpr std::size_t kBlock = 256;
  for (std::size_t b = 0; b < layouts.size(); b += kBlock) {
    const std::size_t n = std::min(kBlock, layouts.size() - b);
    detail::parallel_for(n, request.threads,
                         [&](std::size_t i) { check(request, layouts[b + i]); });
    if (request.progress)
      request.progress(1, static_cast<std::int64_t>(b + n),
                       static_cast<std::int64_t>(layouts.size()));
  }
  std::vector<const Checked*> fitting;
  for (const auto& c : layouts) {
    if (c.reason.empty()) {
      fitting.push_back(&c);
    } else {
      reject(c.reason, describe(c.layout) + ": " + c.detail, 1);
    }
  }

  // Phase 2: simulate in order of the lower bound, in fixed batches; a layout whose bound is
  // above the k-th best runtime so far cannot enter the top, nor can any after it. The
  // threshold changes only between batches, so the counts do not depend on the threads.
  std::stable_sort(fitting.begin(), fitting.end(), [](const Checked* a, const Checked* b) {
    return a->lower_bound_s < b->lower_bound_s;
  });
  constexpr std::size_t kBatch = 32;
  const auto k = static_cast<std::size_t>(request.top);
  std::vector<PlanEntry> top;
  std::vector<double> faster_than;  // every simulated runtime, for the reference's rank
  for (std::size_t b = 0; b < fitting.size(); b += kBatch) {
    const double threshold = request.prune && top.size() >= k
                                 ? top[k - 1].metrics.runtime_s
                                 : std::numeric_limits<double>::infinity();
    std::size_t n = std::min(kBatch, fitting.size() - b);
    std::size_t keep = 0;
    while (keep < n && fitting[b + keep]->lower_bound_s <= threshold)
      ++keep;
    std::vector<std::optional<PlanEntry>> entries(keep);
    std::vector<std::string> failures(keep);
    detail::parallel_for(keep, request.threads, [&](std::size_t i) {
      const Checked& c = *fitting[b + i];
      const SimulationSetup setup = layout_setup(request, c.layout);
      try {
        const ScheduleTable table = layout_table(request, c.layout);
        PlanEntry entry;
        entry.index = c.index;
        entry.layout = c.layout;
        entry.lower_bound_s = c.lower_bound_s;
        entry.peak_memory_bytes = c.peak_memory_bytes;
        entry.metrics = simulate_table(table, setup, c.layout.schedule).metrics;
        entries[i] = std::move(entry);
      } catch (const ParamError& error) {
        failures[i] = error.what();
      }
    });
    for (std::size_t i = 0; i < keep; ++i) {
      if (!entries[i]) {
        reject("simulation: the layout cannot run",
               describe(fitting[b + i]->layout) + ": " + failures[i], 1);
        continue;
      }
      ++result.simulated;
      faster_than.push_back(entries[i]->metrics.runtime_s);
      top.push_back(std::move(*entries[i]));
    }
    std::sort(top.begin(), top.end(), faster);
    if (top.size() > k) top.resize(k);
    if (request.progress)
      request.progress(2, static_cast<std::int64_t>(b + keep),
                       static_cast<std::int64_t>(fitting.size()));
    if (keep < n) {
      result.pruned += static_cast<std::int64_t>(fitting.size() - (b + keep));
      break;
    }
  }
  result.top = std::move(top);
  if (request.reference) {
    // Checked and simulated as any layout, whatever its bound; its rank counts the simulated
    // layouts faster than it (every pruned one is slower: its bound is above the k-th best).
    Checked c;
    c.layout = *request.reference;
    c.index = -1;
    check(request, c);
    if (!c.reason.empty()) {
      result.reference_error = c.reason + ": " + c.detail;
    } else {
      try {
        const auto table = layout_table(request, c.layout);
        PlanEntry entry;
        entry.index = -1;
        entry.layout = c.layout;
        entry.lower_bound_s = c.lower_bound_s;
        entry.peak_memory_bytes = c.peak_memory_bytes;
        entry.metrics =
            simulate_table(table, layout_setup(request, c.layout), c.layout.schedule).metrics;
        result.reference_rank =
            1 + std::count_if(faster_than.begin(), faster_than.end(),
                              [&](double runtime) { return runtime < entry.metrics.runtime_s; });
        const auto pruned_below = [&](const Checked* p) {
          return p->lower_bound_s < entry.metrics.runtime_s;
        };
        result.reference_rank_exact =
            std::none_of(fitting.end() - result.pruned, fitting.end(), pruned_below);
        result.reference = std::move(entry);
      } catch (const ParamError& error) {
        result.reference_error = std::string("simulation: ") + error.what();
      }
    }
  }
  for (auto& [reason, r] : rejections)
    result.rejections.push_back(std::move(r));
  std::stable_sort(
      result.rejections.begin(), result.rejections.end(),
      [](const PlanRejection& a, const PlanRejection& b) { return a.count > b.count; });
  return result;
}

RuntimeParts runtime_parts(const SimulationMetrics& m) {
  const auto b = m.breakdown();
  const double t = m.runtime_s;
  return {b.compute * t,
          b.bubble * t,
          b.exposed_pipeline * t,
          b.tp_comm * t,
          b.reductions * t,
          b.optimizer * t,
          (b.host_overhead + b.comm_interference) * t};
}

nlohmann::json layout_json(const PlanLayout& l) {
  return {{"tensor_parallel", l.tensor_parallel},
          {"pipeline_parallel", l.pipeline_parallel},
          {"data_parallel", l.data_parallel},
          {"schedule", l.schedule},
          {"chunks", l.chunks > 0 ? nlohmann::json(l.chunks) : nlohmann::json(nullptr)},
          {"micro_batch", l.micro_batch},
          {"microbatches", l.microbatches},
          {"recompute", to_string(l.recompute)},
          {"sequence_parallel", l.sequence_parallel},
          {"distributed_optimizer", l.distributed_optimizer},
          {"context_parallel", l.context_parallel},
          {"fsdp", l.fsdp}};
}

nlohmann::json to_json(const PlanRequest& q, const PlanResult& r) {
  nlohmann::json j = {
      {"model", q.model.name},          {"system", q.system.name},      {"gpus", q.gpus},
      {"global_batch", q.global_batch}, {"shard", {q.shard, q.shards}}, {"layouts", r.layouts},
      {"rejected", r.rejected},         {"pruned", r.pruned},           {"simulated", r.simulated}};
  auto& rejections = j["rejections"] = nlohmann::json::array();
  for (const auto& x : r.rejections)
    rejections.push_back({{"reason", x.reason}, {"count", x.count}, {"example", x.example}});
  if (r.reference) {
    j["reference"] = {{"layout", layout_json(r.reference->layout)},
                      {"description", describe(r.reference->layout)},
                      {"runtime_s", r.reference->metrics.runtime_s},
                      {"rank", r.reference_rank},
                      {"rank_exact", r.reference_rank_exact},
                      {"peak_memory_bytes", r.reference->peak_memory_bytes}};
  } else if (!r.reference_error.empty()) {
    j["reference"] = {{"error", r.reference_error}};
  }
  auto& top = j["top"] = nlohmann::json::array();
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    const auto& e = r.top[i];
    const auto p = runtime_parts(e.metrics);
    top.push_back({{"rank", i + 1},
                   {"layout", layout_json(e.layout)},
                   {"description", describe(e.layout)},
                   {"runtime_s", e.metrics.runtime_s},
                   {"lower_bound_s", e.lower_bound_s},
                   {"peak_memory_bytes", e.peak_memory_bytes},
                   {"seconds",
                    {{"compute", p.compute},
                     {"bubble", p.bubble},
                     {"exposed_pipeline", p.pipeline},
                     {"tp_comm", p.tp},
                     {"reductions", p.reductions},
                     {"optimizer", p.optimizer},
                     {"overhead", p.overhead}}},
                   {"simulation", to_json(e.metrics)}});
  }
  return j;
}

void plan_from_run(PlanRequest& q, const std::string& file, const std::string& id) {
  const auto runs = load_measurements(file);
  const MeasuredRun* run = nullptr;
  std::vector<std::string> ids;
  for (const auto& r : runs.runs) {
    if (r.kind != MeasurementKind::Iteration) continue;
    ids.push_back(r.id);
    if (r.id == id) run = &r;
  }
  if (run == nullptr) {
    throw Error(fmt::format("--from-run '{}': {} has no such iteration run (runs: {})", id, file,
                            fmt::join(ids, ", ")));
  }
  const auto& m = *run->model.transformer();
  q.model = run->model;
  q.system = load_run_system(runs, *run);
  q.lowering = run->lowering;
  PlanLayout l;
  l.tensor_parallel = m.tensor_parallel;
  l.pipeline_parallel = run->devices;
  l.data_parallel = run->lowering.data_parallel;
  l.micro_batch = m.micro_batch;
  l.microbatches = run->microbatches;
  l.schedule = run->schedule;
  l.chunks = run->chunks.value_or(0);
  l.recompute = m.recompute;
  l.sequence_parallel = m.sequence_parallel;
  l.distributed_optimizer = run->lowering.iteration.distributed_optimizer;
  l.context_parallel = m.context_parallel;
  l.fsdp = run->lowering.fsdp.enabled;
  q.space.cp_method = m.cp_method;
  q.gpus = l.tensor_parallel * l.context_parallel * l.pipeline_parallel * l.data_parallel;
  q.global_batch = l.micro_batch * l.microbatches * l.data_parallel;
  q.reference = l;
}

std::vector<Recompute> parse_recompute_list(const std::vector<std::string>& names) {
  std::vector<Recompute> out;
  for (const auto& n : names) {
    const auto r = parse_recompute(n);
    if (!r) {
      throw Error(fmt::format(
          "--recompute {}: expected none, selective, full, selective-op or every-other-layer", n));
    }
    out.push_back(*r);
  }
  return out;
}

std::vector<bool> parse_on_off_both(const std::string& flag, const std::string& value) {
  if (value == "both") return {false, true};
  if (value == "on") return {true};
  if (value == "off") return {false};
  throw Error(fmt::format("{} {}: expected both, on or off", flag, value));
}

}  // namespace pipetab
