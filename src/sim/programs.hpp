// The programs of ops that communicate inside themselves (ExecGraph::steps), before their
// transfers exist. The experts' all-to-alls (reference modern-runs.md §C.3: a flow over the
// rank's node links and one over its NIC, parallel/collective.hpp) and the context-parallel
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
  std::uint8_t pass = 0;  ///< which of its op's passes it is of (0 or 1)
};

/// A step of an op's program: compute, or issue / wait for the program's `exchange`-th exchange.
/// An Issue of kNextGather issues the device's next op's first FSDP gather (a graph transfer).
struct PlannedStep {
  StepKind kind = StepKind::Compute;
  std::int32_t exchange = -1;
  double seconds = 0.0;
  std::uint8_t pass = 0;  ///< Compute: which of the op's passes computes (Piece::pass)
};
inline constexpr std::int32_t kNextGather = -2;

struct OpProgram {
  std::vector<PlannedStep> steps;
  std::vector<cost::Exchange> exchanges;
  /// per exchange, the exchange that must end before it moves (-1: none; one collective stream)
  std::vector<std::int32_t> after;
  /// `after` waits for the whole exchange before (one stream whose kernels each move all of an
  /// exchange's flows: DeepEP's and Megatron-Core's all-to-all stream), not only for its flow
  /// on the same link (FSDP's reduce-scatters, one NCCL call per group).
  bool whole_after = false;
  /// Two passes' pieces in turn (op_program with a `b`): each one's exchanges run beside the
  /// other's compute, DeepEP's all-to-alls at DeviceSpec::overlapped_deepep_efficiency of their
  /// rate.
  bool paired = false;
};

/// How an op interleaves two passes' pieces.
enum class PairOrder : std::uint8_t {
  /// The forward's piece first, each pass's exchanges free to move at once (DualPipe's F&B
  /// chunks, DeepSeek-V3 §3.2.1, Fig. 4).
  ForwardFirst,
  /// Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): per layer the host
  /// issues the backward's combine, the forward's attention, the backward's experts, the
  /// forward's dispatch, the backward's dispatch, the forward's experts, the forward's combine,
  /// the backward's attention (TransformerLayerSchedulePlan.run, models/common/model_chunk_
  /// schedule_plan.py @b0cc270 and @d728871): the backward's piece first, and every all-to-all on
  /// one communication stream in that order.
  Megatron,
};

/// One pass of a stage as pieces: its compute outside the layers with exchanges first, then each
/// such layer's program, in model order; one piece without an exchange when it has none.
std::vector<Piece> pass_pieces(const cost::StageCost& stage, PassKind kind);

/// One pass's pieces in order, or two passes' (a forward `a` and a backward `b` of other
/// microbatches) in turn as `order` says: each one's exchange moves while the other computes,
/// one compute stream and at most one exchange of each pass in flight.
OpProgram op_program(const std::vector<Piece>& a, const std::vector<Piece>& b = {},
                     PairOrder order = PairOrder::ForwardFirst);

/// One pass of a stage as its blocks (transformer layers) in the order the pass runs them (a
/// backward from the last): each block's pieces, its layer's program where it has one, with the
/// compute outside those programs (embedding, head and loss, layers without exchanges) spread
/// evenly over the blocks, as FSDP's per-block units split the stage's parameters evenly.
std::vector<std::vector<Piece>> block_pieces(const cost::StageCost& stage, PassKind kind,
                                             std::int64_t blocks);

/// A pass run block by block under FSDP without pipelining (reference modern-runs.md §C.1,
/// FSDP2's per-block units): each block's `gather` (when the pass gathers) issued as the block
/// before it starts and waited before it runs, then copied out of its buffer for `copy_out`
/// seconds (one unit ahead, one all-gather stream); each
/// block's `scatter` (when it reduce-scatters) issued after its compute, after the one before it
/// (one reduce-scatter stream), all waited at the end (FSDP2's post-backward callback). The first
/// block's gather and the last block's reduce-scatter are the graph's, outside the op; the next
/// op's first gather is issued as the last block starts (kNextGather).
OpProgram fsdp_program(const std::vector<std::vector<Piece>>& blocks,
                       const std::optional<cost::Exchange>& gather,
                       const std::optional<cost::Exchange>& scatter, double copy_out = 0.0);

/// Seconds an exchange takes alone on its links: each flow's latency, then its bytes at the link's
/// collective bandwidth times `share` (overlapped_deepep_share); the longer of its flows.
double alone_seconds(const cost::Exchange& exchange, const SystemConfig& system,
                     double share = 1.0);

/// The share of its rate exchange `x` of `program` moves at: `overlapped` (the device's
/// overlapped_deepep_efficiency, 1 without overheads) for DeepEP's all-to-all in a paired
/// program, else 1.
double overlapped_deepep_share(const OpProgram& program, const cost::Exchange& x,
                               double overlapped);

/// How long a program waits with every exchange alone on its links: a lower bound of its waits.
/// `overlapped`: as overlapped_deepep_share takes it.
double shortest_waits(const OpProgram& program, const SystemConfig& system,
                      double overlapped = 1.0);

/// The same for one pass, in closed form (each exchange waits for what it takes beyond the
/// compute beside it): pass_pieces's program without building it.
double pass_waits(const cost::StageCost& stage, PassKind kind, const SystemConfig& system);

}  // namespace pipetab::detail
