#include "placement_inference.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab::io::detail {

namespace {

// Microbatches that place their stages differently run in different pipelines (model
// replicas, as in Chimera). A mistyped cell looks the same, so the inference is accepted only
// in the shape real multi-pipeline schedules have: every pipeline spans every device, and all
// carry the same number of microbatches. Otherwise the first cell of the odd pipeline that
// differs from pipeline 0 is reported.
void check_pipelines(const Cells& cells, const std::vector<std::vector<std::int32_t>>& maps,
                     const std::vector<std::uint8_t>& pipeline_of,
                     const std::vector<std::int32_t>& first_cell, std::size_t stages,
                     const std::string& file) {
  std::vector<std::int64_t> count(maps.size(), 0);
  for (const auto p : pipeline_of)
    ++count[p];
  std::size_t odd = maps.size();
  for (std::size_t p = 0; p < maps.size() && odd == maps.size(); ++p) {
    std::vector<bool> used(static_cast<std::size_t>(cells.rows), false);
    for (const auto d : maps[p]) {
      if (d >= 0) used[static_cast<std::size_t>(d)] = true;
    }
    if (count[p] != count[0] || std::find(used.begin(), used.end(), false) != used.end()) odd = p;
  }
  if (odd == maps.size()) return;
  if (odd == 0) odd = 1;
  const auto m = static_cast<std::size_t>(std::find(pipeline_of.begin(), pipeline_of.end(), odd) -
                                          pipeline_of.begin());
  const auto m0 = static_cast<std::size_t>(std::find(pipeline_of.begin(), pipeline_of.end(), 0) -
                                           pipeline_of.begin());
  for (std::size_t s = 0; s < stages; ++s) {
    if (maps[odd][s] == maps[0][s] || first_cell[m * stages + s] < 0 ||
        first_cell[m0 * stages + s] < 0)
      continue;
    const auto& here = cells.where[static_cast<std::size_t>(first_cell[m * stages + s])];
    const auto& there = cells.where[static_cast<std::size_t>(first_cell[m0 * stages + s])];
    throw ParseError(
        file, here.line, here.column,
        fmt::format(
            "microbatch {} runs stage {} on device {}, but microbatch {} runs it on device {} "
            "(line {}, column {}); differently placed microbatches form separate pipelines "
            "only if every pipeline spans every device and all hold as many microbatches",
            m, s, maps[odd][s], m0, maps[0][s], there.line, there.column));
  }
}

}  // namespace

