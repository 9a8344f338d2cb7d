#include <algorithm>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/model/workload.hpp"

namespace pipetab {
namespace {

// A pipeline layout's count per stage, which must name every stage of the table.
const std::vector<std::int64_t>& layout_counts(const std::vector<std::int64_t>& counts,
                                               std::size_t stages) {
  if (counts.size() != stages) {
    throw ParamError(fmt::format(
        "model: the pipeline layout names {} stages, and the schedule's table has {} (v·S per "
        "pipeline)",
        counts.size(), stages));
  }
  return counts;
}

}  // namespace

std::vector<std::int64_t> partition_layers(const TransformerConfig& m, const Layout& layout,
                                           std::span<const std::int32_t> units) {
  const auto n = units.size();
  if (!layout.pipeline_layout.empty()) {
    // Both decide the stages' sizes; the layout once won silently over the table's.
    if (std::adjacent_find(units.begin(), units.end(), std::not_equal_to<>()) != units.end()) {
      throw ParamError(
          "model: --pipeline-layout gives each stage's layers, and the schedule's table sizes "
          "its stages unequally (chimera-asym's --split, or a table file's stage sizes): give "
          "one of the two");
    }
    return layout_counts(
        parse_pipeline_layout(layout.pipeline_layout, m.layers, m.mtp_layers).layers, n);
  }
  const bool balance = layout.balance_embedding;
  const std::int64_t extra = balance ? 2 : 0;
  const std::int64_t slots = m.layers + extra;
  const double total_units = std::accumulate(units.begin(), units.end(), 0.0);
  std::vector<std::int64_t> layers(n);
  std::vector<std::pair<double, std::size_t>> remainder(n);
  std::int64_t given = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const double ideal = static_cast<double>(slots) * units[s] / total_units;
    layers[s] = static_cast<std::int64_t>(ideal);
    given += layers[s];
    remainder[s] = {ideal - static_cast<double>(layers[s]), s};
  }
  // Largest remainders first; ties to the earlier stage, so the split is deterministic.
  std::stable_sort(remainder.begin(), remainder.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (std::size_t k = 0; given < slots; ++k, ++given)
    ++layers[remainder[k % n].second];
  if (balance) {
    --layers.front();
    --layers.back();
  }
  for (std::size_t s = 0; s < n; ++s) {
    const bool carries_embedding_or_output = balance && (s == 0 || s + 1 == n);
    if (layers[s] < (carries_embedding_or_output ? 0 : 1)) {
      throw ParamError(fmt::format(
          "model: {} layers cannot fill {} stages{}: stage {} would hold {} layers", m.layers, n,
          balance ? " (embedding and output balanced)" : "", s, layers[s]));
    }
  }
  return layers;
}

std::vector<std::int64_t> partition_mtp_layers(const TransformerConfig& m, const Layout& layout,
                                               std::size_t stages) {
  if (!layout.pipeline_layout.empty()) {
    return layout_counts(
        parse_pipeline_layout(layout.pipeline_layout, m.layers, m.mtp_layers).mtp_layers, stages);
  }
  std::vector<std::int64_t> mtp(stages, 0);
  if (stages > 0) mtp.back() = m.mtp_layers;
  return mtp;
}

}  // namespace pipetab
