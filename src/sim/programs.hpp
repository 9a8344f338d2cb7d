// The programs of ops that communicate inside themselves (ExecGraph::steps), before their
// transfers exist. The experts' all-to-alls (reference modern-runs.md §C.3: a flow over the
// rank's node links and one over its NIC, cost::expert_all_to_all_flows) and the context-parallel
// exchanges (§C.2: one flow on the CP group's links) are issued inside the op that runs them and
// waited where their output is needed, so that they share the links with pipeline, FSDP and
// data-parallel traffic and slow the compute beside them (DeviceSpec::comm_slowdown). An op's
// program is its passes' pieces — compute, then an exchange with the compute that runs beside it
// (the shared expert, the attention the ring hides under) — layer after layer.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/table/op.hpp"

namespace pipetab::detail {

/// Compute, then (optionally) an exchange issued with `beside` seconds of compute while it moves.
struct Piece {
  double before = 0.0;
  std::optional<cost::Exchange> exchange;
  double beside = 0.0;
};

/// A step of an op's program: compute, or issue / wait for the program's `exchange`-th exchange.
struct PlannedStep {
  StepKind kind = StepKind::Compute;
  std::int32_t exchange = -1;
  double seconds = 0.0;
};

struct OpProgram {
  std::vector<PlannedStep> steps;
  std::vector<cost::Exchange> exchanges;
};

/// One pass of a stage as pieces: its compute outside the layers with exchanges first, then each
/// such layer's program, in model order; one piece without an exchange when it has none.
std::vector<Piece> pass_pieces(const cost::StageCost& stage, PassKind kind);

/// One pass's pieces in order, or two passes' (a forward and a backward of other microbatches)
/// in turn: each one's exchange moves while the other computes, one compute stream and one
/// exchange of each in flight (DualPipe's overlapped F&B chunks, DeepSeek-V3 §3.2.1, Fig. 4;
/// Megatron-Core's combined 1F1B).
OpProgram op_program(const std::vector<Piece>& a, const std::vector<Piece>& b = {});

/// Seconds an exchange takes alone on its links: each flow's latency, then its bytes at the link's
/// collective bandwidth; the longer of its flows.
double alone_seconds(const cost::Exchange& exchange, const SystemConfig& system);

/// How long a program waits with every exchange alone on its links: a lower bound of its waits.
double shortest_waits(const OpProgram& program, const SystemConfig& system);

/// The same for one pass, in closed form (each exchange waits for what it takes beyond the
/// compute beside it): pass_pieces's program without building it.
double pass_waits(const cost::StageCost& stage, PassKind kind, const SystemConfig& system);

}  // namespace pipetab::detail
