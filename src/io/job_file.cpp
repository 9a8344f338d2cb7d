// Job files in other tools' formats: choosing the reader, and what the torchtitan and Megatron-LM
// readers and writers (torchtitan_job.cpp, megatron_args.cpp) share.
#include "pipetab/io/job_file.hpp"

#include <cctype>
#include <cmath>

#include "job_file_common.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/io/table_file.hpp"

namespace pipetab::io {

namespace detail {

void check_written_layout(const Job& job, const Layout& layout, std::int64_t gpus,
                          std::string_view tool) {
  if (gpus < 1 || gpus > kMaxGpus)
    throw ParamError(fmt::format("{} job file: gpus = {} is not a GPU count", tool, gpus));
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"tensor_parallel", layout.tp},  {"pipeline_parallel", layout.pp},
      {"context_parallel", layout.cp}, {"data_parallel", layout.dp},
      {"expert_parallel", layout.ep},  {"expert_tensor_parallel", layout.etp}};
  for (const auto& [name, v] : sizes) {
    if (v < 1 || v > (1 << 20))
      throw ParamError(
          fmt::format("{} job file: {} = {} is not a size (1..{})", tool, name, v, 1 << 20));
  }
  const double product = static_cast<double>(layout.tp) * static_cast<double>(layout.pp) *
                         static_cast<double>(layout.cp) * static_cast<double>(layout.dp);
  if (product != static_cast<double>(gpus)) {
    throw ParamError(fmt::format(
        "{} job file: tensor_parallel {} × pipeline_parallel {} × context_parallel {} × "
        "data_parallel {} = {:.0f} GPUs, not the {} given",
        tool, layout.tp, layout.pp, layout.cp, layout.dp, product, gpus));
  }
  if (job.seq_len < 1)
    throw ParamError(fmt::format("{} job file: seq_len is not given (the file needs it)", tool));
  if (job.micro_batch < 1 || job.micro_batch > (std::int64_t{1} << 30))
    throw ParamError(
        fmt::format("{} job file: micro_batch = {} is not a batch", tool, job.micro_batch));
  if (job.global_batch > (std::int64_t{1} << 40) || job.seq_len > (std::int64_t{1} << 30))
    throw ParamError(fmt::format("{} job file: global_batch {} or seq_len {} is out of range", tool,
                                 job.global_batch, job.seq_len));
  // pipetab's 0 leaves the batch to the command's microbatches; the tool's file has to state it.
  if (job.global_batch < 1) {
    throw ParamError(fmt::format(
        "{} job file: global_batch = 0 leaves the batch to the command's microbatches; the file "
        "states it: set global_batch",
        tool));
  }
  if (job.global_batch % (job.micro_batch * layout.dp) != 0) {
    throw ParamError(fmt::format(
        "{} job file: global_batch {} is not a multiple of micro_batch {} × data_parallel {}", tool,
        job.global_batch, job.micro_batch, layout.dp));
  }
}

}  // namespace detail

JobFile read_job_file(const std::string& path, std::optional<std::int64_t> gpus) {
  const std::string text = read_file(path);
  const bool toml_name = path.size() >= 5 && (path.ends_with(".toml") || path.ends_with(".TOML"));
  bool opens_table = false;
  // By content otherwise: a TOML job opens with a [table] (after comments); Megatron-LM's
  // arguments with a flag.
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    const auto first = line.find_first_not_of(" \t\r\xEF\xBB\xBF");
    if (first != std::string_view::npos && line[first] != '#') {
      opens_table = line[first] == '[';
      break;
    }
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return toml_name || opens_table ? parse_torchtitan_job(text, path, gpus)
                                  : parse_megatron_args(text, path, gpus);
}

}  // namespace pipetab::io
