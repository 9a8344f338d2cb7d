#include "options.hpp"

#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/table_export.hpp"
#include "pipetab/numeric.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab::cli {

namespace {

// CLI11 clamps out-of-range integers and reads "010" as octal and "0x10" as hex; whole
// numbers here are decimal, so the text is checked and rewritten in canonical decimal first.
const CLI::Validator kWholeNumber(
    [](std::string& text) {
      std::int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size()) {
        return fmt::format("'{}' is not a whole number within 64 bits", text);
      }
      text = std::to_string(value);
      return std::string();
    },
    "INT");

// A number in [lo, hi], named `what` in the error; CLI::Range lets NaN through.
CLI::Validator number_in(double lo, double hi, const std::string& what, const std::string& name) {
  return CLI::Validator(
      [=](std::string& text) {
        double value = 0.0;
        const auto [ptr, ec] = pipetab::parse_double(text.data(), text.data() + text.size(), value);
        if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size() ||
            !(value >= lo && value <= hi)) {
          return fmt::format("'{}' is not {}", text, what);
        }
        return std::string();
      },
      name);
}

const CLI::Validator kFraction = number_in(0.0, 1.0, "a fraction between 0 and 1", "FRACTION");
const CLI::Validator kScale = number_in(1e-6, 1e6, "a factor between 1e-6 and 1e6", "FACTOR");

}  // namespace

void add_schedule_options(CLI::App& command, ScheduleOptions& o) {
  o.devices = kDefaultDevices;
  o.microbatches = kDefaultMicrobatches;
  o.devices_opt =
      command.add_option("-S,--devices", o.devices, "pipeline depth S: number of devices")
          ->transform(kWholeNumber)
          ->capture_default_str();
  o.microbatches_opt =
      command.add_option("-M,--microbatches", o.microbatches, "microbatches per iteration M")
          ->transform(kWholeNumber)
          ->capture_default_str();
  o.chunks_opt =
      command
          .add_option("-v,--chunks", o.chunks, "model chunks per device v (interleaved; default 2)")
          ->transform(kWholeNumber);
  o.waves_opt = command.add_option("-W,--waves", o.waves, "waves W (hanayo; default 2)")
                    ->transform(kWholeNumber);
  o.group_size_opt =
      command
          .add_option("--group-size", o.group_size,
                      "microbatches per group G of the interleaved order (Megatron's "
                      "microbatch_group_size_per_vp_stage; default S where M is a multiple of S, "
                      "else PyTorch's M/max(1,M/S))")
          ->transform(kWholeNumber);
  o.variant_opt = command.add_option("--variant", o.variant,
                                     "schedule variant, e.g. chimera's direct or doubling");
  o.split_opt =
      command.add_option("--split", o.split, "stage-size split E:L of chimera-asym (default 1:2)");
  o.costs_opt =
      command
          .add_option("--costs", o.costs,
                      "op costs per device share, e.g. F=1,B=2,I=1,W=1 (B = I + W and I = W = B/2 "
                      "are derived when left out)")
          ->default_str("F=1,B=2,I=1,W=1");
  command
      .add_option(
          "--input-grad-frees", o.input_grad_frees,
          "fraction of a stage's activation an I (input-grad backward) frees; W frees the rest")
      ->check(kFraction)
      ->capture_default_str();
}

