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

}  // namespace

std::vector<Piece> pass_pieces(const cost::StageCost& c, PassKind kind) {
  const cost::PassCost& pc = kind == PassKind::F   ? c.forward
                             : kind == PassKind::B ? c.backward
                             : kind == PassKind::I ? c.input_grad
                                                   : c.weight_grad;
  double carry = pc.seconds;
  for (const auto& l : c.layers)
    if (const auto* p = pass_program(l, kind)) carry -= l.layers * p->compute_s();
  carry = std::max(0.0, carry);
  std::vector<Piece> out;
  for (const auto& l : c.layers) {
    const auto* p = pass_program(l, kind);
    if (p == nullptr || p->exchanges.empty()) continue;
    for (double k = 0; k < l.layers; ++k) {
      for (const auto& x : p->exchanges) {
        out.push_back({carry + x.before_s, x, x.beside_s});
        carry = 0.0;
      }
      carry += p->after_s;
    }
  }
  out.push_back({carry, std::nullopt, 0.0});
  return out;
}

namespace {

// Runs a thread of pieces' next piece into `p`: first the wait for its previous exchange.
void run_piece(OpProgram& p, const std::vector<Piece>& thread, std::size_t& next,
               std::int32_t& pending) {
  if (pending >= 0) p.steps.push_back({StepKind::Wait, pending});
  pending = -1;
  const Piece& piece = thread[next++];
  p.steps.push_back({StepKind::Compute, -1, piece.before});
  if (!piece.exchange) return;
  pending = static_cast<std::int32_t>(p.exchanges.size());
  p.exchanges.push_back(*piece.exchange);
  p.steps.push_back({StepKind::Issue, pending});
  if (piece.beside > 0.0) p.steps.push_back({StepKind::Compute, -1, piece.beside});
}

}  // namespace

OpProgram op_program(const std::vector<Piece>& a, const std::vector<Piece>& b) {
  OpProgram p;
  std::size_t i = 0, j = 0;
  std::int32_t pa = -1, pb = -1;
  for (bool turn_a = true; i < a.size() || j < b.size(); turn_a = !turn_a) {
    if ((turn_a && i < a.size()) || j == b.size()) {
      run_piece(p, a, i, pa);
    } else {
      run_piece(p, b, j, pb);
    }
  }
  for (const auto x : {pa, pb})
    if (x >= 0) p.steps.push_back({StepKind::Wait, x});
  return p;
}

double alone_seconds(const cost::Exchange& x, const SystemConfig& system) {
  double t = 0.0;
  for (const auto& f : x.flows) {
    const LinkSpec& link = f.nic ? system.inter : system.intra;
    if (f.bytes > 0.0)
      t = std::max(t, f.latency_s + f.bytes / (link.bandwidth * link.collective_efficiency));
  }
  return t;
}

double shortest_waits(const OpProgram& p, const SystemConfig& system) {
  double now = 0.0, compute = 0.0;
  std::vector<double> end(p.exchanges.size(), 0.0);
  for (const auto& step : p.steps) {
    const auto x = static_cast<std::size_t>(step.exchange);
    if (step.kind == StepKind::Compute) {
      now += step.seconds;
      compute += step.seconds;
    } else if (step.kind == StepKind::Issue) {
      end[x] = now + alone_seconds(p.exchanges[x], system);
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
