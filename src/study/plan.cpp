#include "pipetab/study/plan.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <tuple>

#include "parallel.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/bounds.hpp"
#include "pipetab/sim/options.hpp"
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
  double compute_bound_s = 0.0;  // phase 1: the compute nodes alone (device_bounds with the table)
  double lower_bound_s = 0.0;    // the lowered graph's bound (phase 2; at least compute_bound_s)
  double peak_memory_bytes = 0.0;
  bool lowered = false;
};

ScheduleParams schedule_params(const PlanLayout& l) {
  ScheduleParams p;
  p.devices = l.pipeline_parallel;
  p.microbatches = l.microbatches;
  if (l.chunks > 0) p.chunks = l.chunks;
  Job job;  // the one setting of the layout's job the order depends on
  job.a2a_overlap = l.a2a_overlap;
  return job_schedule_params(p, find_schedule(l.schedule), job);
}

// The zero-bubble authors' schedulers, planned for the layout's own pass times and transfer
// delay at 1F1B's memory (S microbatches in flight, the ZB paper's "1p" setting): `tune`'s
// family, one schedule each per layout.
constexpr std::string_view kAuthors = "zb-authors", kAuthorsV = "zb-authors-v";

bool authors(const PlanLayout& l) {
  return l.schedule == kAuthors || l.schedule == kAuthorsV;
}

}  // namespace

namespace {

// The problem the authors' scheduler plans a layout's order for: its measured pass times and
// transfer delay at 1F1B's memory; per V stage (half a device share) for zb-authors-v.
ZeroBubbleProblem authors_problem(const PlanRequest& request, const PlanLayout& l) {
  const auto S = static_cast<std::int32_t>(l.pipeline_parallel);
  const auto M = static_cast<std::int32_t>(l.microbatches);
  ZeroBubbleProblem problem = measured_zero_bubble_problem(layout_setup(request, l), S, M);
  problem.memory_limit = S;
  if (l.schedule == kAuthorsV) {
    for (auto* times : {&problem.forward, &problem.input_grad, &problem.weight_grad}) {
      for (double& t : *times)
        t /= 2;  // a V stage is half a device share
    }
  }
  return problem;
}

ScheduleTable authors_table(const ZeroBubbleProblem& problem, std::string_view schedule) {
  auto planned = schedule == kAuthors ? best_zero_bubble_authors_schedule(problem)
                                      : best_zero_bubble_v_schedule(problem);
  if (!planned) {
    throw ParamError(
        fmt::format("{}: the authors' scheduler finds no order for S = {}, M = {} "
                    "within 1F1B's memory",
                    schedule, problem.devices, problem.microbatches));
  }
  return std::move(planned->table);
}

}  // namespace

ScheduleTable layout_table(const PlanRequest& request, const PlanLayout& l) {
  if (!authors(l)) return generate(find_schedule(l.schedule), schedule_params(l));
  return authors_table(authors_problem(request, l), l.schedule);
}

namespace {

// A registered schedule's table for one (schedule, PP, M, v): the layouts that differ only in
// TP, CP, DP, FSDP, micro-batch size, recompute, SP and the optimizer share it, so it is built,
// resolved to its runtime and checked once for them all.
struct TableKey {
  std::string schedule;
  std::int64_t pp = 1, microbatches = 1, chunks = 0;
  bool a2a_overlap = false;  // Megatron-Core's combined 1F1B order (schedule_params)
  // Spelled out: the web build's libc++ (emscripten 3.1.6) has no operator<=> for std::string.
  bool operator<(const TableKey& o) const {
    return std::tie(schedule, pp, microbatches, chunks, a2a_overlap) <
           std::tie(o.schedule, o.pp, o.microbatches, o.chunks, o.a2a_overlap);
  }
  bool operator==(const TableKey&) const = default;
};

struct BuiltTable {
  std::optional<ScheduleTable> table;
  std::string error;                   // the schedule's rule that rejects the layout
  Runtime runtime = Runtime::Auto;     // the runtime that runs it (resolve_runtime)
  std::optional<std::string> refused;  // why --runnable-by's runtime cannot run it
  // Under PyTorch's runtime, its order: derived once, when a first layout of the table is
  // lowered whole (it walks every op twice, and most tables' layouts are rejected or bounded
  // out before).
  const PyTorchOrder* pytorch() const {
    if (runtime != Runtime::PyTorch || !table) return nullptr;
    std::call_once(pytorch_once_, [this] { pytorch_ = pytorch_runtime_order(*table); });
    return &*pytorch_;
  }

 private:
  mutable std::once_flag pytorch_once_;
  mutable std::optional<PyTorchOrder> pytorch_;
};

// The table a layout's memory is checked on before anything is lowered: its own, or for the
// authors' schedulers (planned per layout from its costs) the registered table of the same
// shape: the same passes on the same devices in another order (1F1B with B split into I and W
// for S stages; ZB-V's 2S stages in a V), so the same static memory and busy times.
TableKey shape_key(const PlanLayout& l) {
  if (l.schedule == kAuthors) return {"1f1b-split", l.pipeline_parallel, l.microbatches, 0};
  if (l.schedule == kAuthorsV) return {"zb-v", l.pipeline_parallel, l.microbatches, 0};
  // Only an order that changes with the overlap gets a table of its own (job_schedule_params).
  return {l.schedule, l.pipeline_parallel, l.microbatches, l.chunks,
          schedule_params(l).combined_1f1b};
}

std::shared_ptr<const BuiltTable> build_table(const PlanRequest& request, const TableKey& key) {
  auto built = std::make_shared<BuiltTable>();
  PlanLayout l;
  l.schedule = key.schedule;
  l.pipeline_parallel = key.pp;
  l.microbatches = key.microbatches;
  l.chunks = key.chunks;
  l.a2a_overlap = key.a2a_overlap;
  try {
    built->table = generate(find_schedule(key.schedule), schedule_params(l));
  } catch (const ParamError& e) {
    built->error = e.what();
    return built;
  }
  built->runtime = resolve_runtime(request.lowering.runtime, *built->table, key.schedule).runtime;
  if (request.runnable_by)
    built->refused = runtime_refuses(*built->table, key.schedule, *request.runnable_by);
  return built;
}

class TableCache {
 public:
  // Builds the tables of `keys` (sorted, unique) on `threads` threads.
  TableCache(const PlanRequest& request, std::vector<TableKey> keys) : keys_(std::move(keys)) {
    built_.resize(keys_.size());
    detail::parallel_for(keys_.size(), request.threads,
                         [&](std::size_t i) { built_[i] = build_table(request, keys_[i]); });
  }
  // The table of `key`, built now when it was not built ahead.
  std::shared_ptr<const BuiltTable> get(const PlanRequest& request, const TableKey& key) const {
    const auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
    if (it != keys_.end() && *it == key)
      return built_[static_cast<std::size_t>(it - keys_.begin())];
    return build_table(request, key);
  }