void add_simulation_options(CLI::App& command, ScheduleOptions& o) {
  o.system_opt = command
                     .add_option("--system", o.system,
                                 "system preset or TOML file for the simulation level (presets: " +
                                     fmt::format("{}", fmt::join(io::system_presets(), ", ")) + ")")
                     ->capture_default_str();
  command
      .add_option("--model", o.model,
                  "model preset or TOML file (presets: " +
                      fmt::format("{}", fmt::join(io::model_presets(), ", ")) + ")")
      ->capture_default_str();
  command
      .add_option("--tp", o.tensor_parallel,
                  "tensor-parallel ranks per stage (default: the model file's tensor_parallel)")
      ->transform(kWholeNumber)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  command.add_flag(
      "--sequence-parallel", o.sequence_parallel,
      "sequence parallelism with --tp (Korthikanti et al. 2022): norms and dropouts on "
      "1/tp of the sequence, all-gathers and reduce-scatters instead of all-reduces "
      "(default: the model file's sequence_parallel)");
  command
      .add_option("--cp", o.context_parallel,
                  "context-parallel ranks per stage: each runs seq_len/cp tokens of every "
                  "sequence and exchanges keys and values in attention")
      ->transform(kWholeNumber)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  command
      .add_option("--cp-method", o.cp_method,
                  "how context-parallel ranks exchange keys and values: ring (Transformer "
                  "Engine's p2p, Megatron's default), allgather (torchtitan's default, Llama 3), "
                  "a2a (Ulysses all-to-all)")
      ->check(CLI::IsMember({"ring", "allgather", "a2a"}))
      ->capture_default_str();
  command
      .add_option("--ep", o.expert_parallel,
                  "expert-parallel ranks: each MoE layer's experts spread over them, drawn from "
                  "a stage's --tp × --cp × --dp ranks (Megatron-Core's parallel folding); tokens "
                  "reach them by all-to-all")
      ->transform(kWholeNumber)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  command
      .add_option("--etp", o.expert_tensor_parallel,
                  "expert-tensor-parallel ranks: each expert's matrices split over them (--ep × "
                  "--etp must divide --tp × --cp × --dp)")
      ->transform(kWholeNumber)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  command
      .add_option("--dp", o.data_parallel,
                  "data-parallel replicas of the pipeline (gradient all-reduce; with --fsdp the "
                  "ranks parameters are sharded over)")
      ->transform(kWholeNumber)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{kMaxDataParallel}))
      ->capture_default_str();
  auto* fsdp = command.add_flag(
      "--fsdp", o.fsdp,
      "fully sharded data parallelism (FSDP2, ZeRO-3): parameters, gradients and "
      "optimizer state sharded over the --dp × --cp ranks, each unit (a stage "
      "when pipelined, a transformer block without) all-gathered before use and its "
      "gradients reduce-scattered after");
  command
      .add_option("--fsdp-shard", o.fsdp_shard,
                  "HSDP: shard over groups of this many ranks and replicate across them (default: "
                  "shard over all --dp × --cp ranks)")
      ->transform(kWholeNumber)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{kMaxDataParallel}))
      ->needs(fsdp);
  command
      .add_option("--reshard-after-forward", o.reshard_after_forward,
                  "FSDP: free a unit's gathered parameters after its forward and gather them "
                  "again for the backward (on), or keep them (off); auto: torchtitan's default, "
                  "on without pipelining and off with it")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str()
      ->needs(fsdp);
  command
      .add_option("--fsdp-grad-sync", o.fsdp_grad_sync,
                  "FSDP: reduce-scatter gradients once per step after a unit's last backward "
                  "(step: torchtitan with pipelining, FSDP2's no_sync) or after every "
                  "microbatch's (microbatch)")
      ->check(CLI::IsMember({"step", "microbatch"}))
      ->capture_default_str()
      ->needs(fsdp);
  command
      .add_flag("--fsdp-fp8-all-gather", o.fsdp_fp8_all_gather,
                "FSDP: all-gather parameters in FP8 (torchtitan's "
                "enable_fsdp_float8_all_gather): one byte per parameter")
      ->needs(fsdp);
  command
      .add_option("--fsdp-impl", o.fsdp_impl,
                  "FSDP: whose — fsdp2 (PyTorch, torchtitan) copies each gathered unit out of "
                  "the all-gather's buffer on the compute stream and the gradients into the "
                  "reduce-scatter's; megatron (Megatron-FSDP) gathers and reduces in place")
      ->check(CLI::IsMember({"fsdp2", "megatron"}))
      ->capture_default_str()
      ->needs(fsdp);
  command.add_option("--pipeline-layout", o.pipeline_layout,
                     "the stages' contents in Megatron-Core's notation: E embedding, t transformer "
                     "layer, m MTP module, L loss, | between stages, X*n and (...)*n repeat, e.g. "
                     "\"Ett|(ttt|)*30ttL\" (default: layers split evenly, MTP modules last)");
  command.add_flag(
      "--no-contention", o.no_contention,
      "transfers do not share link bandwidth (each takes latency + bytes/bandwidth alone)");
  command
      .add_option("--nccl-buffsize", o.nccl_buffsize,
                  "NCCL's buffer per pair of ranks in bytes (NCCL_BUFFSIZE): under the pytorch "
                  "runtime a pipeline message of at most this size is sent without waiting for "
                  "its receive; a larger one waits until the receive is posted")
      ->check(CLI::Range(0.0, 1e18))
      ->capture_default_str();
  command.add_flag("--blocking-send", o.blocking_send,
                   "a device's compute waits for the activations and gradients it sends");
  o.runtime_opt =
      command
          .add_option(
              "--runtime", o.runtime,
              "how the runtime waits on pipeline transfers: auto (the default: the table's own "
              "runtime: megatron for 1f1b and interleaved, pytorch for any other table PyTorch "
              "runs, a file's own communication order included, async for two-pipeline "
              "schedules), megatron (blocking batched send/receive after each op), pytorch "
              "(PyTorch's runtime: sends and receives posted in its action order, receives "
              "waited by the op that needs them, one transfer at a time per pair of ranks), "
              "async (the idealisation: eager, only the consumer waits)")
          ->check(CLI::IsMember({"auto", "async", "megatron", "pytorch"}))
          ->capture_default_str();
  command
      .add_option("--tp-overlap", o.tp_overlap,
                  "tensor-parallel collectives that run beside a GEMM: none (Megatron-LM until "
                  "2021-09), backward (Megatron-LM since), all (Megatron-Core --tp-comm-overlap)")
      ->check(CLI::IsMember({"none", "backward", "all"}))
      ->capture_default_str();
  command.add_flag("--a2a-overlap", o.a2a_overlap,
                   "Megatron-Core's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm): "
                   "the interleaved schedule's steady-state forward and the backward after it run "
                   "as one step, each one's "
                   "expert all-to-alls under the other's compute (DualPipe's F&B pairs always do)");
  command.add_flag("--no-overheads", o.no_overheads,
                   "leave out the device's overheads no kernel carries: the host's time per "
                   "pipeline step and per kernel launch, and compute slowed by communication "
                   "(system keys step_overhead_s, host_launch_s, comm_slowdown)");
  command.add_flag("--no-optimizer", o.no_optimizer,
                   "simulate the pipeline and its gradient reductions only: no end-of-iteration "
                   "synchronisation and optimizer step");
  command.add_flag("--dp-overlap", o.dp_overlap,
                   "reduce data-parallel gradients in buckets while the last backward passes run "
                   "(torch DDP, Megatron-Core overlap_grad_reduce)");
  command
      .add_option("--dp-bucket-mb", o.dp_bucket_mb,
                  "gradient bucket size in MB for --dp-overlap (torch DDP's default 25)")
      ->check(CLI::Range(0.001, 1e9))
      ->capture_default_str();
  command.add_flag("--distributed-optimizer", o.distributed_optimizer,
                   "shard the optimizer over the data-parallel replicas (reduce-scatter the "
                   "gradients, all-gather the parameters)");
  command
      .add_option("--bandwidth-scale", o.bandwidth_scale,
                  "multiply every link's bandwidth (inside and across nodes) by this factor, as "
                  "the sensitivity study does")
      ->check(kScale)
      ->capture_default_str();
  command
      .add_option("--latency-scale", o.latency_scale,
                  "multiply every link's latencies by this factor")
      ->check(kScale)
      ->capture_default_str();
}

