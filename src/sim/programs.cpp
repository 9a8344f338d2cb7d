#include "programs.hpp"

#include <algorithm>

namespace pipetab::detail {

namespace {

// The program of a kind of pass of some layers, or nullptr (none, or a weight-gradient pass).
const cost::LayerProgram* pass_program(const cost::LayerPrograms& l, PassKind kind) {
  if (!l.passes) return nullptr;
  return kind == PassKind::F   ? &l.passes->forward
         : kind == PassKind::B ? &l.passes->backward
         : kind == PassKind::I ? &l.passes->input_grad
                               : nullptr;
}

// A layer's pieces of a pass: each exchange after the compute before it (and `carry`, the
// compute waiting to run first), then the compute after them carried on.
void append_layer(std::vector<Piece>& out, const cost::LayerProgram& p, double& carry) {
  for (const auto& x : p.exchanges) {
    out.push_back({carry + x.before_s, x, x.beside_s});
    carry = 0.0;
  }
  carry += p.after_s;
}

const cost::PassCost& pass_cost(const cost::StageCost& c, PassKind kind) {
  return kind == PassKind::F   ? c.forward
         : kind == PassKind::B ? c.backward
         : kind == PassKind::I ? c.input_grad
                               : c.weight_grad;
}

// The pass's compute outside its layers' programs.
double outside_programs(const cost::StageCost& c, PassKind kind) {
  double rest = pass_cost(c, kind).seconds;
  for (const auto& l : c.layers)
    if (const auto* p = pass_program(l, kind)) rest -= l.layers * p->compute_s();
  return std::max(0.0, rest);
}

}  // namespace

std::vector<Piece> pass_pieces(const cost::StageCost& c, PassKind kind) {
  double carry = outside_programs(c, kind);
  std::vector<Piece> out;
  for (const auto& l : c.layers) {
    const auto* p = pass_program(l, kind);
    if (p == nullptr) continue;
    for (double k = 0; k < l.layers; ++k)
      append_layer(out, *p, carry);
  }
  out.push_back({carry, std::nullopt, 0.0});
  return out;
}

std::vector<std::vector<Piece>> block_pieces(const cost::StageCost& c, PassKind kind,
                                             std::int64_t blocks) {
  const double n = static_cast<double>(std::max<std::int64_t>(1, blocks));
  const double spread = outside_programs(c, kind) / n;
  // Model order: the blocks without a program first (an MoE model's dense layers lead), then
  // each layer kind's.
  std::vector<const cost::LayerProgram*> order;
  for (const auto& l : c.layers) {
    if (const auto* p = pass_program(l, kind))
      order.insert(order.end(), static_cast<std::size_t>(l.layers), p);
  }
  const auto plain = std::max<std::int64_t>(
      0, static_cast<std::int64_t>(n) - static_cast<std::int64_t>(order.size()));
  order.insert(order.begin(), static_cast<std::size_t>(plain), nullptr);
  if (kind != PassKind::F) std::reverse(order.begin(), order.end());
  std::vector<std::vector<Piece>> out;
  out.reserve(order.size());
  for (const auto* p : order) {
    auto& pieces = out.emplace_back();
    double carry = spread;
    if (p != nullptr) append_layer(pieces, *p, carry);
    pieces.push_back({carry, std::nullopt, 0.0});
  }
  return out;
}

namespace {

// Adds an exchange to `p` (after exchange `after`, -1: none); returns its index.
std::int32_t add_exchange(OpProgram& p, const cost::Exchange& x, std::int32_t after = -1) {
  p.exchanges.push_back(x);
  p.after.push_back(after);
  return static_cast<std::int32_t>(p.exchanges.size() - 1);
}

// Runs a thread of pieces' next piece into `p`: first the wait for its previous exchange. Its
// exchange moves after exchange `after` (-1: free).
void run_piece(OpProgram& p, const std::vector<Piece>& thread, std::size_t& next,
               std::int32_t& pending, std::int32_t after = -1) {
  if (pending >= 0) p.steps.push_back({StepKind::Wait, pending});
  pending = -1;
  const Piece& piece = thread[next++];
  p.steps.push_back({StepKind::Compute, -1, piece.before, piece.pass});
  if (!piece.exchange) return;
  pending = add_exchange(p, *piece.exchange, after);
  p.steps.push_back({StepKind::Issue, pending});
  if (piece.beside > 0.0) p.steps.push_back({StepKind::Compute, -1, piece.beside, piece.pass});
}

}  // namespace

OpProgram op_program(const std::vector<Piece>& a, const std::vector<Piece>& b, PairOrder order) {
  OpProgram p;
  std::size_t i = 0, j = 0;
  std::int32_t pa = -1, pb = -1;
  // Megatron-Core: one stream, so each exchange after the one issued before it.
  const bool one_stream = order == PairOrder::Megatron && !b.empty();
  p.whole_after = one_stream;
  p.paired = !b.empty();
  const auto last = [&] {
    return one_stream ? static_cast<std::int32_t>(p.exchanges.size()) - 1 : -1;
  };
  for (bool turn_a = order == PairOrder::ForwardFirst || b.empty(); i < a.size() || j < b.size();
       turn_a = !turn_a) {
    if ((turn_a && i < a.size()) || j == b.size()) {
      run_piece(p, a, i, pa, last());
    } else {
      run_piece(p, b, j, pb, last());
    }
  }
  for (const auto x : {pa, pb})
    if (x >= 0) p.steps.push_back({StepKind::Wait, x});
  return p;
}

OpProgram fsdp_program(const std::vector<std::vector<Piece>>& blocks,
                       const std::optional<cost::Exchange>& gather,
                       const std::optional<cost::Exchange>& scatter, double copy_out) {
  OpProgram p;
  std::int32_t scattering = -1;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const bool last = b + 1 == blocks.size();
    std::int32_t gathering = -1;
    if (gather && !last) {
      gathering = add_exchange(p, *gather);
      p.steps.push_back({StepKind::Issue, gathering});
    }
    if (last) p.steps.push_back({StepKind::Issue, kNextGather});
    std::size_t next = 0;
    std::int32_t pending = -1;
    while (next < blocks[b].size())
      run_piece(p, blocks[b], next, pending);
    if (pending >= 0) p.steps.push_back({StepKind::Wait, pending});
    if (scatter && !last) {
      scattering = add_exchange(p, *scatter, scattering);
      p.steps.push_back({StepKind::Issue, scattering});
    }
    if (gathering >= 0) {
      p.steps.push_back({StepKind::Wait, gathering});
      if (copy_out > 0.0) p.steps.push_back({StepKind::Compute, -1, copy_out});
    }
  }
  if (scattering >= 0) p.steps.push_back({StepKind::Wait, scattering});
  return p;
}

