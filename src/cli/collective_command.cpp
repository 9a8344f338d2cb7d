// `pipetab collective`: one collective over a size sweep as the model prices it, in nccl-tests'
// columns (size, time, algbw, busbw), with the algorithm and protocol NCCL's choice gives — so a
// system file's links can be checked against an all_reduce_perf run of the same cluster.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "options.hpp"
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/parallel/collective.hpp"

namespace pipetab::cli {
namespace {

// nccl-tests' size syntax: bytes, or a number with K, M or G (powers of 1,024).
double parse_size(const std::string& text, const char* option) {
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double scale = 1.0;
  if (unit == "K" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "m") {
    scale = 1024.0 * 1024.0;
  } else if (unit == "G" || unit == "g") {
    scale = 1024.0 * 1024.0 * 1024.0;
  } else if (!unit.empty() || used == 0) {
    throw ParamError(fmt::format(
        "{} '{}': expected a size in bytes, or a number followed by K, M or G (e.g. 128M)", option,
        text));
  }
  const double bytes = value * scale;
  if (!(bytes >= 1.0) || !std::isfinite(bytes) || bytes > 1e15) {
    throw ParamError(
        fmt::format("{} '{}': expected a size from 1 byte to 1e15 bytes", option, text));
  }
  return std::floor(bytes);
}

// One size of the sweep as priced: NCCL's choice and its time, with nccl-tests' bandwidths
// (PERFORMANCE.md: algbw the size over the time, busbw what each rank's link carries, algbw ×
// the ring's steps / ranks).
struct Row {
  double bytes = 0.0, time_us = 0.0, algbw = 0.0, busbw = 0.0;
  Collective chosen;
};

}  // namespace

Subcommand add_collective(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "collective",
      "Time one NCCL collective over a size sweep as pipetab prices it, in nccl-tests' columns "
      "(size, time, algbw, busbw) with the algorithm and protocol chosen");
  struct State {
    std::string system = "dgx-a100", op = "all-reduce", min = "8", max = "128M", format = "text";
    std::int64_t ranks = 0, per_node = 0, gpus_per_process = 1;
    double factor = 2.0;
  };
  auto s = std::make_shared<State>();
  cmd->add_option("--system", s->system, "system preset or TOML file")->capture_default_str();
  cmd->add_option("--op", s->op, "the collective")
      ->check(CLI::IsMember({"all-reduce", "reduce-scatter", "all-gather", "all-to-all"}))
      ->capture_default_str();
  cmd->add_option("-n,--ranks", s->ranks, "GPUs in the group (default: one node's)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  cmd->add_option("--per-node", s->per_node,
                  "of them, GPUs on each node (default: as many as a node holds)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  cmd->add_option("-g,--gpus-per-process", s->gpus_per_process,
                  "GPUs one process drives, as nccl-tests' -g: each call pays a kernel launch per "
                  "GPU after the first (2.6 µs each); training runs one process per GPU")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("-b,--min-bytes", s->min, "the first size (bytes, or with K, M, G)")
      ->capture_default_str();
  cmd->add_option("-e,--max-bytes", s->max, "the last size (bytes, or with K, M, G)")
      ->capture_default_str();
  cmd->add_option("-f,--step-factor", s->factor, "each size this many times the one before")
      ->check(CLI::Range(1.01, 1024.0))
      ->capture_default_str();
  add_format(*cmd, s->format, {"text", "csv", "json"});
  return {
      cmd, [s] {
        const SystemConfig system = io::load_system(s->system);
        const double min = parse_size(s->min, "--min-bytes");
        const double max = parse_size(s->max, "--max-bytes");
        if (max < min) {
          throw ParamError(fmt::format("--max-bytes {} is below --min-bytes {}", s->max, s->min));
        }
        if (system.topology != Topology::Switched && s->ranks == 0)
          throw ParamError(
              fmt::format("system '{}' is a chain of links: give --ranks", system.name));
        const std::int64_t node = system.topology == Topology::Switched
                                      ? std::int64_t{system.devices_per_node}
                                      : std::int64_t{1} << 30;
        Collective c;
        c.kind = s->op == "all-reduce"       ? CollectiveKind::AllReduce
                 : s->op == "reduce-scatter" ? CollectiveKind::ReduceScatter
                 : s->op == "all-gather"     ? CollectiveKind::AllGather
                                             : CollectiveKind::AllToAll;
        // NCCL's all-to-all is grouped sends and receives to every peer at once (the MoE
        // dispatcher's), its size one rank's buffer as nccl-tests' alltoall_perf gives it.
        if (c.kind == CollectiveKind::AllToAll) c.algorithm = CollectiveAlgorithm::Direct;
        c.group.ranks = s->ranks > 0 ? s->ranks : node;
        c.group.per_node = s->per_node > 0 ? s->per_node : std::min(c.group.ranks, node);
        if (c.group.ranks < 2)
          throw ParamError(fmt::format(
              "a group of one rank moves nothing (system '{}' has {} GPU per node): give --ranks 2 "
              "or more",
              system.name, node));
        if (c.group.per_node > c.group.ranks || c.group.ranks % c.group.per_node != 0) {
          throw ParamError(
              fmt::format("--per-node {} must divide --ranks {} (a group is whole nodes' shares)",
                          c.group.per_node, c.group.ranks));
        }
        if (c.group.per_node > node) {
          throw ParamError(fmt::format("--per-node {}: a node of system '{}' holds {} GPUs",
                                       c.group.per_node, system.name, node));
        }
        const auto p = static_cast<double>(c.group.ranks);
        const double launches =
            static_cast<double>(std::min(s->gpus_per_process, c.group.per_node) - 1) *
            kNcclTestsLaunchPerGpuS;
        std::vector<Row> rows;
        // Each size at least a byte above the one before (a factor near 1 on a few bytes).
        for (double bytes = min; bytes <= max;
             bytes = std::max(bytes + 1.0, std::floor(bytes * s->factor))) {
          c.bytes = bytes;
          Row row;
          row.bytes = bytes;
          row.chosen = nccl_algorithm(c, system.intra, system.inter);
          const double seconds =
              collective_seconds(row.chosen, system.intra, system.inter) + launches;
          row.time_us = seconds * 1e6;
          row.algbw = bytes / seconds / 1e9;
          row.busbw = row.algbw * collective_steps(c.kind, p) / p;
          rows.push_back(row);
        }
        if (s->format == "json") {
          nlohmann::json out = nlohmann::json::array();
          for (const Row& r : rows) {
            out.push_back({{"bytes", r.bytes},
                           {"time_us", r.time_us},
                           {"algbw_gbs", r.algbw},
                           {"busbw_gbs", r.busbw},
                           {"algorithm", to_string(r.chosen.algorithm)},
                           {"protocol", to_string(r.chosen.protocol)}});
          }
          emit("", nlohmann::json{{"system", system.name},
                                  {"op", s->op},
                                  {"ranks", c.group.ranks},
                                  {"per_node", c.group.per_node},
                                  {"rows", std::move(out)}}
                           .dump(2) +
                       "\n");
          return;
        }
        const bool csv = s->format == "csv";
        std::string out =
            csv ? "bytes,time_us,algbw_gbs,busbw_gbs,algorithm,protocol\n"
                : fmt::format(
                      "{} over {} GPUs ({} per node) on {}{}\n{:>14} {:>12} {:>10} {:>10}  {}\n",
                      s->op, c.group.ranks, c.group.per_node, system.name,
                      system.intra.medium || c.kind == CollectiveKind::AllToAll
                          ? ""
                          : " (no link medium: plain ring, no NCCL protocols)",
                      "size (B)", "time (us)", "algbw", "busbw", "algorithm/protocol");
        for (const Row& r : rows) {
          const auto a = to_string(r.chosen.algorithm);
          const auto pr = to_string(r.chosen.protocol);
          out += csv ? fmt::format("{:.0f},{:.6g},{:.6g},{:.6g},{},{}\n", r.bytes, r.time_us,
                                   r.algbw, r.busbw, a, pr)
                     : fmt::format("{:>14.0f} {:>12.2f} {:>10.2f} {:>10.2f}  {}/{}\n", r.bytes,
                                   r.time_us, r.algbw, r.busbw, a, pr);
        }
        emit("", out);
      }};
}

}  // namespace pipetab::cli
