// What a run's options say of the pipeline it runs beyond the table: the data-parallel replicas a
// GPU count leaves, and the microbatches a global batch takes. The command line (cli/options.cpp)
// and the Python API (python/src/core.cpp) resolve them here, so that a job file or --gpus gives
// the same run from either; each names its own inputs in the messages (--gpus and -M, or the
// Python keywords gpus and microbatches).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "pipetab/model/job.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/setting.hpp"

namespace pipetab {

/// Sets `layout.pp` to `devices` (the table's pipeline depth) and, with a GPU count, the
/// data-parallel replicas where no option gave them (`dp_given` false): GPUs / (PP × TP × CP),
/// which must divide evenly; where an option gave them, PP × TP × CP × DP must be the GPUs.
/// `gpus_name` names the count in messages. Throws ParamError.
void resolve_replicas(Layout& layout, std::int64_t devices, std::optional<std::int64_t> gpus,
                      bool dp_given, std::string_view gpus_name);

/// The schedule a job file's settings name: their `schedule`, or "1f1b" when they put the whole
/// model on one stage (pipeline_parallel 1, or none given: a single-stage run does each
/// microbatch's forward and backward in turn whatever the schedule, as Megatron-LM's
/// forward_backward_no_pipelining and plan's PP 1 do), else "" (the caller needs a name).
std::string job_schedule(std::span<const Setting> settings);

/// The microbatches of an iteration that `job`'s global batch takes: global_batch / (micro_batch
/// × DP), which must divide evenly; nullopt when the job states no global batch. `given`, the
/// caller's own microbatches (named `given_name` in messages), must agree where set. Throws
/// ParamError.
std::optional<std::int64_t> batch_microbatches(const Job& job, const Layout& layout,
                                               std::optional<std::int64_t> given,
                                               std::string_view given_name);

}  // namespace pipetab