  // An authors' scheduler's table for a layout (layout_table). Layouts that differ only in what
  // the pass times do not see (DP, FSDP with PP, the distributed optimizer) pose the same
  // problem: each problem is planned once and kept while the plans kept hold fewer than
  // kKeptOps ops (the oldest dropped first). Which layouts hit changes nothing but the time.
  std::shared_ptr<const ScheduleTable> authors(const PlanRequest& request,
                                               const PlanLayout& l) const {
    ProblemKey key{l.schedule, authors_problem(request, l)};
    {
      const std::lock_guard lock(mutex_);
      if (const auto it = planned_.find(key); it != planned_.end()) return it->second;
    }
    auto table = std::make_shared<const ScheduleTable>(authors_table(key.problem, l.schedule));
    const std::lock_guard lock(mutex_);
    const auto [it, added] = planned_.emplace(std::move(key), table);
    if (!added) return it->second;  // another thread planned it meanwhile: the same table
    kept_.push_back(it);
    kept_ops_ += table->ops.size();
    while (kept_ops_ > kKeptOps && kept_.size() > 1) {
      kept_ops_ -= kept_.front()->second->ops.size();
      planned_.erase(kept_.front());
      kept_.pop_front();
    }
    return table;
  }

 private:
  // About 16 bytes an op: at most 128 MB of plans kept.
  static constexpr std::size_t kKeptOps = std::size_t{1} << 23;
  struct ProblemKey {
    std::string schedule;
    ZeroBubbleProblem problem;
    bool operator<(const ProblemKey& o) const {
      const ZeroBubbleProblem &a = problem, &b = o.problem;
      return std::tie(schedule, a.devices, a.microbatches, a.forward, a.input_grad, a.weight_grad,
                      a.comm, a.memory_limit, a.input_grad_frees) <
             std::tie(o.schedule, b.devices, b.microbatches, b.forward, b.input_grad, b.weight_grad,
                      b.comm, b.memory_limit, b.input_grad_frees);
    }
  };
  using Planned = std::map<ProblemKey, std::shared_ptr<const ScheduleTable>>;
  std::vector<TableKey> keys_;
  std::vector<std::shared_ptr<const BuiltTable>> built_;
  mutable std::mutex mutex_;
  mutable Planned planned_;
  mutable std::deque<Planned::iterator> kept_;  // in the order they were planned
  mutable std::size_t kept_ops_ = 0;
};

std::int64_t pipeline_units(const PlanRequest& request) {
  return request.model.transformer()->layers + (request.layout.balance_embedding ? 2 : 0);
}

// Whether the model's units split over `stages`: into equal stages, or else (without a layout of
// the request's own) by Megatron-Core's balanced pipeline layout, which `layout` is set to.
bool stages_split(const PlanRequest& request, std::int64_t stages, std::string& layout) {
  layout.clear();
  if (pipeline_units(request) % stages == 0) return true;
  if (!request.layout.pipeline_layout.empty()) return false;
  const auto& m = *request.model.transformer();
  if (auto balanced = balanced_pipeline_layout(m.layers, m.mtp_layers, stages)) {
    layout = std::move(*balanced);
    return true;
  }
  return false;
}

void reject_unsplit(const PlanRequest& request, Checked& c, std::int64_t stages,
                    std::string_view what) {
  const auto& m = *request.model.transformer();
  const std::int64_t units = m.layers + m.mtp_layers + 2;
  c.reason = "pipeline: the layers split neither into equal stages nor by a balanced layout";
  c.detail = fmt::format(
      "{} layers{} over {} {}; Megatron-Core's layout counting the embedding{} the loss as a "
      "layer each has {} units, {}",
      m.layers, request.layout.balance_embedding ? " and the embedding and output" : "", stages,
      what, m.mtp_layers > 0 ? fmt::format(", {} MTP module(s) and", m.mtp_layers) : " and", units,
      units % stages != 0
          ? fmt::format("which do not divide over {}", stages)
          : fmt::format("{} a stage: too few for the last stage's MTP module(s) and loss",
                        units / stages));
}

bool stages_split(const PlanRequest& request, Checked& c, const ScheduleTable& table) {
  if (stages_split(request, table.stages, c.layout.pipeline_layout)) return true;
  reject_unsplit(request, c, table.stages, "stages");
  return false;
}

bool runnable(const PlanRequest& request, Checked& c, const std::optional<std::string>& why) {
  if (!why) return true;
  c.reason =
      fmt::format("runtime: {} cannot run it (--runnable-by)", to_string(*request.runnable_by));
  c.detail = *why;
  return false;
}

void reject_by_schedule(Checked& c, const std::string& error) {
  c.reason = "schedule: its rules reject the layout";
  c.detail = error;
}

bool over_memory_alone(Checked& c, double capacity, double weights) {
  if (weights <= capacity) return false;
  c.reason = "memory: weights, gradients and optimizer state alone exceed the device";
  c.detail = fmt::format("{:.4g} GB of {:.4g} GB usable", weights / 1e9, capacity / 1e9);
  return true;
}

void reject_over_memory(Checked& c, double capacity, double weights) {
  if (c.peak_memory_bytes <= capacity) return;
  c.reason = "memory: over the device with the schedule's activations";
  c.detail = fmt::format("{:.4g} GB of {:.4g} GB usable ({:.4g} GB static)",
                         c.peak_memory_bytes / 1e9, capacity / 1e9, weights / 1e9);
}

// The rules checked before any table is built; false: `c` is rejected.
bool follows_rules(const PlanRequest& request, Checked& c) {
  const PlanLayout& l = c.layout;
  const auto& m = *request.model.transformer();
  // The model reader's rule (tensor_parallel_misfit): a layout it would refuse is never ranked.
  if (const auto misfit = tensor_parallel_misfit(m, l.tensor_parallel)) {
    c.reason = "tensor parallel: does not divide the heads, key-value heads and MLP evenly";
    c.detail = fmt::format("{} = {} over TP {}", misfit->what, misfit->value, l.tensor_parallel);
    return false;
  }
  if (l.context_parallel > 1) {
    const SimulationSetup setup = layout_setup(request, l);
    Layout layout = setup.layout;
    layout.dp = 1;  // the CP rules alone: the experts' are checked below
    layout.ep = 1;
    try {
      require_trainable(m, setup.job, layout);
    } catch (const ParamError& e) {
      c.reason = "context parallel: the sequence or the heads do not split over the CP ranks";
      c.detail = e.what();
      return false;
    }
  }
  if (l.expert_parallel > 1 || m.moe) {
    const SimulationSetup setup = layout_setup(request, l);
    try {
      require_trainable(m, setup.job, setup.layout);
    } catch (const ParamError& e) {
      c.reason = "expert parallel: the experts do not split over the EP ranks, or TP without SP";
      c.detail = e.what();
      return false;
    }
  }
  if (request.lowering.runtime == Runtime::Megatron && l.schedule != "1f1b" &&
      l.schedule != "interleaved") {
    c.reason = "runtime: Megatron-LM runs only 1F1B and interleaved 1F1B";
    c.detail = fmt::format("{} under --runtime megatron", l.schedule);
    return false;
  }
  // Every schedule's stage count is a multiple of PP, so PP must divide the layers before any
  // table is built (PP 1,024 of an 80-layer model would build the largest tables for nothing).
  // With balance_embedding the embedding and the output count as a layer each (Megatron's
  // account_for_embedding/loss_in_pipeline_split; Llama 3's one layer fewer on the first and last
  // stage), so layers + 2 must split.
  // Where they do not split, Megatron-Core's balanced layout may (stages_split).
  std::string layout;
  if (l.pipeline_parallel > 1 && !stages_split(request, l.pipeline_parallel, layout)) {
    reject_unsplit(request, c, l.pipeline_parallel, "pipeline ranks");
    return false;
  }
  return true;
}

// Phase 1 for a layout that follows the rules, without lowering it whole: the table's rules and
// stage count, the weights, gradients and optimizer state against the memory (most layouts of a
// large model on many GPUs fail there), then the compute nodes (compute_bounds) for the memory
// peak with the schedule's activations and the busiest device's time, a first lower bound.
// The authors' schedulers' own order is planned in phase 2: their memory is checked there.
void check(const PlanRequest& request, const TableCache& tables, Checked& c) {
  const PlanLayout& l = c.layout;
  const auto shape = tables.get(request, shape_key(l));
  if (!authors(l)) {
    if (!shape->table) return reject_by_schedule(c, shape->error);
    if (!runnable(request, c, shape->refused) || !stages_split(request, c, *shape->table)) return;
  } else if (!shape->table ||
             !stages_split(request, shape->table->stages, c.layout.pipeline_layout)) {
    return;  // the authors' own table decides, in phase 2
  }
  // After the stages' split: the setup runs the layout it chose.
  const SimulationSetup setup = layout_setup(request, l);
  const double capacity = usable_memory_bytes(setup);
  try {
    const auto held = static_memory(*shape->table,
                                    table_work(*shape->table, setup.model, setup.job, setup.layout),
                                    setup.model, setup.job, setup.layout);
    const double weights = *std::max_element(held.begin(), held.end());
    if (over_memory_alone(c, capacity, weights)) return;
    const Network network(setup.system, shape->table->devices, gpus_per_device(setup.layout));
    LoweringOptions lowering = setup.lowering;
    lowering.runtime = shape->runtime;
    // The bound holds for any order of the table's passes: the authors' layouts run their own
    // order of the shape table's.
    const DeviceBounds bounds =
        compute_bounds(*shape->table, setup.model, setup.job, setup.layout, network, lowering);
    c.compute_bound_s = bounds.runtime_lower_bound_s();
    if (authors(l)) return;
    c.peak_memory_bytes =
        *std::max_element(bounds.peak_memory_bytes.begin(), bounds.peak_memory_bytes.end());
    reject_over_memory(c, capacity, weights);
  } catch (const ParamError& e) {
    c.reason = "system: the cluster or the simulator cannot take the layout";
    c.detail = e.what();
  }
}

// Phase 2 for a layout that passed phase 1: its table (the authors' planned now), the whole
// lowered graph and its bound; the authors' memory checked.
void lower_and_bound(const PlanRequest& request, const TableCache& tables, Checked& c) {
  const PlanLayout& l = c.layout;
  c.lowered = true;
  std::shared_ptr<const ScheduleTable> own;
  if (authors(l)) {
    try {
      own = tables.authors(request, l);
    } catch (const ParamError& e) {
      return reject_by_schedule(c, e.what());
    }
    if (!runnable(request, c,
                  request.runnable_by ? runtime_refuses(*own, l.schedule, *request.runnable_by)
                                      : std::nullopt) ||
        !stages_split(request, c, *own))
      return;
  }
  // After the stages' split: the setup runs the layout it chose.
  const SimulationSetup setup = layout_setup(request, l);
  const double capacity = usable_memory_bytes(setup);
  LoweringOptions lowering = setup.lowering;
  lowering.inner_transfers = false;  // the bound needs the ops' shortest times, not the flows
  // The runtime that really runs the layout: for the authors' tables resolved with the schedule's
  // name as simulate_table does (lower() alone sees no name and took every table for PyTorch's).
  lowering.runtime = own ? resolve_runtime(lowering.runtime, *own, l.schedule).runtime
                         : tables.get(request, shape_key(l))->runtime;
  const auto shared = own ? nullptr : tables.get(request, shape_key(l));
  const ScheduleTable& table = own ? *own : *shared->table;
  try {
    const Network network(setup.system, table.devices, gpus_per_device(setup.layout));
    const PyTorchOrder* order = shared ? shared->pytorch() : nullptr;
    const ExecGraph graph =
        order ? lower(table, setup.model, setup.job, setup.layout, network, lowering, *order)
              : lower(table, setup.model, setup.job, setup.layout, network, lowering);
    const GraphBounds bounds = graph_bounds(graph, network);
    c.lower_bound_s = std::max(bounds.runtime_lower_bound_s, c.compute_bound_s);
    c.peak_memory_bytes =
        *std::max_element(bounds.peak_memory_bytes.begin(), bounds.peak_memory_bytes.end());
    const double weights = *std::max_element(graph.static_bytes.begin(), graph.static_bytes.end());
    if (over_memory_alone(c, capacity, weights)) return;
    reject_over_memory(c, capacity, weights);
  } catch (const ParamError& e) {
    c.reason = "system: the cluster or the simulator cannot take the layout";
    c.detail = e.what();
  }
}

// Phase 1 for one layout without a cache (the reference layout).
void check(const PlanRequest& request, Checked& c) {
  if (!follows_rules(request, c)) return;
  const TableCache tables(request, {});
  check(request, tables, c);
  if (c.reason.empty()) lower_and_bound(request, tables, c);
}

// Every layout of the request, in enumeration order (TP, PP, micro batch, schedule, chunks,
// recompute, sequence parallelism, distributed optimizer), and the layouts that are rejected
// before they are built (the batch does not divide over the replicas).
// Why a combination of the space's values is not a layout at all (it is not counted among the
// layouts): said, with a count and the first example, only when no layout is left.
enum class NotALayout : std::uint8_t {
  TpCpGpus,
  PpGpus,
  MicroBatch,
  DistributedOneReplica,
  FsdpAndDistributed,
  FsdpOneRank,
  ExpertSplit,
  A2aOverlap,
  kCount
};
constexpr std::array<std::string_view, static_cast<std::size_t>(NotALayout::kCount)> kNotALayout{
    "TP · CP must divide the GPU count",
    "PP must divide the GPUs left by TP · CP",
    "the micro batch must divide each replica's batch (global batch / DP)",
    "the distributed optimizer needs more than one data-parallel replica",
    "FSDP already shards what the distributed optimizer shards (--fsdp on with "
    "--distributed-optimizer on: give one of them)",
    "FSDP needs more than one rank in DP × CP to shard over",
    "EP × ETP must divide TP × CP × DP, and ETP above 1 needs EP above 1",
    "--a2a-overlap needs experts over EP above 1, model chunks (v of 2 or more) where PP is "
    "above 1, and none of the recomputation Megatron-Core's combined 1F1B refuses"};

struct Enumeration {
  std::vector<Checked> layouts;
  std::map<std::string, std::pair<std::int64_t, std::string>> early;  // reason -> count, example
  std::array<std::pair<std::int64_t, std::string>, kNotALayout.size()> not_a_layout;
  // Counts a combination that is not a layout because of a value the request gave (`given`: a
  // default's own combinations, such as the distributed optimizer tried with DP 1, are no one's
  // mistake); `example` (called once) says which.
  template <class Example>
  void skip(NotALayout why, bool given, Example&& example) {
    if (!given) return;
    auto& [count, text] = not_a_layout[static_cast<std::size_t>(why)];
    if (count++ == 0) text = example();
  }
};

// Each list of the space with its repeats dropped, in the order given: "--tp 2,2" once ranked the
// same layouts twice and counted them twice.
template <class T>
void drop_repeats(std::vector<T>& values) {
  std::vector<T> unique;
  for (const auto& v : values)
    if (std::find(unique.begin(), unique.end(), v) == unique.end()) unique.push_back(v);
  values = std::move(unique);
}
PlanSpace without_repeats(PlanSpace s) {
  drop_repeats(s.tensor_parallel);
  drop_repeats(s.pipeline_parallel);
  drop_repeats(s.micro_batch);
  drop_repeats(s.chunks);
  drop_repeats(s.recompute);
  drop_repeats(s.sequence_parallel);
  drop_repeats(s.distributed_optimizer);
  drop_repeats(s.context_parallel);
  drop_repeats(s.fsdp);
  drop_repeats(s.expert_parallel);
  drop_repeats(s.a2a_overlap);
  drop_repeats(s.expert_tensor_parallel);
  drop_repeats(s.moe_recompute);
  return s;  // a --search value given twice is refused instead (require_search)
}

Enumeration enumerate(const PlanRequest& r) {
  const PlanSpace s = without_repeats(r.space);
  // The units the pipeline splits: the layers, and the embedding and output when balanced.
  const std::int64_t layers = pipeline_units(r);
  // TP stays inside the GPUs of a node the job occupies: a DGX's 8, or its even share of NVL72
  // racks (64 of 72 for 256 GPUs; system.hpp gpus_per_node).
  const std::int64_t node = std::max<std::int64_t>(1, gpus_per_node(r.system, r.gpus));
  auto tps = s.tensor_parallel.empty() ? divisors(node) : s.tensor_parallel;
  // Registered schedules, then the authors' schedulers (no registry entry: null).
  std::vector<std::pair<std::string_view, const ScheduleInfo*>> schedules;
  if (s.schedules.empty()) {
    for (const auto* info : all_schedules())
      if (info->planned_by_default) schedules.emplace_back(info->name, info);
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
  // Which values the request chose rather than left to plan's defaults: a rule they break is
  // said when no layout is left.
  const auto only_on = [](const std::vector<bool>& v) { return v.size() == 1 && v.front(); };
  const struct {
    bool tp_cp, pp, micro_batch, distributed, fsdp, experts, a2a;
  } given{!s.tensor_parallel.empty() || !s.context_parallel.empty(),
          !s.pipeline_parallel.empty(),
          !s.micro_batch.empty(),
          only_on(s.distributed_optimizer),
          only_on(s.fsdp),
          !s.expert_parallel.empty() || !s.expert_tensor_parallel.empty(),
          only_on(s.a2a_overlap)};
  const std::vector<std::int64_t> cps =
      s.context_parallel.empty()
          ? default_context_parallel(*r.model.transformer(), r.job.seq_len, r.gpus)
          : s.context_parallel;
  // Expert parallelism: the powers of two dividing the experts (1 alone for a dense model).
  std::vector<std::int64_t> eps = s.expert_parallel;
  if (eps.empty()) {
    eps.push_back(1);
    if (const auto& moe = r.model.transformer()->moe) {
      for (std::int64_t ep = 2; ep <= moe->experts; ep *= 2) {
        if (moe->experts % ep == 0) eps.push_back(ep);
      }
    }
  }
  const std::vector<std::int64_t> etps =
      s.expert_tensor_parallel.empty() ? std::vector<std::int64_t>{1} : s.expert_tensor_parallel;
  // MoE recomputation: the job's own unless searched; a dense model has none.
  std::vector<MoeRecompute> moe_recomputes = s.moe_recompute;
  if (moe_recomputes.empty() || !r.model.transformer()->moe) moe_recomputes = {r.job.moe.recompute};
  // A mixture of experts with TP needs sequence parallelism (require_trainable, as Megatron-Core):
  // where SP is searched, TP without it is not enumerated rather than rejected, as SP with TP 1.
  const bool moe_needs_sp = r.model.transformer()->moe &&
                            std::find(s.sequence_parallel.begin(), s.sequence_parallel.end(),
                                      true) != s.sequence_parallel.end();
  // The searched options' combinations (--search), the first option outermost; one empty one
  // without a search.
  std::vector<std::vector<Setting>> combinations{{}};
  for (const auto& option : s.options) {
    std::vector<std::vector<Setting>> longer;
    for (const auto& settings : combinations)
      for (const auto& value : option.values) {
        longer.push_back(settings);
        longer.back().push_back({option.key, value, {}});
      }
    combinations = std::move(longer);
  }
  for (const auto tp : tps)
    for (const auto cp : cps) {
      if (tp < 1 || cp < 1 || r.gpus % (tp * cp) != 0) {
        e.skip(NotALayout::TpCpGpus, given.tp_cp,
               [&] { return fmt::format("TP {} · CP {} on {} GPUs", tp, cp, r.gpus); });
        continue;
      }
      const std::int64_t stage_gpus = tp * cp;
      const auto pps =
          s.pipeline_parallel.empty() ? divisors(r.gpus / stage_gpus) : s.pipeline_parallel;
      for (const auto pp : pps) {
        if (pp < 1 || (r.gpus / stage_gpus) % pp != 0) {
          e.skip(NotALayout::PpGpus, given.pp, [&] {
            return fmt::format("TP {} · CP {} leaves {} GPUs; PP {}", tp, cp, r.gpus / stage_gpus,
                               pp);
          });
          continue;
        }
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
          if (mb < 1 || per_replica % mb != 0) {
            e.skip(NotALayout::MicroBatch, given.micro_batch, [&] {
              return fmt::format("DP {}: {} sequences per replica, micro batch {}", dp, per_replica,
                                 mb);
            });
            continue;
          }
          for (const auto& [name, info] : schedules) {
            if (pp == 1 && name != single) continue;
            const std::int32_t default_chunks = info != nullptr ? info->default_chunks : 0;
            std::vector<std::int64_t> chunks{0};
            if (pp == 1 && default_chunks > 0) chunks = {1};
            if (pp > 1 && default_chunks > 0) {
              // Default: every v from 2 to 8 that splits the device's layers evenly (Megatron-LM
              // requires it) or, where PP does not, into Megatron-Core's balanced layout over v·PP
              // stages; the schedule's default when none does.
              chunks = s.chunks;
              if (chunks.empty()) {
                std::string unused;
                for (std::int64_t v = 2; v <= 8; ++v) {
                  const bool even = layers % pp == 0 && (layers / pp) % v == 0;
                  if (even || (layers % pp != 0 && stages_split(r, v * pp, unused)))
                    chunks.push_back(v);
                }
                if (chunks.empty()) chunks.push_back(default_chunks);
              }
              std::sort(chunks.begin(), chunks.end());
              chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
            }
            for (const auto v : chunks) {
              // A table's size bounds the plan's memory: M microbatches over v·PP stages.
              const std::int64_t passes = per_replica / mb * pp * std::max<std::int64_t>(v, 1);
              if (passes > kMaxPlanTablePasses) {
                auto& [count, example] = e.early[fmt::format(
                    "size: over {} forward passes per table (M × v·PP), which a plan builds at "
                    "most: a larger --micro-batch or a smaller global batch",
                    kMaxPlanTablePasses)];
                if (count++ == 0)
                  example =
                      fmt::format("TP {} · CP {} · PP {} · DP {}, {}, micro batch {} × {}{}: {}",
                                  tp, cp, pp, dp, name, mb, per_replica / mb,
                                  v > 1 ? fmt::format(", v {}", v) : "", passes);
                continue;
              }
              for (const auto rc : s.recompute)
                for (const bool sp : s.sequence_parallel) {
                  if (sp && tp == 1) continue;
                  if (!sp && tp > 1 && moe_needs_sp) continue;
                  for (const bool dist : s.distributed_optimizer) {
                    if (dist && dp == 1) {
                      e.skip(NotALayout::DistributedOneReplica, given.distributed, [&] {
                        return fmt::format("TP {} · CP {} · PP {} on {} GPUs leaves DP 1", tp, cp,
                                           pp, r.gpus);
                      });
                      continue;
                    }
                    for (const bool fsdp : s.fsdp) {
                      // FSDP shards what the distributed optimizer shards, and more; over one
                      // rank there is nothing to shard.
                      if (fsdp && dist) {
                        e.skip(
                            NotALayout::FsdpAndDistributed, given.fsdp && given.distributed, [&] {
                              return fmt::format("TP {} · CP {} · PP {} · DP {}", tp, cp, pp, dp);
                            });
                        continue;
                      }
                      if (fsdp && dp * cp == 1) {
                        e.skip(NotALayout::FsdpOneRank, given.fsdp, [&] {
                          return fmt::format("TP {} · PP {} on {} GPUs leaves DP 1 and CP 1", tp,
                                             pp, r.gpus);
                        });
                        continue;
                      }
                      for (const auto ep : eps)
                        for (const auto etp : etps) {
                          if (etp < 1 || (etp > 1 && ep == 1) || (tp * cp * dp) % (ep * etp) != 0) {
                            e.skip(NotALayout::ExpertSplit, given.experts, [&] {
                              return fmt::format("TP {} · CP {} · DP {} = {}; EP {} × ETP {}", tp,
                                                 cp, dp, tp * cp * dp, ep, etp);
                            });
                            continue;
                          }
                          for (const bool a2a : s.a2a_overlap) {
                            // Megatron-Core's combined 1F1B pairs the interleaved schedule's
                            // steps, or 1F1B's without pipelining: model chunks where PP > 1.
                            if (a2a && v < 2 && pp > 1) {
                              e.skip(NotALayout::A2aOverlap, given.a2a, [&, schedule = name] {
                                return fmt::format("EP {}, PP {}, {}{}", ep, pp, schedule,
                                                   v > 1 ? fmt::format(" v {}", v) : "");
                              });
                              continue;
                            }
                            for (const auto mrc : moe_recomputes) {
                              // And its own rules: experts over EP, what the layer recomputes.
                              if (a2a) {
                                Job job = r.job;
                                job.a2a_overlap = true;
                                job.recompute = rc;
                                job.moe.recompute = mrc;
                                if (const auto why = a2a_overlap_conflict(r.model, job, ep);
                                    !why.empty()) {
                                  e.skip(NotALayout::A2aOverlap, given.a2a, [&] { return why; });
                                  continue;
                                }
                              }
                              for (const auto& settings : combinations) {
                                Checked c;
                                c.layout = {tp,
                                            pp,
                                            dp,
                                            cp,
                                            fsdp,
                                            mb,
                                            per_replica / mb,
                                            std::string(name),
                                            v,
                                            rc,
                                            sp,
                                            dist,
                                            ep,
                                            a2a,
                                            etp,
                                            mrc,
                                            {},
                                            settings};
                                c.index = static_cast<std::int64_t>(e.layouts.size());
                                e.layouts.push_back(std::move(c));
                              }
                            }
                          }
                        }
                    }
                  }
                }
            }
          }
        }
      }
    }
  return e;
}

// The searched options (--search) before anything is enumerated: each one plan can search, given
// once, with values each different and each one its option takes (applied to the request's setup
// through the one definition, so the message is the option's own).
void require_search(const PlanRequest& request) {
  const auto& options = request.space.options;
  for (auto o = options.begin(); o != options.end(); ++o) {
    if (const auto why = unsearchable_option(o->key))
      throw ParamError(fmt::format("plan: --search {}: {}", o->key, *why));
    if (std::any_of(options.begin(), o, [&](const auto& p) { return p.key == o->key; }))
      throw ParamError(fmt::format(
          "plan: --search {}: searched twice; give its values once, {}=A,B", o->key, o->key));
    if (o->values.empty())
      throw ParamError(fmt::format("plan: --search {}: no values to try", o->key));
    SimulationSetup probe{request.model,  request.job,      request.layout,
                          request.system, request.lowering, request.sim};
    for (auto v = o->values.begin(); v != o->values.end(); ++v) {
      if (std::find(o->values.begin(), v, *v) != v)
        throw ParamError(
            fmt::format("plan: --search {}: the value '{}' is listed twice", o->key, *v));
      try {
        apply_setting(probe, Setting{o->key, *v, "plan: --search"});
      } catch (const ParamError&) {
        throw;
      } catch (const Error& e) {
        throw ParamError(e.what());  // plan's request errors are all ParamError
      }
    }
  }
}

bool faster(const PlanEntry& a, const PlanEntry& b) {
  if (a.metrics.runtime_s != b.metrics.runtime_s) return a.metrics.runtime_s < b.metrics.runtime_s;
  return a.index < b.index;
}

}  // namespace

