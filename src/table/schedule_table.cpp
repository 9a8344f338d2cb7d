#include "pipetab/table/schedule_table.hpp"

#include <numeric>

namespace pipetab {

std::vector<std::int32_t> ScheduleTable::stage_units() const {
  if (!stage_layers.empty()) return stage_layers;
  return std::vector<std::int32_t>(
      static_cast<std::size_t>(placement.pipelines) * static_cast<std::size_t>(stages), 1);
}

std::int64_t ScheduleTable::model_units() const noexcept {
  if (stage_layers.empty()) return stages;
  return std::accumulate(stage_layers.begin(), stage_layers.begin() + stages, std::int64_t{0});
}

std::vector<double> ScheduleTable::stage_shares() const {
  const auto units = stage_units();
  const double scale = static_cast<double>(devices) / static_cast<double>(model_units());
  std::vector<double> shares(units.size());
  for (std::size_t i = 0; i < units.size(); ++i)
    shares[i] = static_cast<double>(units[i]) * scale;
  return shares;
}

bool ScheduleTable::same_schedule(const ScheduleTable& other) const noexcept {
  return devices == other.devices && stages == other.stages && microbatches == other.microbatches &&
         placement == other.placement && pipeline_of == other.pipeline_of &&
         stage_layers == other.stage_layers && row_begin == other.row_begin && ops == other.ops &&
         comms == other.comms;
}

TableBuilder::TableBuilder(int devices, int stages, int microbatches,
                           std::vector<std::int32_t> device_of_stage, std::int64_t expected_ops)
    : TableBuilder(devices, stages, microbatches, 1, std::move(device_of_stage),
                   std::vector<std::uint8_t>(static_cast<std::size_t>(microbatches), 0),
                   expected_ops) {}

TableBuilder::TableBuilder(int devices, int stages, int microbatches, int pipelines,
                           std::vector<std::int32_t> placement,
                           std::vector<std::uint8_t> pipeline_of, std::int64_t expected_ops) {
  table_.devices = devices;
  table_.stages = stages;
  table_.microbatches = microbatches;
  table_.placement = Placement{pipelines, stages, std::move(placement)};
  table_.pipeline_of = std::move(pipeline_of);
  table_.row_begin.reserve(static_cast<std::size_t>(devices) + 1);
  table_.ops.reserve(static_cast<std::size_t>(expected_ops));
}

ScheduleTable TableBuilder::finish() && {
  return std::move(table_);
}

}  // namespace pipetab