double alone_seconds(const cost::Exchange& x, const SystemConfig& system, double share) {
  double t = 0.0;
  for (const auto& f : x.flows) {
    const LinkSpec& link = f.nic ? system.inter : system.intra;
    const double rate = link.bandwidth * (f.capped ? link.collective_efficiency : 1.0) * share;
    if (f.bytes > 0.0) t = std::max(t, f.latency_s + f.bytes / rate);
  }
  return t;
}

double overlapped_deepep_share(const OpProgram& p, const cost::Exchange& x, double overlapped) {
  return p.paired && x.deepep ? overlapped : 1.0;
}

double shortest_waits(const OpProgram& p, const SystemConfig& system, double overlapped) {
  double now = 0.0, compute = 0.0;
  std::vector<double> end(p.exchanges.size(), 0.0);
  for (const auto& step : p.steps) {
    if (step.exchange == kNextGather) continue;
    const auto x = static_cast<std::size_t>(step.exchange);
    if (step.kind == StepKind::Compute) {
      now += step.seconds;
      compute += step.seconds;
    } else if (step.kind == StepKind::Issue) {
      // On one stream it moves after the exchange before it (per link otherwise: a lower bound).
      const auto before = p.whole_after ? p.after[x] : -1;
      const double start = before >= 0 ? std::max(now, end[static_cast<std::size_t>(before)]) : now;
      const auto& exchange = p.exchanges[x];
      end[x] =
          start + alone_seconds(exchange, system, overlapped_deepep_share(p, exchange, overlapped));
    } else {
      now = std::max(now, end[x]);
    }
  }
  return now - compute;
}

double pass_waits(const cost::StageCost& c, PassKind kind, const SystemConfig& system) {
  double waits = 0.0;
  for (const auto& l : c.layers) {
    const auto* p = pass_program(l, kind);
    if (p == nullptr) continue;
    for (const auto& x : p->exchanges)
      waits += l.layers * std::max(0.0, alone_seconds(x, system) - x.beside_s);
  }
  return waits;
}

}  // namespace pipetab::detail