std::optional<std::string> unsearchable_option(std::string_view key) {
  const auto own = [](std::string_view flag) {
    return fmt::format("plan searches it itself: give its values with {}", flag);
  };
  // The table's dimensions, which no run flag sets (plan's own flags).
  if (key == "pipeline_parallel") return own("--pp");
  if (key == "chunks") return own("--chunks");
  if (key == "schedule") return own("--schedules");
  // The options plan searches with a flag of the option's own name (kPlanSearched), but for
  // cp_method (one value there, which --search may vary) and the two it derives.
  if (key != "cp_method" && key != "data_parallel" && key != "global_batch" &&
      std::find(kPlanSearched.begin(), kPlanSearched.end(), key) != kPlanSearched.end())
    return own(find_run_option(key)->flag);
  if (key == "data_parallel")
    return std::string(
        "plan derives it: the data-parallel replicas are the GPUs TP × CP × PP leave");
  if (key == "global_batch")
    return std::string(
        "the global batch is the job's (--global-batch): plan ranks the layouts of one job");
  if (key == "runtime")
    return std::string(
        "the runtime decides each schedule table's order and what --runnable-by keeps, once per "
        "table: run plan once per --runtime");
  if (key == "pipeline_layout" || key == "balance_embedding")
    return std::string(
        "it decides how the layers split into stages, which plan derives for each PP and chunk "
        "count (Megatron-Core's balanced layout): give one with --pipeline-layout or "
        "--balance-embedding");
  if (key == "memory_reserve")
    return std::string(
        "it is the rule every layout's fit is judged by, not a choice of the layout: give one "
        "with --memory-reserve");
  return std::nullopt;
}

