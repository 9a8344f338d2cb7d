// PlanLayout planning (`pipetab plan`): for a model, a cluster of N GPUs and a global batch, every
// hybrid-parallel layout — tensor parallel × pipeline parallel × data parallel, the pipeline
// schedule and its virtual chunks, the micro-batch size, recomputation, sequence parallelism and
// the distributed optimizer — checked against the device's memory and ranked by simulated
// iteration time. Lower bounds from the lowered graph (sim/bounds.hpp) skip layouts that cannot
// beat the best found (branch and bound). See docs/plan.md.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipetab/model/workload.hpp"
#include "pipetab/report/simulation.hpp"
#include "pipetab/setting.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {

/// The run options (sim/options.hpp) plan searches with choices of its own (lists, or
/// both/on/off), and those it derives from the search (data parallelism, the global batch's
/// microbatches): the command line and the Python API take every other option as a simulation's.
inline constexpr std::array<std::string_view, 14> kPlanSearched{
    "tensor_parallel",        "micro_batch",      "recompute",   "sequence_parallel",
    "distributed_optimizer",  "context_parallel", "cp_method",   "expert_parallel",
    "expert_tensor_parallel", "moe_recompute",    "a2a_overlap", "fsdp",
    "data_parallel",          "global_batch"};

/// The most GPUs `plan` lays out (2^24: two orders of magnitude above the largest clusters).
inline constexpr std::int64_t kMaxPlanGpus = std::int64_t{1} << 24;

/// The most forward passes a table plan builds may hold (M microbatches over v·PP stages; its
/// ops are two or three times that): 2^17, 8 times the 16,384 of the largest documented plan
/// (Llama 3.1 405B at 128K: M 128 over 128 stages). `plan --gpus 8 --global-batch 262144` once
/// grew to 14.7 GB before it failed; with the bound it ends in seconds, every layout rejected
/// with its reason.
inline constexpr std::int64_t kMaxPlanTablePasses = std::int64_t{1} << 17;

/// The values each dimension of the search takes. Empty lists take the defaults described.
struct PlanSpace {
  /// Default: the divisors of the node size (tensor parallelism stays inside a node).
  std::vector<std::int64_t> tensor_parallel;
  /// Default: every divisor of N / TP.
  std::vector<std::int64_t> pipeline_parallel;
  /// Default: 1, 2, 4, 8, 16 (those that divide the batch per data-parallel replica).
  std::vector<std::int64_t> micro_batch;
  /// Registered schedule names, and "zb-authors" / "zb-authors-v" (the zero-bubble authors'
  /// schedulers planned per layout, layout_table). Default: all of them.
  std::vector<std::string> schedules;
  /// Virtual chunks for the schedules that take -v. Default: every v in 2..8 dividing the layers
  /// per device (the schedule's default if none does).
  std::vector<std::int64_t> chunks;
  std::vector<Recompute> recompute{Recompute::None, Recompute::Selective, Recompute::Full};
  std::vector<bool> sequence_parallel{false, true};      ///< true only with TP > 1
  std::vector<bool> distributed_optimizer{false, true};  ///< true only with DP > 1
  /// Context-parallel sizes (each must split the sequence into 2·CP chunks, and for a2a the
  /// heads and KV heads per TP rank; require_layout). Default: default_context_parallel.
  std::vector<std::int64_t> context_parallel;
  CpMethod cp_method = CpMethod::Ring;
  /// FSDP over DP × CP (never with the distributed optimizer, which it subsumes). Default: both.
  std::vector<bool> fsdp{false, true};
  /// Expert-parallel sizes of a mixture of experts (each must divide the experts and TP × CP ×
  /// DP). Default: every power of two that does, up to the experts; 1 for a dense model.
  std::vector<std::int64_t> expert_parallel;
  /// Megatron-Core's 1F1B all-to-all overlap (--a2a-overlap), tried where EP > 1. Default: both.
  std::vector<bool> a2a_overlap{false, true};
  /// Expert-tensor-parallel sizes (each expert's matrices split over them; EP × ETP must divide
  /// TP × CP × DP). Default: 1.
  std::vector<std::int64_t> expert_tensor_parallel;
  /// What a mixture of experts recomputes (Megatron-Core's --recompute-modules moe_act, mlp).
  /// Default: the job's own.
  std::vector<MoeRecompute> moe_recompute;
  /// Any other option of a run (sim/options.hpp) with the values to try (`--search KEY=A,B`):
  /// every layout above is tried with each combination, the first option outermost. Not the
  /// options plan searches or derives itself (kPlanSearched), nor those that decide a layout's
  /// table or stage split (searchable_option says why).
  struct Option {
    std::string key;
    std::vector<std::string> values;
    friend bool operator==(const Option&, const Option&) = default;
  };
  std::vector<Option> options;
};