SimulationSetup ScheduleOptions::simulation(const std::string* system_name) const {
  SimulationSetup setup;
  setup.model = io::load_model(model);
  setup.system = io::load_system(system_name ? *system_name : system);
  setup.system.intra = setup.system.intra.scaled(bandwidth_scale, latency_scale);
  setup.system.inter = setup.system.inter.scaled(bandwidth_scale, latency_scale);
  if (costs_opt->count()) setup.lowering.costs = parsed_costs();
  setup.lowering.runtime = *parse_runtime(runtime);
  setup.lowering.cost.tp_overlap = *parse_overlap(tp_overlap);
  setup.lowering.a2a_overlap = a2a_overlap;
  setup.lowering.iteration.optimizer = !no_optimizer;
  setup.lowering.overheads = !no_overheads;
  setup.lowering.iteration.dp_overlap = dp_overlap;
  setup.lowering.iteration.dp_bucket_bytes = dp_bucket_mb * 1e6;
  setup.lowering.nccl_buffer_bytes = nccl_buffsize;
  setup.lowering.iteration.distributed_optimizer = distributed_optimizer;
  setup.options.contention = !no_contention;
  setup.options.blocking_send = blocking_send;
  apply_layout(layout(), setup.model, setup.lowering);
  require_supported(setup.system, setup.lowering);
  return setup;
}

