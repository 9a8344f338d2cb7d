#include "pipetab/cost/breakdown.hpp"

#include <array>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab::cost {
namespace {

const char* pass_name(PassId pass) {
  switch (pass) {
    case PassId::Forward:
      return "F";
    case PassId::InputGrad:
      return "I";
    case PassId::WeightGrad:
      return "W";
  }
  return "?";
}

const char* kind_name(const Operator& op) {
  switch (op.kind) {
    case OperatorKind::Gemm:
      return "gemm";
    case OperatorKind::FusedAttention:
    case OperatorKind::FusedAttentionBackward:
      return "flash";
    case OperatorKind::Memory:
      return "memory";
    case OperatorKind::Collective:
      return to_string(op.collective);
  }
  return "";
}

// The stage cost of one part alone (a stage of one layer, or of the embedding or the output
// only, with no layers).
StageCost part_cost(const ModelConfig& model, const Job& job, const Layout& layout,
                    const SystemConfig& system, std::int64_t layers, bool embedding, bool output,
                    std::int64_t moe_layers = 0, std::int64_t mtp_layers = 0,
                    std::array<std::int64_t, kBlockKinds> blocks = {}) {
  StageWork w;
  w.blocks = blocks;
  w.layers = layers;
  w.moe_layers = moe_layers;
  w.mtp_layers = mtp_layers;
  w.embedding = embedding;
  w.output = output;
  return stage_costs(model, job, layout, std::span(&w, 1), system).front();
}

}  // namespace

Breakdown operator_breakdown(const ModelConfig& model, const Job& job, const Layout& layout,
                             const SystemConfig& system) {
  const auto* m = model.transformer();
  if (m == nullptr)
    throw ParamError(
        fmt::format("model '{}' gives op times directly: it has no operators", model.name));
  require_costable(model, job, system);
  Breakdown b{model.name, system.name, {}, {}, {}, {}, {}, {}, {}};
  const Workload run{*m, job, layout};
  const ModelOperators ops = model_operators(run);
  const std::pair<const char*, const PassOperators*> parts[] = {{"layer", &ops.layer},
                                                                {"moe_layer", &ops.moe_layer},
                                                                {"embedding", &ops.embedding},
                                                                {"output", &ops.output},
                                                                {"mtp", &ops.mtp}};
  // A hybrid model's kinds of layer (BlockKind order).
  static constexpr std::array<const char*, kBlockKinds> kBlockNames{"mamba", "attention", "mlp",
                                                                    "moe"};
  std::vector<std::pair<const char*, const PassOperators*>> all(std::begin(parts), std::end(parts));
  for (std::size_t k = 0; k < kBlockKinds; ++k)
    all.insert(all.begin() + static_cast<std::ptrdiff_t>(k), {kBlockNames[k], &ops.blocks[k]});
  for (const auto& [part, passes] : all) {
    for (const auto pass : {PassId::Forward, PassId::InputGrad, PassId::WeightGrad}) {
      for (const Operator& op : passes->pass(pass))
        b.rows.push_back({part, pass, op, operator_cost(op, run, system)});
    }
  }
  if (m->hybrid()) {
    for (std::size_t k = 0; k < kBlockKinds; ++k) {
      if (ops.blocks[k].forward.empty()) continue;
      std::array<std::int64_t, kBlockKinds> one{};
      one[k] = 1;
      const std::int64_t moe = k == index(BlockKind::Moe) ? 1 : 0;
      b.blocks.emplace_back(kBlockNames[k],
                            part_cost(model, job, layout, system, 1, false, false, moe, 0, one));
    }
  } else {
    b.layer = part_cost(model, job, layout, system, 1, false, false);
    if (m->moe) b.moe_layer = part_cost(model, job, layout, system, 1, false, false, 1);
  }
  b.embedding = part_cost(model, job, layout, system, 0, true, false);
  // The output layer and loss once (a stage that holds them runs them once more per MTP module).
  ModelConfig once = model;
  std::get<TransformerConfig>(once.spec).mtp_layers = 0;
  b.output = part_cost(once, job, layout, system, 0, false, true);
  if (m->mtp_layers > 0) b.mtp = part_cost(model, job, layout, system, 0, false, false, 0, 1);
  return b;
}

