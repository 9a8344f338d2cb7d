// Job files in other tools' formats: a torchtitan job TOML and the arguments a Megatron-LM launch
// script passes. A reader translates what a file says into settings (pipetab::Setting: the key of
// the one definition of every option, sim/options.hpp, its value as text, and where it came
// from); it fills no Job or Layout itself, so that a job file's options are applied and checked
// by the same code as every other source's. A writer goes the way back: the file that tool would
// run a Job and a Layout from. docs/jobs.md tables every mapping, what is refused and why.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipetab/model/job.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/setting.hpp"

namespace pipetab::io {

/// What a reader found in a job file.
struct JobFile {
  std::string format;             ///< "torchtitan" or "megatron"
  std::vector<Setting> settings;  ///< in file order (the tool's defaults after); one per key
  /// Keys or flags read but not used: "metrics.log_freq", "--lr", each with ": why" where the
  /// reason is not that it is no job or layout option ("--num-layers: the model comes from
  /// --model").
  std::vector<std::string> ignored;
  /// How the reader resolved what the file leaves open or runs differently from pipetab: a -1
  /// degree, a default it applied, a flag it only approximates.
  std::vector<std::string> notes;
  /// The model the file names (torchtitan's [model] name and flavor, Megatron's --model-name),
  /// for messages only: the model pipetab simulates comes from --model.
  std::optional<std::string> model;
};

/// A torchtitan job TOML (torchtitan/config/job_config.py's JobConfig as its TOML files give it,
/// pytorch/torchtitan @238fa99, the last commit with TOML configs; older spellings too: the
/// degrees in [training] and [experimental], batch_size, [float8], converters = ["float8"],
/// [training] compile, pipeline_parallel_microbatches). `gpus`: the GPU count, needed when
/// data_parallel_shard_degree is -1 (the GPUs the other degrees leave) and checked against the
/// degrees' product otherwise. Throws ParseError naming the file, line, key and rule for invalid
/// TOML, a value of the wrong type or out of range, a contradiction torchtitan refuses (the
/// degrees' product, the microbatch size, the global batch, async TP without compile), an
/// unknown schedule, and what pipetab does not model (MXFP8, memory_budget checkpointing,
/// checkpointing every Nth block for N > 2).
JobFile parse_torchtitan_job(std::string_view text, const std::string& file,
                             std::optional<std::int64_t> gpus);

/// The flags a Megatron-LM launch script passes to pretrain_gpt.py (megatron/training/
/// arguments.py, NVIDIA/Megatron-LM @67f3515): any number of flags a line, `\` continuing a
/// line, `#` starting a comment, `--flag value`, `--flag=value` and quoted values. `gpus`: the
/// GPU count, which gives the data-parallel size (Megatron-LM derives it from the world size);
/// torchrun's --nproc_per_node and --nnodes in the file give it too. Unknown flags are ignored;
/// a flag missing its value, a value of the wrong type, a contradiction Megatron-LM refuses and
/// what pipetab does not model (MXFP8, the allgather and HybridEP dispatchers, a2a+p2p context
/// parallelism, recomputing some of a stage's layers) throw ParseError naming the file, line and
/// flag.
JobFile parse_megatron_args(std::string_view text, const std::string& file,
                            std::optional<std::int64_t> gpus);

/// A job file by path: a torchtitan TOML when the name ends in .toml or the first line that is
/// not blank or a comment opens a [table], else Megatron-LM arguments. Throws Error when the
/// file cannot be read, and what the reader throws.
JobFile read_job_file(const std::string& path, std::optional<std::int64_t> gpus);

/// The torchtitan job TOML that runs `job` with `layout` on `gpus` GPUs: its [training],
/// [parallelism], [activation_checkpoint], [compile] and, for FP8, [model] converters and
/// [quantize.linear.float8], preceded by `comment` as comment lines. parse_torchtitan_job reads
/// it back to the same values. Throws ParamError naming the value and the rule where torchtitan
/// cannot run it: Ulysses context parallelism, fp16 or tf32, Megatron's selective recomputation,
/// a pipetab-only schedule, virtual stages other than torchtitan's two without the model's
/// layers, a layout whose degrees do not multiply to `gpus`, and the like (docs/jobs.md).
std::string torchtitan_job_toml(const Job& job, const Layout& layout, std::int64_t gpus,
                                std::string_view comment);

/// The Megatron-LM arguments that run `job` with `layout` on `gpus` GPUs, one flag a line with `\`
/// continuations, preceded by `comment` as comment lines. parse_megatron_args reads them back
/// (with the same `gpus`) to the same values. Throws ParamError where Megatron-LM cannot run it:
/// a schedule other than 1F1B and interleaved 1F1B, torchtitan's recomputation policies, rowwise
/// FP8, HSDP, and the like (docs/jobs.md).
std::string megatron_arguments(const Job& job, const Layout& layout, std::int64_t gpus,
                               std::string_view comment);

}  // namespace pipetab::io
