// A pipeline schedule as a table: for each device, the ordered list of ops it executes
// (docs/design.md §3). The order is the schedule; time slots are derived from it by the idealized
// timing (timing.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/op.hpp"

namespace pipetab {

/// Size limits. Tables beyond them are rejected before anything is allocated, so that no index
/// or counter can overflow (stage ids are 16-bit, op indices 32-bit in derived arrays).
inline constexpr std::int64_t kMaxDevices = 65535;
inline constexpr std::int64_t kMaxStages = 65535;
inline constexpr std::int64_t kMaxMicrobatches = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxPipelines = 255;
inline constexpr std::int64_t kMaxOps = std::int64_t{1} << 28;

/// (pipeline, stage) → device. A single-pipeline schedule has one pipeline; Chimera-style
/// schedules run two pipelines over two replicas of the model, and each microbatch belongs to
/// exactly one of them.
struct Placement {
  std::int32_t pipelines = 1;
  std::int32_t stages = 0;
  std::vector<std::int32_t> device;  ///< [pipeline * stages + stage]

  std::int32_t device_of(int pipeline, int stage) const noexcept {
    return device[static_cast<std::size_t>(pipeline) * static_cast<std::size_t>(stages) +
                  static_cast<std::size_t>(stage)];
  }
  friend bool operator==(const Placement&, const Placement&) = default;
};

/// The schedule table. Rows are stored flat (compressed rows): the ops of device `d` are
/// `ops[row_begin[d] .. row_begin[d+1])`.
struct ScheduleTable {
  std::int32_t devices = 0;
  std::int32_t stages = 0;  ///< stages per pipeline (v·S for chunked schedules)
  std::int32_t microbatches = 0;
  Placement placement;
  std::vector<std::uint8_t> pipeline_of;  ///< pipeline of each microbatch
  /// Relative size of each stage ([pipeline * stages + stage], e.g. its layer count); empty
  /// means all stages are equal. Every pipeline must sum to the same total (same model).
  std::vector<std::int32_t> stage_layers;
  std::vector<std::int64_t> row_begin{0};  ///< devices + 1 entries
  std::vector<Op> ops;
  /// Optional explicit time-slot column of each op, kept from a grid file (its idle cells are
  /// information for round trips, not for execution). Empty for generated tables.
  std::vector<std::int32_t> slots;
  /// Optional communication order (a runtime's sends, receives and FSDP actions among the ops),
  /// kept from a compute+comms file. Empty for compute-only tables.
  CommOrder comms;

  std::int32_t pipelines() const noexcept { return placement.pipelines; }
  std::span<const Op> row(int device) const noexcept {
    const auto b = row_begin[static_cast<std::size_t>(device)];
    const auto e = row_begin[static_cast<std::size_t>(device) + 1];
    return {ops.data() + b, static_cast<std::size_t>(e - b)};
  }
  std::int32_t pipeline_of_microbatch(std::int32_t microbatch) const noexcept {
    return pipeline_of[static_cast<std::size_t>(microbatch)];
  }
  /// The device a pass runs on according to the placement.
  std::int32_t device_of(const Pass& pass) const noexcept {
    return placement.device_of(pipeline_of_microbatch(pass.microbatch), pass.stage);
  }
  /// Relative size of every stage ([pipeline * stages + stage]): `stage_layers`, or all 1.
  std::vector<std::int32_t> stage_units() const;
  /// Units of one whole pipeline (the model); the same for every pipeline of a valid table.
  std::int64_t model_units() const noexcept;
  /// Size of every stage in device shares (L/S layers): 1 for one stage per device, 1/v for a
  /// chunk of an interleaved schedule. Per-kind costs and activation sizes scale by it.
  std::vector<double> stage_shares() const;
  /// Equal schedules: same sizes, placement, pipelines, stage sizes, per-device orders and
  /// communication orders. Explicit slots are presentation and are not compared.
  bool same_schedule(const ScheduleTable& other) const noexcept;
};

/// Builds a table row by row. Generators append each device's ops in order, then call
/// `end_row()`; `finish()` returns the table.
class TableBuilder {
 public:
  /// Starts a table with a single pipeline whose placement is `device_of_stage`, every
  /// microbatch in it. `expected_ops` reserves storage.
  TableBuilder(int devices, int stages, int microbatches, std::vector<std::int32_t> device_of_stage,
               std::int64_t expected_ops);
  /// Starts a table with several pipelines: `placement` as in Placement::device,
  /// `pipeline_of` the pipeline of each microbatch.
  TableBuilder(int devices, int stages, int microbatches, int pipelines,
               std::vector<std::int32_t> placement, std::vector<std::uint8_t> pipeline_of,
               std::int64_t expected_ops);

  void push(PassKind kind, std::int32_t microbatch, int stage) {
    table_.ops.push_back(Op::make(kind, microbatch, stage));
  }
  void push(const Op& op) { table_.ops.push_back(op); }
  void end_row() { table_.row_begin.push_back(static_cast<std::int64_t>(table_.ops.size())); }
  void set_stage_layers(std::vector<std::int32_t> layers) {
    table_.stage_layers = std::move(layers);
  }
  ScheduleTable finish() &&;

 private:
  ScheduleTable table_;
};

}  // namespace pipetab
