#include "helpers.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>

#include "pipetab/io/action.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/sim/bounds.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab::test {

PlanBounds plan_bounds(const ScheduleTable& table, const SimulationSetup& s) {
  const Network network(s.system, table.devices, gpus_per_device(s.layout));
  auto folded = s.lowering;
  folded.inner_transfers = false;
  return {
      compute_bounds(table, s.model, s.job, s.layout, network, s.lowering).runtime_lower_bound_s(),
      graph_bounds(lower(table, s.model, s.job, s.layout, network, folded), network)
          .runtime_lower_bound_s};
}

ModelRun::ModelRun(ModelConfig m) {
  SimulationSetup s;
  apply_settings(s, m.defaults);
  model = std::move(m);
  job = s.job;
  layout = s.layout;
}

ModelRun::ModelRun(ModelConfig m, Job j, Layout l)
    : model(std::move(m)), job(std::move(j)), layout(std::move(l)) {}

Workload workload(const ModelRun& run) {
  return {std::get<TransformerConfig>(run.model.spec), run.job, run.layout};
}

std::vector<StageWork> stage_work(const ModelRun& run, std::span<const std::int32_t> units,
                                  std::int32_t devices) {
  return pipetab::stage_work(run.model, run.job, run.layout, units, devices);
}

std::vector<StageWork> table_work(const ScheduleTable& table, const ModelRun& run) {
  return pipetab::table_work(table, run.model, run.job, run.layout);
}

SimulationSetup setup_of(ModelConfig model, SystemConfig system) {
  SimulationSetup s;
  s.model = std::move(model);
  s.system = std::move(system);
  apply_settings(s, s.model.defaults);
  return s;
}

SimulationSetup preset_setup(const std::string& model, const std::string& system) {
  return setup_of(io::load_model(model), io::load_system(system));
}

ScheduleTable table(int devices, std::vector<std::int32_t> placement, int microbatches,
                    const std::vector<std::vector<std::string>>& rows) {
  const int stages = static_cast<int>(placement.size());
  TableBuilder builder(devices, stages, microbatches, std::move(placement), 0);
  for (const auto& row : rows) {
    for (const auto& token : row) {
      if (token.empty()) continue;
      const auto parsed = io::parse_action(token);
      if (!parsed.op) throw std::invalid_argument("bad test token " + token + ": " + parsed.error);
      builder.push(*parsed.op);
    }
    builder.end_row();
  }
  return std::move(builder).finish();
}

std::vector<std::string> row_tokens(const ScheduleTable& t, int device) {
  std::vector<std::string> out;
  for (const Op& op : t.row(device))
    out.push_back(to_string(op));
  return out;
}

ModelConfig explicit_model(double f, double i, double w, double message, double grad_bytes) {
  ExplicitWorkload e;
  e.forward_s = f;
  e.input_grad_s = i;
  e.weight_grad_s = w;
  e.message_bytes = message;
  e.activation_bytes = 100.0;
  e.activation_kept_for_weight_grad = 80.0;
  e.weight_bytes = 10.0;
  e.grad_bytes = grad_bytes;
  e.optimizer_bytes = 30.0;
  return {"explicit", e};
}

SystemConfig system_with(Topology topology, LinkSpec intra, LinkSpec inter, std::int32_t per_node) {
  SystemConfig s;
  s.name = "test";
  s.device.peak_flops.fill(1e15);
  s.device.flat_efficiency = 1.0;
  s.device.memory_bytes = 1e12;
  s.topology = topology;
  s.devices_per_node = per_node;
  s.intra = intra;
  s.inter = inter;
  return s;
}

ScheduleParams sm(std::int64_t devices, std::int64_t microbatches) {
  ScheduleParams p;
  p.devices = devices;
  p.microbatches = microbatches;
  return p;
}

ScheduleTable make(const std::string& name, ScheduleParams params) {
  return generate(find_schedule(name), params);
}

ResolvedParams resolved(const std::string& name, ScheduleParams params) {
  return resolve(find_schedule(name), params);
}

ReferenceOp parse_reference_op(const std::string& text) {
  ReferenceOp op;
  op.kind = text.rfind("BW", 0) == 0 ? "BW" : text.substr(0, 1);
  std::size_t end = op.kind.size();
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])))
    ++end;
  if (end == op.kind.size()) throw std::invalid_argument("bad reference op " + text);
  op.microbatch = std::stoi(text.substr(op.kind.size(), end - op.kind.size()));
  op.suffix = text.substr(end);
  return op;
}

std::vector<std::string> zero_bubble_row(const std::string& row, int stage) {
  std::vector<std::string> out;
  std::istringstream in(row);
  for (std::string word; in >> word;) {
    const auto op = parse_reference_op(word);
    const char kind = op.kind == "B" ? 'I' : op.kind[0];
    const std::string where =
        op.suffix.rfind(".s", 0) == 0 ? op.suffix.substr(2) : std::to_string(stage);
    out.push_back(where + kind + std::to_string(op.microbatch));
  }
  return out;
}

Costs split_costs(double F, double I, double W, std::optional<double> FB) {
  Costs c;
  c.F = F;
  c.I = I;
  c.W = W;
  c.B = I + W;
  c.FB = FB;
  return c;
}

const Operator* find_op(const std::vector<Operator>& ops, std::string_view name) {
  const auto it =
      std::find_if(ops.begin(), ops.end(), [&](const Operator& op) { return op.name == name; });
  return it == ops.end() ? nullptr : &*it;
}

}  // namespace pipetab::test