Layout ScheduleOptions::layout() const {
  Layout l;
  l.tp = tensor_parallel;
  if (sequence_parallel) l.sequence_parallel = true;
  l.cp = context_parallel;
  l.cp_method = *parse_cp_method(cp_method);
  l.dp = data_parallel;
  l.ep = expert_parallel;
  l.etp = expert_tensor_parallel;
  l.fsdp.enabled = fsdp;
  l.fsdp.shard = fsdp_shard;
  if (reshard_after_forward != "auto") l.fsdp.reshard_after_forward = reshard_after_forward == "on";
  l.fsdp.grad_sync = *parse_grad_sync(fsdp_grad_sync);
  l.fsdp.fp8_all_gather = fsdp_fp8_all_gather;
  l.fsdp.impl = *parse_fsdp_impl(fsdp_impl);
  l.pipeline_layout = pipeline_layout;
  return l;
}

ScheduleParams ScheduleOptions::params(const ScheduleInfo* info, bool only_applicable) const {
  ScheduleParams p;
  p.devices = devices;
  p.microbatches = microbatches;
  const bool all = !only_applicable || info == nullptr;
  if (chunks_opt->count() && (all || info->default_chunks > 0)) p.chunks = chunks;
  if (waves_opt->count() && (all || info->default_waves > 0)) p.waves = waves;
  if (group_size_opt->count() && (all || info->takes_group_size)) p.group_size = group_size;
  if (variant_opt->count() && (all || !info->variants.empty())) p.variant = variant;
  if (split_opt->count() && (all || !info->default_split.empty())) p.split = split;
  return p;
}

Costs ScheduleOptions::parsed_costs() const {
  return costs_opt->count() ? parse_costs(costs) : Costs{};
}

MemoryOptions ScheduleOptions::memory() const {
  return MemoryOptions{input_grad_frees};
}

bool ScheduleOptions::any_shape_flag() const {
  for (const auto* opt : {devices_opt, microbatches_opt, chunks_opt, waves_opt, group_size_opt,
                          variant_opt, split_opt}) {
    if (opt->count()) return true;
  }
  return false;
}

Subject generated_subject(const std::string& name, const ScheduleOptions& options,
                          bool only_applicable) {
  const ScheduleInfo& info = find_schedule(name);
  Subject subject;
  subject.name = std::string(info.name);  // "1F1B", "ScheduleZBVZeroBubble": the registry's key
  subject.params = resolve(info, options.params(&info, only_applicable));
  if (!subject.params->note.empty()) fmt::print(stderr, "note: {}\n", subject.params->note);
  subject.table = info.generate(*subject.params);
  return subject;
}

Subject file_subject(const std::string& path, const ScheduleOptions& options) {
  if (options.any_shape_flag()) {
    throw Error(
        fmt::format("--table {}: the file sets the sizes; -S, -M, -v, -W, --variant and --split "
                    "do not apply to it",
                    path));
  }
  return file_subject(path);
}

Subject file_subject(const std::string& path) {
  Subject subject;
  subject.name = path;
  subject.file = io::load_table(path);
  io::require_valid(*subject.file);
  subject.table = subject.file->table;
  return subject;
}

void add_subject_options(CLI::App& command, SubjectOptions& o) {
  command.add_option("name", o.name, "schedule name (see pipetab list)");
  command.add_option("--table", o.table,
                     "a table file (PyTorch CSV or pipetab JSON) instead of a name");
  add_schedule_options(command, o.schedule);
  command.add_option("-o,--output", o.output, "write to this file instead of stdout");
}

Subject one_subject(const SubjectOptions& o) {
  if (!o.name.empty() && !o.table.empty()) {
    throw Error(fmt::format("give a schedule name or --table FILE, not both ('{}' and --table {})",
                            o.name, o.table));
  }
  if (o.name.empty() && o.table.empty())
    throw Error("give a schedule name (see pipetab list) or --table FILE");
  return o.name.empty() ? file_subject(o.table, o.schedule)
                        : generated_subject(o.name, o.schedule, false);
}

}  // namespace pipetab::cli