std::string breakdown_text(const Breakdown& b) {
  std::string out = fmt::format(
      "model {} on {}: one microbatch per device (a tensor-parallel rank)\n\n", b.model, b.system);
  out += fmt::format("{:<10}{:<5}{:<36}{:<15}{:>12}{:>12}{:>8}{:>12}\n", "part", "pass", "operator",
                     "kind", "GFLOP", "MB", "eff", "time ms");
  for (const auto& r : b.rows) {
    const bool collective = r.op.kind == OperatorKind::Collective;
    out += fmt::format("{:<10}{:<5}{:<36}{:<15}{:>12.4g}{:>12.4g}{:>8}{:>12.4g}\n", r.part,
                       pass_name(r.pass), r.op.name, kind_name(r.op), r.op.flops / 1e9,
                       (collective ? r.op.collective_bytes : r.op.bytes) / 1e6,
                       r.cost.efficiency > 0.0 ? fmt::format("{:.3f}", r.cost.efficiency)
                                               : std::string(r.cost.memory_bound ? "mem" : "-"),
                       r.cost.seconds * 1e3);
  }
  out +=
      "\npass totals, ms (exposed tensor-parallel communication in brackets; B = I and W in "
      "one op):\n";
  const auto line = [&](const char* part, const StageCost& c) {
    out += fmt::format(
        "  {:<10} F {:.4g} ({:.3g})   I {:.4g} ({:.3g})   W {:.4g} ({:.3g})   B {:.4g} ({:.3g})\n",
        part, 1e3 * c.forward.seconds, 1e3 * c.forward.tp_comm_s, 1e3 * c.input_grad.seconds,
        1e3 * c.input_grad.tp_comm_s, 1e3 * c.weight_grad.seconds, 1e3 * c.weight_grad.tp_comm_s,
        1e3 * c.backward.seconds, 1e3 * c.backward.tp_comm_s);
  };
  if (b.blocks.empty()) line("layer", b.layer);
  for (const auto& [name, cost] : b.blocks)
    line(name.c_str(), cost);
  if (b.moe_layer) line("moe_layer", *b.moe_layer);
  line("embedding", b.embedding);
  line("output", b.output);
  if (b.mtp) line("mtp", *b.mtp);
  return out;
}

nlohmann::json to_json(const Breakdown& b) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : b.rows) {
    rows.push_back({{"part", r.part},
                    {"pass", pass_name(r.pass)},
                    {"operator", r.op.name},
                    {"kind", kind_name(r.op)},
                    {"flops", r.op.flops},
                    {"bytes", r.op.bytes},
                    {"collective_bytes", r.op.collective_bytes},
                    {"kernels", r.op.kernels},
                    {"inner_launches", r.op.inner_launches},
                    {"host_sync", r.op.host_sync},
                    {"efficiency", r.cost.efficiency},
                    {"memory_bound", r.cost.memory_bound},
                    {"seconds", r.cost.seconds}});
  }
  const auto pass = [](const PassCost& c) {
    return nlohmann::json{{"seconds", c.seconds}, {"tp_comm_s", c.tp_comm_s}, {"sync_s", c.sync_s}};
  };
  const auto stage = [&](const StageCost& c) {
    return nlohmann::json{{"forward", pass(c.forward)},
                          {"input_grad", pass(c.input_grad)},
                          {"weight_grad", pass(c.weight_grad)},
                          {"backward", pass(c.backward)}};
  };
  nlohmann::json out = {{"model", b.model},
                        {"system", b.system},
                        {"operators", rows},
                        {"layer", stage(b.layer)},
                        {"embedding", stage(b.embedding)},
                        {"output", stage(b.output)}};
  if (b.moe_layer) out["moe_layer"] = stage(*b.moe_layer);
  if (b.mtp) out["mtp"] = stage(*b.mtp);
  // A hybrid model's layers by kind; "layer" is then a stage of no layer.
  if (!b.blocks.empty()) {
    nlohmann::json blocks = nlohmann::json::object();
    for (const auto& [name, cost] : b.blocks)
      blocks[name] = stage(cost);
    out["blocks"] = blocks;
  }
  return out;
}

}  // namespace pipetab::cost