std::string describe(const PlanLayout& l) {
  std::string out = fmt::format(
      "TP {}{} · PP {} · {} {}{}, {}", l.tensor_parallel,
      l.context_parallel > 1 ? fmt::format(" · CP {}", l.context_parallel) : std::string(),
      l.pipeline_parallel, l.fsdp ? "FSDP" : "DP", l.data_parallel,
      // FSDP shards over DP × CP: "FSDP 1" alone hid the CP ranks' sharding.
      l.fsdp && l.context_parallel > 1
          ? fmt::format(" (sharded over DP × CP = {})", l.data_parallel * l.context_parallel)
          : std::string(),
      l.schedule);
  if (l.chunks > 0) out += fmt::format(" v {}", l.chunks);
  out += fmt::format(", micro batch {} × {}, {}", l.micro_batch, l.microbatches,
                     l.recompute == Recompute::None   ? "no recompute"
                     : l.recompute == Recompute::Full ? "full recompute"
                                                      : "selective");
  if (l.sequence_parallel) out += ", SP";
  if (l.expert_parallel > 1) out += fmt::format(", EP {}", l.expert_parallel);
  if (l.expert_tensor_parallel > 1) out += fmt::format(", ETP {}", l.expert_tensor_parallel);
  if (l.moe_recompute != MoeRecompute::None)
    out += fmt::format(", MoE recompute {}", to_string(l.moe_recompute));
  if (l.a2a_overlap) out += ", A2A overlap";
  if (l.distributed_optimizer) out += ", distributed optimizer";
  if (!l.pipeline_layout.empty()) out += fmt::format(", layout {}", l.pipeline_layout);
  for (const auto& o : l.options)
    out += fmt::format(", {} {}", o.key, o.value);
  return out;
}

