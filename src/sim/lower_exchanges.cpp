// The exchanges inside ops (lowering.hpp's Lowering; programs.hpp): each op's program of compute,
// the experts' all-to-alls and the context-parallel exchanges (FSDP's per-block collectives
// without pipelining), built once per distinct one; then its steps and inner transfers in the
// graph, or without transfers its waits folded into its time.
#include <array>
#include <cstdint>
#include <vector>

#include "lowering.hpp"
#include "programs.hpp"

namespace pipetab::detail {

// The program of one pass, or of a pair run in turn (`b`: its second pass; `pair`: a forward
// and a backward that overlap, in that order), -1 without exchanges. Built once per stage and
// pass kinds: the ops of a table share a few.
std::int32_t Lowering::program_id(const Pass& a, const Pass* b,
                                  std::optional<detail::PairOrder> pair) {
  if (b == nullptr) {
    // One pass: by (pipeline, stage) and kind in a flat array (-2: not built yet).
    constexpr std::size_t kKinds = 5;
    if (single_ids_.empty()) single_ids_.assign(cost_.size() * kKinds, -2);
    auto& id = single_ids_[index(a) * kKinds + static_cast<std::size_t>(a.kind)];
    if (id == -2) {
      const auto first = detail::pass_pieces(cost_[index(a)], a.kind);
      id = -1;
      if (first.size() > 1) {
        id = static_cast<std::int32_t>(unique_.size());
        unique_.push_back(detail::op_program(first));
      }
    }
    return id;
  }
  const auto kind = [](const Pass& p) { return static_cast<std::int64_t>(p.kind); };
  const std::array<std::int64_t, 5> key{
      static_cast<std::int64_t>(index(a)), kind(a), b ? static_cast<std::int64_t>(index(*b)) : -1,
      b ? kind(*b) : -1, pair ? 1 + static_cast<std::int64_t>(*pair) : 0};
  if (const auto it = program_ids_.find(key); it != program_ids_.end()) return it->second;
  auto first = detail::pass_pieces(cost_[index(a)], a.kind);
  std::vector<Piece> second;
  if (b != nullptr) second = detail::pass_pieces(cost_[index(*b)], b->kind);
  for (Piece& piece : second)
    piece.pass = 1;
  std::int32_t id = -1;
  if (first.size() > 1 || second.size() > 1) {
    id = static_cast<std::int32_t>(unique_.size());
    if (pair) {
      unique_.push_back(detail::op_program(first, second, *pair));
    } else {
      first.insert(first.end(), second.begin(), second.end());
      unique_.push_back(detail::op_program(first));
    }
  }
  program_ids_.emplace(key, id);
  return id;
}

void Lowering::set_program(std::size_t n, std::int32_t id) {
  if (id < 0 && program_of_.empty()) return;
  if (program_of_.empty()) program_of_.assign(t_.ops.size(), -1);
  program_of_[n] = id;
}

// Op n's program when it runs exchanges (the passes' costs leave them out). A forward and a
// backward in one op (DualPipe's F&B chunk pairs) overlap.
void Lowering::plan_exchanges(std::size_t n) {
  const Op& op = t_.ops[n];
  if (op.first().kind == PassKind::None) return;
  if (by_blocks(n)) {
    const auto id = block_program_id(op.first(), fsdp_roles_[n]);
    if (fsdp_roles_[n] & kGathers) {
      // Its other blocks' gathers are copied out inside it, a kernel each.
      const double others = units(work(op.first())) - 1.0;
      op_cost_[n].seconds += others * copy_out_seconds(work(op.first()));
      op_cost_[n].kernels += others;
    }
    if (!folded()) return set_program(n, id);
    // Without the transfers: its waits with every collective alone on its links.
    if (folded_waits_.empty()) folded_waits_.assign(t_.ops.size(), 0.0);
    folded_waits_[n] = detail::shortest_waits(unique_[static_cast<std::size_t>(id)],
                                              network_.system(), overlapped_deepep());
    return;
  }
  if (!op.is_pair() && folded()) {
    // One pass without its transfers: its waits in closed form, no program.
    const double waits = single_waits(op.first());
    if (waits > 0.0) {
      if (folded_waits_.empty()) folded_waits_.assign(t_.ops.size(), 0.0);
      folded_waits_[n] = waits;
    }
    return;
  }
  if (!op.is_pair()) return set_program(n, program_id(op.first(), nullptr));
  const bool pair = op.first().kind == PassKind::F && is_input_backward(op.second().kind);
  set_program(n, program_id(op.first(), &op.second(),
                            pair ? std::optional(detail::PairOrder::ForwardFirst) : std::nullopt));
}

// Op n's program, or nullptr.
const Lowering::Program* Lowering::program_of(std::size_t n) const {
  if (n >= program_of_.size() || program_of_[n] < 0) return nullptr;
  return &unique_[static_cast<std::size_t>(program_of_[n])];
}

// The programs' steps and inner transfers (after the compute nodes; none without exchanges).
// Every op's first step computes its overheads.
void Lowering::lower_programs() {
  if (folded()) {
    // No transfers (the compute part, plan's bounds): each op as long as it takes with every
    // exchange alone on its links, a lower bound of what it takes.
    std::vector<double> waits(unique_.size(), -1.0);
    for (std::size_t n = 0; n < program_of_.size(); ++n) {
      if (program_of_[n] < 0) continue;
      auto& w = waits[static_cast<std::size_t>(program_of_[n])];
      if (w < 0.0) {
        w = detail::shortest_waits(unique_[static_cast<std::size_t>(program_of_[n])],
                                   network_.system(), overlapped_deepep());
      }
      g_.duration[n] += w;
    }
    for (std::size_t n = 0; n < folded_waits_.size(); ++n)
      g_.duration[n] += folded_waits_[n];
    return;
  }
  if (program_of_.empty()) return;
  const auto& system = network_.system();
  g_.step_begin.assign(1, 0);
  for (std::int64_t node = 0; node < g_.compute_nodes; ++node) {
    const auto n = static_cast<std::size_t>(node);
    if (const Program* program = program_of(n)) {
      const auto& p = *program;
      const auto d = g_.device[n];
      double compute = 0.0;
      for (const auto& step : p.steps)
        compute += step.kind == StepKind::Compute ? step.seconds : 0.0;
      g_.steps.push_back({StepKind::Compute, -1, g_.duration[n] - compute});
      step_pass_.push_back(0);
      // Each exchange's flows, over the device's switch ports or its NIC (-1: none).
      auto& flows = flows_scratch_;
      flows.clear();
      for (std::size_t e = 0; e < p.exchanges.size(); ++e) {
        const auto& x = p.exchanges[e];
        std::array<std::int32_t, 2> pair{-1, -1};
        for (std::size_t k = 0; k < 2; ++k) {
          const cost::Flow& f = x.flows[k];
          if (!(f.bytes > 0.0)) continue;
          const LinkSpec& link = f.nic ? system.inter : system.intra;
          const auto t = add_port_transfer(transfer_kind(x.kind), stage_of(node), d, f.bytes, f.nic,
                                           f.latency_s);
          // Its rate alone: at most the link's collective rate where capped, and beside the
          // other pass's compute a share of that (overlapped_deepep_share).
          const double share = detail::overlapped_deepep_share(p, x, overlapped_deepep());
          if (f.capped || share < 1.0)
            g_.rate_cap.back() =
                link.bandwidth * (f.capped ? link.collective_efficiency : 1.0) * share;
          g_.preds[static_cast<std::size_t>(t)] = 1;  // its Issue step
          // After the exchange before it on its stream: its flow on the same link (FSDP's one
          // reduce-scatter stream) or all of it (OpProgram::whole_after).
          if (const auto before = p.after.empty() ? -1 : p.after[e]; before >= 0) {
            const auto& prior = flows[static_cast<std::size_t>(before)];
            for (std::size_t j = 0; j < 2; ++j)
              if (prior[j] >= 0 && (j == k || p.whole_after)) edge(prior[j], t);
          }
          pair[k] = t;
        }
        flows.push_back(pair);
      }
      for (const auto& step : p.steps) {
        if (step.kind == StepKind::Compute) {
          g_.steps.push_back({StepKind::Compute, -1, step.seconds});
          step_pass_.push_back(step.pass);
          continue;
        }
        if (step.exchange == detail::kNextGather) {
          // A slot for the next op's first gather (fsdp_gathers), nothing until then.
          if (next_gather_step_.empty()) next_gather_step_.assign(t_.ops.size(), -1);
          next_gather_step_[n] = static_cast<std::int64_t>(g_.steps.size());
          g_.steps.push_back({StepKind::Compute, -1, 0.0});
          step_pass_.push_back(0);
          continue;
        }
        for (const auto t : flows[static_cast<std::size_t>(step.exchange)]) {
          if (t < 0) continue;
          g_.steps.push_back({step.kind, t, 0.0});
          step_pass_.push_back(0);
        }
      }
    }
    g_.step_begin.push_back(static_cast<std::int64_t>(g_.steps.size()));
  }
}

TransferKind Lowering::transfer_kind(cost::ExchangeKind kind) {
  switch (kind) {
    case cost::ExchangeKind::Expert:
      return TransferKind::ExpertAllToAll;
    case cost::ExchangeKind::ParamGather:
      return TransferKind::FsdpAllGather;
    case cost::ExchangeKind::GradScatter:
      return TransferKind::FsdpReduceScatter;
    case cost::ExchangeKind::Context:
      break;
  }
  return TransferKind::ContextExchange;
}

// The stage of an op's first pass (what its inner transfers serve).
int Lowering::stage_of(std::int64_t node) const {
  return t_.ops[static_cast<std::size_t>(node)].first().stage;
}

}  // namespace pipetab::detail
