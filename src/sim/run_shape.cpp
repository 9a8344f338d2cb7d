#include "pipetab/sim/run_shape.hpp"

#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {

void resolve_replicas(Layout& layout, std::int64_t devices, std::optional<std::int64_t> gpus,
                      bool dp_given, std::string_view gpus_name) {
  layout.pp = devices;
  // A depth below 1 is the table's to refuse (and would divide by zero here).
  if (!gpus || devices < 1) return;
  const std::int64_t per_replica = layout.pp * layout.tp * layout.cp;
  if (!dp_given) {
    if (*gpus % per_replica != 0) {
      throw ParamError(fmt::format(
          "{} {}: the data-parallel replicas are GPUs / (PP {} × TP {} × CP {}) = {} / {}, "
          "which does not divide evenly",
          gpus_name, *gpus, layout.pp, layout.tp, layout.cp, *gpus, per_replica));
    }
    layout.dp = *gpus / per_replica;
  } else if (per_replica * layout.dp != *gpus) {
    throw ParamError(fmt::format("{} {}: the layout runs PP {} × TP {} × CP {} × DP {} = {} GPUs",
                                 gpus_name, *gpus, layout.pp, layout.tp, layout.cp, layout.dp,
                                 per_replica * layout.dp));
  }
}

std::optional<std::int64_t> batch_microbatches(const Job& job, const Layout& layout,
                                               std::optional<std::int64_t> given,
                                               std::string_view given_name) {
  const std::int64_t batch = job.global_batch;
  if (batch <= 0) return std::nullopt;
  const std::int64_t per_step = job.micro_batch * layout.dp;
  if (batch % per_step != 0) {
    throw ParamError(fmt::format(
        "global batch {}: not a multiple of the micro batch {} × DP {} = {} sequences a step of "
        "the pipeline takes",
        batch, job.micro_batch, layout.dp, per_step));
  }
  if (given && *given * per_step != batch) {
    throw ParamError(fmt::format(
        "{} {} and global batch {}: {} × micro batch {} × DP {} = {} sequences, not {}", given_name,
        *given, batch, given_name, job.micro_batch, layout.dp, *given * per_step, batch));
  }
  return batch / per_step;
}

std::string job_schedule(std::span<const Setting> settings) {
  std::string schedule, stages = "1";
  for (const auto& s : settings) {
    if (s.key == "schedule") schedule = s.value;
    if (s.key == "pipeline_parallel") stages = s.value;
  }
  if (schedule.empty() && stages == "1") return "1f1b";
  return schedule;
}

}  // namespace pipetab