/// Why `plan --search` cannot search the option `key` (plan's own axes, the derived degrees, the
/// options that decide the table, its runtime or the stage split), or nullopt when it can.
std::optional<std::string> unsearchable_option(std::string_view key);

/// One layout of the cluster.
struct PlanLayout {
  std::int64_t tensor_parallel = 1, pipeline_parallel = 1, data_parallel = 1;
  std::int64_t context_parallel = 1;
  bool fsdp = false;
  std::int64_t micro_batch = 1;
  std::int64_t microbatches = 1;  ///< per replica per iteration
  std::string schedule;
  std::int64_t chunks = 0;  ///< 0: the schedule takes no -v
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
  std::int64_t expert_parallel = 1;
  bool a2a_overlap = false;
  std::int64_t expert_tensor_parallel = 1;
  MoeRecompute moe_recompute = MoeRecompute::None;
  /// Where the units do not split into equal stages: Megatron-Core's balanced pipeline layout
  /// (balanced_pipeline_layout) the layout runs with. Empty: equal stages, or the request's own.
  std::string pipeline_layout;
  /// The values of PlanSpace::options this layout runs, in the space's order (origin empty).
  std::vector<Setting> options;
  friend bool operator==(const PlanLayout&, const PlanLayout&) = default;
};

/// What to plan.
struct PlanRequest {
  ModelConfig model;  ///< a transformer
  /// The job and the layout every candidate starts from (the model's defaults, a job file, the
  /// flags): each candidate replaces what the search varies (PlanLayout's fields) and keeps the
  /// rest (sequence length, precision, the MoE job, FSDP's options, ...).
  Job job;
  Layout layout;
  SystemConfig system;
  std::int64_t gpus = 0;
  std::int64_t global_batch = 0;  ///< sequences per iteration
  PlanSpace space;
  /// How every layout is simulated (the runtime, the iteration's end).
  LoweringOptions lowering;
  SimOptions sim;
  std::int32_t top = 10;   ///< layouts kept, fastest first
  bool prune = true;       ///< false: simulate every layout that fits (exhaustive)
  unsigned threads = 0;    ///< 0: all cores
  std::int64_t shard = 1;  ///< this shard (1-based) of `shards` contiguous slices of the layouts
  std::int64_t shards = 1;
  /// Called from the calling thread as work completes: phase 1 checks every layout, phase 2
  /// simulates; done and total count layouts of that phase.
  std::function<void(int phase, std::int64_t done, std::int64_t total)> progress;
  /// A layout to compare with (e.g. a published one): simulated whatever its bound, and ranked
  /// among the others.
  std::optional<PlanLayout> reference;
  /// Keep only layouts this real runtime can run (runtime_refuses); unset: every layout.
  std::optional<Runtime> runnable_by;
};

/// "TP 8 · PP 8 · DP 16, interleaved v 2, micro batch 1 × 64, selective, SP, dist-opt".
std::string describe(const PlanLayout& layout);

/// A layout that was simulated.
struct PlanEntry {
  std::int64_t index = 0;  ///< in the enumeration order (ties are broken by it)
  PlanLayout layout;
  double lower_bound_s = 0.0;
  double peak_memory_bytes = 0.0;  ///< the largest device's
  SimulationMetrics metrics;
};

/// Why layouts were not ranked, with counts.
struct PlanRejection {
  std::string reason;  ///< e.g. "memory: over the device's capacity with activations"
  std::int64_t count = 0;
  std::string example;  ///< the first such layout and its detail
};

struct PlanResult {
  std::int64_t layouts = 0;   ///< enumerated in this shard
  std::int64_t rejected = 0;  ///< invalid or over memory (see rejections)
  std::int64_t pruned = 0;    ///< skipped: their lower bound cannot beat the top
  std::int64_t simulated = 0;
  /// Lowered to their whole execution graph (the rest were decided on their compute part alone).
  std::int64_t lowered = 0;
  std::vector<PlanRejection> rejections;  ///< by count, largest first
  std::vector<PlanEntry> top;             ///< fastest first
  /// The reference layout simulated (unset without one, or when it cannot run: see
  /// reference_error), and its rank among the simulated layouts (1-based). The rank is exact
  /// when no pruned layout's bound is below the reference's runtime; otherwise some pruned
  /// layouts might be faster and the rank is a lower bound.
  std::optional<PlanEntry> reference;
  std::int64_t reference_rank = 0;
  bool reference_rank_exact = true;
  std::string reference_error;
};

/// The model with the layout's tensor parallelism, micro batch, recomputation and sequence
/// parallelism, and the lowering options with its data parallelism and optimizer sharding: what
/// the layout is simulated with.
SimulationSetup layout_setup(const PlanRequest& request, const PlanLayout& layout);