SimulationSetup layout_setup(const PlanRequest& request, const PlanLayout& l) {
  SimulationSetup setup{request.model,  request.job,      request.layout,
                        request.system, request.lowering, request.sim};
  auto& j = setup.job;
  j.micro_batch = l.micro_batch;
  j.recompute = l.recompute;
  j.distributed_optimizer = l.distributed_optimizer;
  j.a2a_overlap = l.a2a_overlap;
  j.moe.recompute = l.moe_recompute;
  auto& y = setup.layout;
  y.tp = l.tensor_parallel;
  y.sequence_parallel = l.sequence_parallel;
  y.cp = l.context_parallel;
  y.cp_method = request.space.cp_method;
  y.ep = l.expert_parallel;
  y.etp = l.expert_tensor_parallel;
  y.dp = l.data_parallel;
  y.fsdp.enabled = l.fsdp;
  y.pp = l.pipeline_parallel;
  y.schedule = l.schedule;
  y.chunks = l.chunks;
  if (!l.pipeline_layout.empty()) y.pipeline_layout = l.pipeline_layout;
  // The searched options last, through the one definition as every other source of options
  // (their values were checked when the plan began: require_search).
  apply_settings(setup, l.options);
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
  // Each value on its own, with its flag: past them the enumeration could only say that no
  // layout divides (and 2·CP of a CP near 2^63 overflowed).
  const auto sizes = [](const std::vector<std::int64_t>& values, const char* option,
                        const char* what, std::int64_t most, const char* bound) {
    for (const auto v : values) {
      if (v < 1) {
        throw ParamError(fmt::format("plan: {} {}: {} must be at least 1", option, v, what));
      }
      if (v > most) {
        throw ParamError(
            fmt::format("plan: {} {}: {} must be at most {} ({})", option, v, what, most, bound));
      }
    }
  };
  sizes(request.space.tensor_parallel, "--tp", "a tensor-parallel size", request.gpus, "the GPUs");
  sizes(request.space.pipeline_parallel, "--pp", "a pipeline-parallel size", request.gpus,
        "the GPUs");
  sizes(request.space.micro_batch, "--micro-batch", "a micro-batch size", request.global_batch,
        "the global batch");
  sizes(request.space.chunks, "--chunks", "a chunk count", kMaxStages, "the most stages");
  sizes(request.space.context_parallel, "--cp", "a context-parallel size", request.gpus,
        "the GPUs");
  sizes(request.space.expert_parallel, "--ep", "an expert-parallel size", request.gpus, "the GPUs");
  sizes(request.space.expert_tensor_parallel, "--etp", "an expert-tensor-parallel size",
        request.gpus, "the GPUs");
  const auto& a2a = request.space.a2a_overlap;
  if (!a2a.empty() && std::find(a2a.begin(), a2a.end(), false) == a2a.end() &&
      !request.space.schedules.empty() &&
      std::none_of(request.space.schedules.begin(), request.space.schedules.end(),
                   [](const std::string& name) {
                     const auto* info =
                         name == kAuthors || name == kAuthorsV ? nullptr : &find_schedule(name);
                     return info != nullptr && info->takes_combined_1f1b;
                   })) {
    throw ParamError(
        "plan: --a2a-overlap on: Megatron-Core's combined 1F1B overlaps the steps of the "
        "interleaved schedule, or of 1F1B without pipelining; none of --schedules is one: add "
        "one, or use --a2a-overlap both");
  }
  if (request.job.seq_len < 1) {
    throw ParamError(
        fmt::format("plan: no sequence length: give --seq-len (the model '{}' has no default)",
                    request.model.name));
  }
  if (request.shards < 1 || request.shard < 1 || request.shard > request.shards) {
    throw ParamError(fmt::format("plan: shard {}/{}: expected K/N with 1 <= K <= N", request.shard,
                                 request.shards));
  }
  require_search(request);
  Enumeration e = enumerate(request);
  if (e.layouts.empty()) {
    // Every combination of the values given broke a rule: each rule broken, most often first.
    std::vector<std::tuple<std::int64_t, std::string, std::string>> broken;
    for (std::size_t k = 0; k < kNotALayout.size(); ++k) {
      const auto& [count, example] = e.not_a_layout[k];
      if (count > 0) broken.emplace_back(count, std::string(kNotALayout[k]), example);
    }
    for (const auto& [reason, v] : e.early)
      broken.emplace_back(v.first, reason, v.second);
    std::stable_sort(broken.begin(), broken.end(),
                     [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
    std::string why;
    for (const auto& [count, reason, example] : broken)
      why += fmt::format("{} {} × {} (e.g. {})", why.empty() ? "" : ";", count, reason, example);
    throw ParamError(
        fmt::format("plan: no layout of {} GPUs for a global batch of {} ({} GPUs per node): every "
                    "combination of the values searched breaks a rule:{}",
                    request.gpus, request.global_batch, request.system.devices_per_node,
                    why.empty() ? std::string(" none was given") : why));
  }
  // This shard's slice, contiguous in enumeration order.
  const auto total = static_cast<std::int64_t>(e.layouts.size());
  const std::int64_t begin = total * (request.shard - 1) / request.shards;
  const std::int64_t end = total * request.shard / request.shards;
  // ptrdiff_t is 32 bits in WebAssembly; a slice of an in-memory vector fits in it.
  std::vector<Checked> layouts(
      std::make_move_iterator(e.layouts.begin() + static_cast<std::ptrdiff_t>(begin)),
      std::make_move_iterator(e.layouts.begin() + static_cast<std::ptrdiff_t>(end)));
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

  // Phase 1: the rules; the tables the layouts that follow them need, each built once; then every
  // such layout checked against the memory and bounded by its busiest device (compute_bounds),
  // in blocks so that progress is reported from this thread.
  std::vector<TableKey> keys;
  for (auto& c : layouts) {
    if (follows_rules(request, c)) keys.push_back(shape_key(c.layout));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const TableCache tables(request, std::move(keys));
  std::vector<Checked*> candidates;
  for (auto& c : layouts) {
    if (c.reason.empty()) candidates.push_back(&c);
  }
  constexpr std::size_t kBlock = 256;
  for (std::size_t b = 0; b < candidates.size(); b += kBlock) {
    const std::size_t n = std::min(kBlock, candidates.size() - b);
    detail::parallel_for(n, request.threads,
                         [&](std::size_t i) { check(request, tables, *candidates[b + i]); });
    if (request.progress)
      request.progress(1, static_cast<std::int64_t>(b + n),
                       static_cast<std::int64_t>(candidates.size()));
  }
  std::erase_if(candidates, [](const Checked* c) { return !c->reason.empty(); });

  // Phase 2, best first: a layout is lowered whole (its graph's bound) only when its busiest
  // device's bound could still beat the k-th best runtime so far, and simulated in order of the
  // graph's bound; a layout whose bound is above the k-th best cannot enter the top, nor can any
  // after it. Lowering and simulation go in fixed blocks and batches, and the threshold changes
  // only between them, so the counts do not depend on the threads.
  std::stable_sort(candidates.begin(), candidates.end(), [](const Checked* a, const Checked* b) {
    return a->compute_bound_s < b->compute_bound_s;
  });
  const auto later = [](const Checked* a, const Checked* b) {
    return a->lower_bound_s != b->lower_bound_s ? a->lower_bound_s > b->lower_bound_s
                                                : a->index > b->index;
  };
  std::vector<const Checked*> pending;  // lowered and fitting, a heap by the graph's bound
  constexpr std::size_t kBatch = 32;
  const auto k = static_cast<std::size_t>(request.top);
  std::vector<PlanEntry> top;
  std::vector<double> faster_than;  // every simulated runtime, for the reference's rank
  std::vector<double> pruned_bounds;
  std::size_t next = 0;  // candidates[next] is the first not lowered
  constexpr double kNone = std::numeric_limits<double>::infinity();
  for (;;) {
    const double threshold =
        request.prune && top.size() >= k ? top[k - 1].metrics.runtime_s : kNone;
    const double next_compute =
        next < candidates.size() ? candidates[next]->compute_bound_s : kNone;
    const double next_bound = pending.empty() ? kNone : pending.front()->lower_bound_s;
    if (next == candidates.size() && pending.empty()) break;
    if (std::min(next_compute, next_bound) > threshold) break;
    if (!pending.empty() && next_bound <= next_compute) {
      std::vector<const Checked*> batch;
      while (batch.size() < kBatch && !pending.empty() &&
             pending.front()->lower_bound_s <= std::min(threshold, next_compute)) {
        std::pop_heap(pending.begin(), pending.end(), later);
        batch.push_back(pending.back());
        pending.pop_back();
      }
      std::vector<std::optional<PlanEntry>> entries(batch.size());
      std::vector<std::string> failures(batch.size());
      detail::parallel_for(batch.size(), request.threads, [&](std::size_t i) {
        const Checked& c = *batch[i];
        try {
          const auto shared =
              authors(c.layout) ? nullptr : tables.get(request, shape_key(c.layout));
          const auto own = shared ? nullptr : tables.authors(request, c.layout);
          PlanEntry entry;
          entry.index = c.index;
          entry.layout = c.layout;
          entry.lower_bound_s = c.lower_bound_s;
          entry.peak_memory_bytes = c.peak_memory_bytes;
          entry.metrics = simulate_table(shared ? *shared->table : *own,
                                         layout_setup(request, c.layout), c.layout.schedule)
                              .metrics;
          // The simulated peak: the bound's, or more where offload's copies come late.
          entry.peak_memory_bytes = std::max(c.peak_memory_bytes, entry.metrics.peak_memory_max());
          entries[i] = std::move(entry);
        } catch (const ParamError& error) {
          failures[i] = error.what();
        }
      });
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (!entries[i]) {
          reject("simulation: the layout cannot run",
                 describe(batch[i]->layout) + ": " + failures[i], 1);
          continue;
        }
        ++result.simulated;
        // Activation offload: its copies, timed, may leave more on the device than the bound
        // (which takes them as on time) or more in a host than it has.
        if (entries[i]->metrics.any_over_capacity()) {
          const auto& m = entries[i]->metrics;
          reject("memory: over the device or the host once offload's copies are timed",
                 describe(batch[i]->layout) +
                     fmt::format(": {:.4g} GB of {:.4g} GB usable, {:.4g} GB of a host's {:.4g} GB",
                                 m.peak_memory_max() / 1e9, m.memory_capacity_bytes / 1e9,
                                 m.host_peak_bytes / 1e9, m.host_memory_bytes / 1e9),
                 1);
          continue;
        }
        faster_than.push_back(entries[i]->metrics.runtime_s);
        top.push_back(std::move(*entries[i]));
      }
      std::sort(top.begin(), top.end(), faster);
      if (top.size() > k) top.resize(k);
    } else {
      // Blocks grow from a batch's size: the first simulations set the threshold that prunes
      // most of the rest, before many whole graphs are lowered for nothing.
      const std::size_t block = std::clamp(next, kBatch, kBlock);
      std::size_t n = 0;
      while (n < block && next + n < candidates.size() &&
             candidates[next + n]->compute_bound_s <= threshold)
        ++n;
      detail::parallel_for(n, request.threads, [&](std::size_t i) {
        lower_and_bound(request, tables, *candidates[next + i]);
      });
      for (std::size_t i = 0; i < n; ++i) {
        const Checked* c = candidates[next + i];
        if (!c->reason.empty()) continue;
        pending.push_back(c);
        std::push_heap(pending.begin(), pending.end(), later);
      }
      next += n;
      result.lowered += static_cast<std::int64_t>(n);
      if (request.progress)
        request.progress(2, static_cast<std::int64_t>(next),
                         static_cast<std::int64_t>(candidates.size()));
    }
  }
  // The search is over when the bound prunes the rest: progress ends at the total, not where the
  // last block was lowered (it once stopped at 1,792 of 29,677).
  if (request.progress) {
    request.progress(2, static_cast<std::int64_t>(candidates.size()),
                     static_cast<std::int64_t>(candidates.size()));
  }
  // What was not simulated: the lowered layouts left and those never lowered, each with its
  // best bound; and the rejected, in enumeration order (the first is the example).
  for (const Checked* c : pending)
    pruned_bounds.push_back(c->lower_bound_s);
  for (std::size_t i = next; i < candidates.size(); ++i)
    pruned_bounds.push_back(candidates[i]->compute_bound_s);
  result.pruned = static_cast<std::int64_t>(pruned_bounds.size());
  for (const auto& c : layouts) {
    if (!c.reason.empty()) reject(c.reason, describe(c.layout) + ": " + c.detail, 1);
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
        result.reference_rank_exact =
            std::none_of(pruned_bounds.begin(), pruned_bounds.end(),
                         [&](double bound) { return bound < entry.metrics.runtime_s; });
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
  return {b.compute * t,          b.bubble * t,
          b.exposed_pipeline * t, b.tp_comm * t,
          b.reductions * t,       b.optimizer * t,
          b.expert_comm * t,      (b.host_overhead + b.comm_interference) * t};
}

nlohmann::json layout_json(const PlanLayout& l) {
  nlohmann::json j = {
      {"tensor_parallel", l.tensor_parallel},
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
      {"fsdp", l.fsdp},
      {"expert_parallel", l.expert_parallel},
      {"a2a_overlap", l.a2a_overlap},
      {"expert_tensor_parallel", l.expert_tensor_parallel},
      {"moe_recompute", to_string(l.moe_recompute)},
      {"pipeline_layout",
       l.pipeline_layout.empty() ? nlohmann::json(nullptr) : nlohmann::json(l.pipeline_layout)}};
  // Only with a search (--search): a plan without one writes the JSON it always wrote.
  if (!l.options.empty()) {
    auto& options = j["options"] = nlohmann::json::object();
    for (const auto& o : l.options)
      options[o.key] = o.value;
  }
  return j;
}

nlohmann::json to_json(const PlanRequest& q, const PlanResult& r) {
  nlohmann::json j = {{"model", q.model.name},
                      {"system", q.system.name},
                      {"gpus", q.gpus},
                      {"global_batch", q.global_batch},
                      {"shard", {q.shard, q.shards}},
                      {"layouts", r.layouts},
                      {"rejected", r.rejected},
                      {"pruned", r.pruned},
                      {"simulated", r.simulated},
                      {"lowered", r.lowered}};
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
                     {"expert_comm", p.experts},
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
  q.model = run->model;
  q.job = run->job;
  q.layout = run->layout;
  q.system = load_run_system(runs, *run);
  q.lowering = run->lowering;
  PlanLayout l;
  l.tensor_parallel = run->layout.tp;
  l.pipeline_parallel = run->devices;
  l.data_parallel = run->layout.dp;
  l.micro_batch = run->job.micro_batch;
  l.microbatches = run->microbatches;
  l.schedule = run->schedule;
  l.chunks = run->chunks.value_or(0);
  l.recompute = run->job.recompute;
  l.sequence_parallel = run->layout.sequence_parallel;
  l.distributed_optimizer = run->job.distributed_optimizer;
  l.context_parallel = run->layout.cp;
  l.fsdp = run->layout.fsdp.enabled;
  l.expert_parallel = run->layout.ep;
  l.a2a_overlap = run->job.a2a_overlap;
  l.expert_tensor_parallel = run->layout.etp;
  l.moe_recompute = run->job.moe.recompute;
  q.space.cp_method = run->layout.cp_method;
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

PlanLayout job_reference(const PlanRequest& q, std::string_view job) {
  PlanLayout l;
  l.tensor_parallel = q.layout.tp;
  l.context_parallel = q.layout.cp;
  l.expert_parallel = q.layout.ep;
  l.sequence_parallel = q.layout.sequence_parallel;
  l.fsdp = q.layout.fsdp.enabled;
  l.pipeline_parallel = q.layout.pp;
  l.schedule = q.layout.schedule.empty() ? std::string("1f1b")
                                         : std::string(find_schedule(q.layout.schedule).name);
  l.chunks = q.layout.chunks;
  l.micro_batch = q.job.micro_batch;
  l.recompute = q.job.recompute;
  l.distributed_optimizer = q.job.distributed_optimizer;
  l.a2a_overlap = q.job.a2a_overlap;
  l.expert_tensor_parallel = q.layout.etp;
  l.moe_recompute = q.job.moe.recompute;
  const std::int64_t per_replica = l.tensor_parallel * l.context_parallel * l.pipeline_parallel;
  l.data_parallel = q.gpus % per_replica == 0 ? q.gpus / per_replica : 0;
  const std::int64_t per_step = l.micro_batch * l.data_parallel;
  l.microbatches = per_step > 0 ? q.global_batch / per_step : 0;
  if (l.data_parallel < 1 || per_step * l.microbatches != q.global_batch) {
    throw Error(
        fmt::format("{}: its layout (TP {} × CP {} × PP {}, micro batch {}) does not run {} GPUs "
                    "at a global batch of {}",
                    job, l.tensor_parallel, l.context_parallel, l.pipeline_parallel, l.micro_batch,
                    q.gpus, q.global_batch));
  }
  return l;
}

void keep_reference_options(PlanRequest& request) {
  if (!request.reference) return;
  const PlanLayout& r = *request.reference;
  request.space.recompute = {r.recompute};
  request.space.sequence_parallel = {r.sequence_parallel};
  request.space.distributed_optimizer = {r.distributed_optimizer};
  request.space.fsdp = {r.fsdp};
  request.space.context_parallel = {r.context_parallel};
  request.space.expert_parallel = {r.expert_parallel};
  request.space.a2a_overlap = {r.a2a_overlap};
  request.space.expert_tensor_parallel = {r.expert_tensor_parallel};
  request.space.moe_recompute = {r.moe_recompute};
  request.space.options.clear();  // the run's own values of every other option
}

std::vector<std::int64_t> default_context_parallel(const TransformerConfig& model,
                                                   std::int64_t seq_len, std::int64_t gpus) {
  std::vector<std::int64_t> cps{1};
  if (model.hybrid()) return cps;
  for (std::int64_t cp = 2; cp <= gpus && seq_len / cp >= kMinTokensPerCpRank; cp *= 2) {
    if (seq_len % (2 * cp) == 0) cps.push_back(cp);
  }
  return cps;
}

PlanSpace parse_plan_space(const PlanSpaceText& text) {
  PlanSpace space;
  space.tensor_parallel = text.tp;
  space.pipeline_parallel = text.pp;
  space.micro_batch = text.micro_batch;
  space.schedules = text.schedules;
  space.chunks = text.chunks;
  space.recompute = parse_recompute_list(text.recompute);
  space.sequence_parallel = parse_on_off_both("--sequence-parallel", text.sequence_parallel);
  space.distributed_optimizer =
      parse_on_off_both("--distributed-optimizer", text.distributed_optimizer);
  space.context_parallel = text.cp;
  space.fsdp = parse_on_off_both("--fsdp", text.fsdp);
  space.expert_parallel = text.ep;
  space.a2a_overlap = parse_on_off_both("--a2a-overlap", text.a2a_overlap);
  space.expert_tensor_parallel = text.etp;
  for (const auto& name : text.moe_recompute) {
    const auto r = parse_moe_recompute(name);
    if (!r) throw Error(fmt::format("--moe-recompute {}: expected none, moe_act or mlp", name));
    space.moe_recompute.push_back(*r);
  }
  if (text.cp_method) {
    const auto method = parse_cp_method(*text.cp_method);
    if (!method) {
      throw Error(fmt::format("--cp-method {}: expected ring, allgather or a2a", *text.cp_method));
    }
    space.cp_method = *method;
  }
  for (const auto& text_option : text.search) {
    const auto equals = text_option.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == text_option.size()) {
      throw Error(fmt::format(
          "--search {}: expected KEY=VALUE,VALUE,... (an option's key, e.g. moe_dispatcher="
          "alltoall,deepep)",
          text_option));
    }
    PlanSpace::Option option{text_option.substr(0, equals), {}};
    std::string_view values = std::string_view(text_option).substr(equals + 1);
    for (;;) {
      const auto comma = values.find(',');
      option.values.emplace_back(values.substr(0, comma));
      if (comma == std::string_view::npos) break;
      values.remove_prefix(comma + 1);
    }
    space.options.push_back(std::move(option));
  }
  return space;
}

}  // namespace pipetab
