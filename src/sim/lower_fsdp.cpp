// FSDP per unit and per block (lowering.hpp's Lowering; reference modern-runs.md §C.1): a unit's
// gathered and reduce-scattered bytes and FSDP2's copies, what each op does (its roles), the
// gathers and reduce-scatters around the ops, and an op's program when it runs block by block.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "lowering.hpp"
#include "programs.hpp"

#include "pipetab/parallel/collective.hpp"

namespace pipetab::detail {

// Bytes of a unit's parameters as all-gathered: the 16-bit weights, or one byte each with the
// Float8 all-gather.
double Lowering::gather_bytes(const StageWork& w) const {
  const auto* m = model_.transformer();
  const double params = m ? w.params - w.expert_params : w.weight_bytes / 2.0;
  return params * gathered_bytes_per_param() / units(w) * options_.collective_scale;
}
double Lowering::gathered_bytes_per_param() const {
  const auto* m = model_.transformer();
  return layout_.fsdp.fp8_all_gather ? 1.0 : (m ? static_cast<double>(job_.element_bytes()) : 2.0);
}
// FSDP2 copies a gathered unit out of the all-gather's buffer into its parameters on the
// compute stream once the gather is in (foreach_all_gather_copy_out's split_with_sizes_copy,
// torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): the unit's gathered bytes read and
// written once.
double Lowering::copy_out_seconds(const StageWork& w) const {
  if (layout_.fsdp.impl != FsdpImpl::Fsdp2) return 0.0;  // FSDP1, Megatron-FSDP gather in place
  const double params = model_.transformer() ? w.params : w.weight_bytes / 2.0;
  return cost::copy_seconds(2.0 * params * gathered_bytes_per_param() / units(w),
                            network_.system().device);
}
// And a unit's 16-bit gradients into the reduce-scatter's input in the reduce dtype, on the
// reduce-scatter stream before the collective (foreach_reduce_scatter_copy_in's
// torch._chunk_cat), which it delays: the reduce-scatter's latency carries it.
double Lowering::copy_in_seconds(const StageWork& w) const {
  const auto* m = model_.transformer();
  if (m == nullptr || layout_.fsdp.impl != FsdpImpl::Fsdp2) return 0.0;
  const double bytes = w.params * static_cast<double>(job_.element_bytes()) + w.grad_bytes;
  return cost::copy_seconds(bytes / units(w), network_.system().device);
}
// The routed experts' share of a unit's parameters or gradients, gathered and scattered over
// their own ranks (EDP); 0 without experts.
double Lowering::expert_share(const StageWork& w) const {
  return w.params > 0 ? w.expert_params / w.params : 0.0;
}
double Lowering::expert_gather_bytes(const StageWork& w) const {
  return w.expert_params * gathered_bytes_per_param() / units(w) * options_.collective_scale;
}
// One unit's collective of the routed experts over their shard group (their EDP group, or
// with HSDP its first EDP / R ranks) after `after` (-1: none to run).
std::int32_t Lowering::expert_collective(TransferKind kind, int stage, std::int32_t device,
                                         double bytes, std::int32_t after) {
  if (expert_shard_ranks() <= 1 || bytes <= 0.0) return after;
  const CollectiveKind what = kind == TransferKind::FsdpAllGather ? CollectiveKind::AllGather
                                                                  : CollectiveKind::ReduceScatter;
  return collective_side(kind, stage, device,
                         nccl_collective(what, group(device, CollectiveGroup::ExpertShard), bytes),
                         after);
}
// Bytes of a unit's gradients as reduce-scattered (grad_bytes_per_param: torchtitan reduces in
// fp32 by default, MixedPrecisionPolicy(reduce_dtype=float32)).
double Lowering::scatter_bytes(const StageWork& w) const {
  return w.grad_bytes * (1.0 - expert_share(w)) / units(w) * options_.collective_scale;
}
double Lowering::expert_scatter_bytes(const StageWork& w) const {
  return w.grad_bytes * expert_share(w) / units(w) * options_.collective_scale;
}

// The reduce-scatter of one unit's gradients (the whole stage's when pipelined, the last
// block's without) on the shard group, after `after`, and after the device's previous one (one
// reduce-scatter stream). Returns its last step.
std::int32_t Lowering::fsdp_reduce_scatter(int stage, std::int32_t device, std::int32_t after) {
  const auto& w = work_[index(0, stage)];
  auto& previous = last_scatter_[static_cast<std::size_t>(device)];
  const auto scatter =
      collective_side(TransferKind::FsdpReduceScatter, stage, device,
                      nccl_collective(CollectiveKind::ReduceScatter,
                                      group(device, CollectiveGroup::FsdpShard), scatter_bytes(w)),
                      after);
  g_.latency_s[static_cast<std::size_t>(scatter - g_.compute_nodes)] += copy_in_seconds(w);
  if (previous >= 0) edge(previous, scatter);
  previous = expert_collective(TransferKind::FsdpReduceScatter, stage, device,
                               expert_scatter_bytes(w), scatter);
  return previous;
}

void Lowering::fsdp_roles() {
  const bool reshard = reshard_after_forward(layout_.fsdp, pipelined());
  const bool per_microbatch = grad_sync(layout_.fsdp, pipelined()) == GradSync::PerMicrobatch;
  fsdp_roles_.assign(t_.ops.size(), 0);
  std::vector<std::int64_t> last_backward(static_cast<std::size_t>(t_.stages), -1);
  for (std::size_t n = 0; n < t_.ops.size(); ++n) {
    for (const Pass& pass : t_.ops[n].passes()) {
      if (pass.kind == PassKind::B || pass.kind == PassKind::W)
        last_backward[static_cast<std::size_t>(pass.stage)] = static_cast<std::int64_t>(n);
    }
  }
  gather_issued_by_.assign(t_.ops.size(), -2);
  for (std::int32_t d = 0; d < t_.devices; ++d) {
    const bool unshards = fsdp_unshard_roles(d);
    std::vector<std::uint8_t> gathered(static_cast<std::size_t>(t_.stages), 0);
    for (auto i = t_.row_begin[static_cast<std::size_t>(d)];
         i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
      for (const Pass& pass : t_.ops[static_cast<std::size_t>(i)].passes()) {
        const auto s = static_cast<std::size_t>(pass.stage);
        const bool uses = pass.kind == PassKind::F || is_input_backward(pass.kind);
        if (!unshards && uses && (reshard || (pass.kind == PassKind::F && !gathered[s]))) {
          gathered[s] = 1;
          fsdp_roles_[static_cast<std::size_t>(i)] |= kGathers;
          const auto begin = t_.row_begin[static_cast<std::size_t>(d)];
          if (!pipelined() && is_input_backward(pass.kind) && i > begin) {
            const Op& before = t_.ops[static_cast<std::size_t>(i - 1)];
            if (!before.is_pair() && before.first().kind == PassKind::F &&
                before.first().stage == pass.stage)
              fsdp_roles_[static_cast<std::size_t>(i)] |= kKeepsFirst;
          }
        }
        if ((pass.kind == PassKind::B || pass.kind == PassKind::W) &&
            (per_microbatch || i == last_backward[s]))
          fsdp_roles_[static_cast<std::size_t>(i)] |= kScatters;
      }
    }
  }
}

// A pipelined device whose communication order (a compute+comms table: PyTorch's runtime)
// unshards its stages explicitly: each UNSHARD of stage s gathers s's unit, issued as the op
// before the UNSHARD starts (PyTorch issues it asynchronously there), and the first op of s after
// it waits for it — its only gathers. RESHARD frees the unit, which the static memory does not
// follow (it holds a pipelined stage's parameters throughout). False, and nothing set, where the
// device has no UNSHARD; check_comm_order has made sure every compute op's stage is gathered.
bool Lowering::fsdp_unshard_roles(std::int32_t d) {
  if (!pipelined() || t_.comms.empty()) return false;
  const auto row = t_.comms.row(d);
  if (std::none_of(row.begin(), row.end(),
                   [](const CommAction& c) { return c.kind == CommKind::Unshard; }))
    return false;
  const auto begin = t_.row_begin[static_cast<std::size_t>(d)];
  const auto ops = t_.row_begin[static_cast<std::size_t>(d) + 1] - begin;
  // Per stage: the op before its pending UNSHARD (-1: none before it), or -2 when none pends.
  std::vector<std::int64_t> pending(static_cast<std::size_t>(t_.stages), -2);
  std::size_t a = 0;
  for (std::int64_t i = 0; i < ops; ++i) {
    for (; a < row.size() && row[a].before <= i; ++a) {
      if (row[a].kind == CommKind::Unshard)
        pending[row[a].stage] = row[a].before > 0 ? begin + row[a].before - 1 : -1;
    }
    const auto n = static_cast<std::size_t>(begin + i);
    for (const Pass& pass : t_.ops[n].passes()) {
      auto& p = pending[static_cast<std::size_t>(pass.stage)];
      if (pass.kind == PassKind::None || p == -2) continue;
      fsdp_roles_[n] |= kGathers;
      gather_issued_by_[n] = p;
      p = -2;
    }
  }
  return true;
}

// Every op's first parameter all-gather (its unit's, or without pipelining its first block's:
// the others are in its program), and the reduce-scatters of per-microbatch gradient sync (the
// unit's, or the last block's). Each gather is issued as the op before it starts on the device
// (FSDP2 prefetches one unit ahead) — as the op before starts its last block when that runs
// block by block — and after the device's previous gather (one all-gather stream).
void Lowering::fsdp_gathers() {
  if (!fsdp()) return;
  const bool per_microbatch = grad_sync(layout_.fsdp, pipelined()) == GradSync::PerMicrobatch;
  last_scatter_.assign(static_cast<std::size_t>(t_.devices), -1);
  scattered_.assign(static_cast<std::size_t>(t_.stages), -1);
  for (std::int32_t d = 0; d < t_.devices; ++d) {
    const auto shard = group(d, CollectiveGroup::FsdpShard);
    std::int32_t gather = -1;
    const auto begin = t_.row_begin[static_cast<std::size_t>(d)];
    for (auto i = begin; i < t_.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
      const auto op = static_cast<std::int32_t>(i);
      const auto roles = fsdp_roles_[static_cast<std::size_t>(i)];
      for (const Pass& pass : t_.ops[static_cast<std::size_t>(i)].passes()) {
        const StageWork& w = work(pass);
        if ((roles & kGathers) && !(roles & kKeepsFirst)) {
          const auto next = collective_side(
              TransferKind::FsdpAllGather, pass.stage, d,
              nccl_collective(CollectiveKind::AllGather, shard, gather_bytes(w)), gather);
          const auto by = gather_issued_by_[static_cast<std::size_t>(i)];
          if (by >= 0) {
            issue_after_start(static_cast<std::int32_t>(by), next);
          } else if (by == -2 && i > begin) {
            issue_after_start(op - 1, next);
          }
          gather = expert_collective(TransferKind::FsdpAllGather, pass.stage, d,
                                     expert_gather_bytes(w), next);
          edge(gather, op);
          lengthen(static_cast<std::size_t>(op), copy_out_seconds(w));
        }
        if ((roles & kScatters) && per_microbatch)
          scattered_[static_cast<std::size_t>(pass.stage)] = fsdp_reduce_scatter(pass.stage, d, op);
      }
    }
  }
}

// Releases transfer t as op n starts, or as it starts its last block when it has a slot for
// that (fsdp_program's kNextGather).
void Lowering::issue_after_start(std::int32_t n, std::int32_t t) {
  const auto slot = next_gather_step_.empty() ? -1 : next_gather_step_[static_cast<std::size_t>(n)];
  if (slot < 0) return start_edge(n, t, 0.0);
  g_.steps[static_cast<std::size_t>(slot)] = {StepKind::Issue, t, 0.0};
  ++g_.preds[static_cast<std::size_t>(t)];
}

// The program of a pass run block by block with its FSDP roles, once per stage, kind and roles.
std::int32_t Lowering::block_program_id(const Pass& a, std::uint8_t roles) {
  roles &= kGathers | kScatters;  // what its program does
  const std::array<std::int64_t, 5> key{static_cast<std::int64_t>(index(a)),
                                        static_cast<std::int64_t>(a.kind), -1, roles, 2};
  if (const auto it = program_ids_.find(key); it != program_ids_.end()) return it->second;
  const StageWork& w = work(a);
  const auto shard = group(0, CollectiveGroup::FsdpShard);
  const auto experts = group(0, CollectiveGroup::ExpertShard);
  const auto flows = [&](double bytes, double expert_bytes, cost::ExchangeKind kind) {
    const CollectiveKind what = kind == cost::ExchangeKind::ParamGather
                                    ? CollectiveKind::AllGather
                                    : CollectiveKind::ReduceScatter;
    cost::Exchange x;
    x.kind = kind;
    x.flows = {ring_flow(nccl_collective(what, shard, bytes)),
               expert_shard_ranks() > 1 ? ring_flow(nccl_collective(what, experts, expert_bytes))
                                        : cost::Flow{}};
    return x;
  };
  std::optional<cost::Exchange> gather, scatter;
  if (roles & kGathers)
    gather = flows(gather_bytes(w), expert_gather_bytes(w), cost::ExchangeKind::ParamGather);
  if (roles & kScatters) {
    scatter = flows(scatter_bytes(w), expert_scatter_bytes(w), cost::ExchangeKind::GradScatter);
    scatter->flows[0].latency_s += copy_in_seconds(w);
  }
  const auto blocks =
      detail::block_pieces(cost_[index(a)], a.kind, static_cast<std::int64_t>(units(w)));
  const auto id = static_cast<std::int32_t>(unique_.size());
  unique_.push_back(detail::fsdp_program(blocks, gather, scatter, copy_out_seconds(w)));
  program_ids_.emplace(key, id);
  return id;
}

// Adds `seconds` of compute to op n (at its first step when it runs a program).
void Lowering::lengthen(std::size_t n, double seconds) {
  g_.duration[n] += seconds;
  if (g_.has_steps(static_cast<std::int64_t>(n)))
    g_.steps[static_cast<std::size_t>(g_.step_begin[n])].seconds += seconds;
}

}  // namespace pipetab::detail