ScheduleTable infer_table(Cells cells, const std::string& file) {
  if (cells.ops.empty()) throw Error(fmt::format("{}: the table has no ops", file));
  std::int64_t stages = 0, microbatches = 0;
  for (const Op& op : cells.ops) {
    for (const Pass& pass : op.passes()) {
      stages = std::max<std::int64_t>(stages, pass.stage + 1);
      microbatches = std::max<std::int64_t>(microbatches, pass.microbatch + 1);
    }
  }
  // A complete table holds two passes per (microbatch, stage) and an op at most two passes;
  // checked before anything is sized by microbatches × stages.
  if (microbatches * stages > static_cast<std::int64_t>(cells.ops.size())) {
    throw Error(fmt::format(
        "{}: the cells name microbatches 0..{} and stages 0..{} but hold only {} ops; every "
        "microbatch needs a forward and a backward on every stage",
        file, microbatches - 1, stages - 1, cells.ops.size()));
  }
  const auto N = static_cast<std::size_t>(stages);
  const auto M = static_cast<std::size_t>(microbatches);

  // Where each (microbatch, stage) runs, and the first cell that says so.
  std::vector<std::int32_t> device_of(M * N, -1);
  std::vector<std::int32_t> first_cell(M * N, -1);
  for (std::size_t i = 0; i < cells.ops.size(); ++i) {
    for (const Pass& pass : cells.ops[i].passes()) {
      const auto key = static_cast<std::size_t>(pass.microbatch) * N + pass.stage;
      if (device_of[key] < 0) {
        device_of[key] = cells.device[i];
        first_cell[key] = static_cast<std::int32_t>(i);
      } else if (device_of[key] != cells.device[i]) {
        const auto& here = cells.where[i];
        const auto& there = cells.where[static_cast<std::size_t>(first_cell[key])];
        throw ParseError(
            file, here.line, here.column,
            fmt::format("{} is on device {}, but microbatch {} ran stage {} on device {} "
                        "(line {}, column {}); a stage of a microbatch runs on one device",
                        to_string(pass), cells.device[i], pass.microbatch, pass.stage,
                        device_of[key], there.line, there.column));
      }
    }
  }

  // Group microbatches by their stage → device maps.
  std::vector<std::vector<std::int32_t>> maps;
  std::vector<std::uint8_t> pipeline_of(M);
  for (std::size_t m = 0; m < M; ++m) {
    const auto* mine = device_of.data() + m * N;
    std::size_t p = 0;
    for (; p < maps.size(); ++p) {
      bool compatible = true;
      for (std::size_t s = 0; s < N && compatible; ++s) {
        compatible = mine[s] < 0 || maps[p][s] < 0 || mine[s] == maps[p][s];
      }
      if (compatible) break;
    }
    if (p == maps.size()) {
      if (maps.size() >= static_cast<std::size_t>(kMaxPipelines)) {
        throw Error(
            fmt::format("{}: the placement differs between more than {} groups of microbatches",
                        file, kMaxPipelines));
      }
      maps.emplace_back(N, -1);
    }
    for (std::size_t s = 0; s < N; ++s) {
      if (maps[p][s] < 0) maps[p][s] = mine[s];
    }
    pipeline_of[m] = static_cast<std::uint8_t>(p);
  }

  if (maps.size() > 1) check_pipelines(cells, maps, pipeline_of, first_cell, N, file);

  ScheduleTable table;
  table.devices = cells.rows;
  table.stages = static_cast<std::int32_t>(stages);
  table.microbatches = static_cast<std::int32_t>(microbatches);
  table.placement.pipelines = static_cast<std::int32_t>(maps.size());
  table.placement.stages = table.stages;
  for (std::size_t p = 0; p < maps.size(); ++p) {
    for (std::size_t s = 0; s < N; ++s) {
      if (maps[p][s] < 0) {
        throw Error(
            fmt::format("{}: stage {}{} appears in no cell, so its device is unknown", file, s,
                        maps.size() > 1 ? fmt::format(" of pipeline {}", p) : std::string()));
      }
    }
    table.placement.device.insert(table.placement.device.end(), maps[p].begin(), maps[p].end());
  }
  table.pipeline_of = std::move(pipeline_of);
  table.row_begin.assign(static_cast<std::size_t>(cells.rows) + 1, 0);
  for (const auto d : cells.device)
    ++table.row_begin[static_cast<std::size_t>(d) + 1];
  for (std::size_t d = 0; d < static_cast<std::size_t>(cells.rows); ++d)
    table.row_begin[d + 1] += table.row_begin[d];
  table.ops = std::move(cells.ops);  // cells come row by row, so already grouped by device
  table.slots = std::move(cells.slot);
  if (!cells.comms.empty()) {
    // A compute+comms list has no idle slots: its cells' columns are list positions, not time.
    table.slots.clear();
    table.comms.actions = std::move(cells.comms);
    table.comms.row_begin.assign(static_cast<std::size_t>(cells.rows) + 1, 0);
    for (const auto d : cells.comm_device)
      ++table.comms.row_begin[static_cast<std::size_t>(d) + 1];
    for (std::size_t d = 0; d < static_cast<std::size_t>(cells.rows); ++d)
      table.comms.row_begin[d + 1] += table.comms.row_begin[d];
  }
  return table;
}

}  // namespace pipetab::io::detail