/// The layout's schedule table: a registered schedule's, or for "zb-authors" and "zb-authors-v"
/// the zero-bubble authors' schedulers planned for the layout's pass times and transfer delay
/// at 1F1B's memory (S microbatches). Throws ParamError where the schedule cannot be built.
ScheduleTable layout_table(const PlanRequest& request, const PlanLayout& layout);

/// Runs the search. Deterministic: the same request gives the same result (counts included)
/// whatever the thread count. Throws ParamError for a request with no layout at all (the GPU
/// count or the batch admit none) or a model that is not a transformer.
PlanResult plan(const PlanRequest& request);

/// The parts of the runtime a layout spends, in seconds (breakdown shares × runtime).
struct RuntimeParts {
  double compute = 0, bubble = 0, pipeline = 0, tp = 0, reductions = 0, optimizer = 0;
  double experts = 0;   ///< the experts' all-to-alls exposed in the ops
  double overhead = 0;  ///< host time per pipeline step and compute slowed by communication
};
RuntimeParts runtime_parts(const SimulationMetrics& metrics);

/// A layout's fields as JSON (chunks null when the schedule has none).
nlohmann::json layout_json(const PlanLayout& layout);

/// Sets `request`'s model, system, runtime options, GPU count and global batch from the
/// iteration run `id` of the measured-runs file (or preset) `file`, and its layout as the
/// reference to rank. Throws Error listing the iteration runs when there is no such run.
void plan_from_run(PlanRequest& request, const std::string& file, const std::string& id);

/// A job file's layout (`request`'s job and layout, the file's settings applied) as the reference
/// to rank, as a measured run's is: its data-parallel replicas are the GPUs its TP × CP × PP
/// leave, its microbatches the global batch's. `job` names the file in the message. Throws Error
/// when the layout does not run the request's GPUs at its global batch.
PlanLayout job_reference(const PlanRequest& request, std::string_view job);

/// --keep-run-options: the search keeps the reference layout's recomputation, sequence
/// parallelism, optimizer sharding, FSDP and CP as its only choices (plan_from_run sets the
/// reference). No-op without a reference.
void keep_reference_options(PlanRequest& request);

/// The recomputation modes named in `names` ("none", "selective", "full"), for --recompute.
/// Throws Error naming the first unknown one.
std::vector<Recompute> parse_recompute_list(const std::vector<std::string>& names);

/// "both", "on" or "off" as the values a search tries: {false, true}, {true} or {false}. Throws
/// Error naming `flag` otherwise.
std::vector<bool> parse_on_off_both(const std::string& flag, const std::string& value);

/// The search space as `plan`'s flags and Python's keywords give it: sizes as lists (empty: the
/// default), the rest as the flags' text.
/// The context-parallel sizes plan tries by default: 1 and each power of two up to the GPUs
/// that leaves every rank at least kMinTokensPerCpRank tokens of the sequence (and splits it
/// into 2·CP chunks). At 8K that is 1, 2 and 4: Llama 3.1 70B on 64 H100s runs fastest at CP 4
/// (issue 41), which CP 1 alone missed by 8.5%. A hybrid model takes none (its Mamba layers'
/// context parallelism is not modelled: require_trainable refuses it): 1 alone.
std::vector<std::int64_t> default_context_parallel(const TransformerConfig& model,
                                                   std::int64_t seq_len, std::int64_t gpus);
/// Below this many tokens per rank a ring's KV exchange has too little attention to hide under,
/// and no published run goes there (Llama 3 keeps 8K per rank at 128K with CP 16, Llama Team,
/// arXiv 2407.21783 §3.3.2; torchtitan's CP sweep 32K per GPU).
inline constexpr std::int64_t kMinTokensPerCpRank = 2048;

struct PlanSpaceText {
  std::vector<std::int64_t> tp, pp, micro_batch, chunks, cp, ep, etp;
  std::vector<std::string> moe_recompute;  ///< empty: the job's own
  std::vector<std::string> schedules, recompute{"none", "selective", "full"};
  std::string sequence_parallel = "both", distributed_optimizer = "both", fsdp = "both";
  std::string a2a_overlap = "both";
  std::optional<std::string> cp_method;  ///< unset: ring
  std::vector<std::string> search;       ///< "KEY=A,B" each (--search): PlanSpace::options
};

/// The space `text` describes. Throws Error naming the flag of the first value it cannot read.
PlanSpace parse_plan_space(const PlanSpaceText& text);

/// The plan as `pipetab plan --format json` writes it (docs/design.md §7.2).
nlohmann::json to_json(const PlanRequest& request, const PlanResult& result);

}  // namespace pipetab
