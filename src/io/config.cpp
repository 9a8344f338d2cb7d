#include "pipetab/io/config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "presets.hpp"
#include "toml_reader.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "pipetab/error.hpp"
#include "pipetab/io/table_file.hpp"

namespace pipetab::io {
namespace {

constexpr double kHuge = 1e30;

std::string default_name(const std::string& file) {
  return std::filesystem::path(file).stem().string();
}

TransformerConfig read_transformer(const Reader& r, const toml::table& t) {
  const std::string p = "transformer";
  r.only(t, p,
         {"layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "micro_batch", "vocab",
          "dtype_bytes", "tensor_parallel", "sequence_parallel", "recompute", "flash_attention",
          "gated_mlp", "learned_positions", "balance_embedding", "grad_bytes_per_param",
          "optimizer_bytes_per_param"});
  constexpr std::int64_t kBig = std::int64_t{1} << 40;
  TransformerConfig m;
  m.layers = r.integer(t, p, "layers", std::nullopt, 1, 1 << 20);
  m.hidden = r.integer(t, p, "hidden", std::nullopt, 1, 1 << 24);
  m.heads = r.integer(t, p, "heads", std::nullopt, 1, 1 << 20);
  m.kv_heads = r.integer(t, p, "kv_heads", m.heads, 1, m.heads);
  m.ffn_hidden = r.integer(t, p, "ffn_hidden", 4 * m.hidden, 1, 1 << 26);
  m.seq_len = r.integer(t, p, "seq_len", std::nullopt, 1, 1 << 26);
  m.micro_batch = r.integer(t, p, "micro_batch", 1, 1, 1 << 20);
  m.vocab = r.integer(t, p, "vocab", std::nullopt, 1, kBig);
  m.dtype_bytes = r.integer(t, p, "dtype_bytes", 2, 1, 16);
  m.tensor_parallel = r.integer(t, p, "tensor_parallel", 1, 1, 1 << 16);
  m.sequence_parallel = r.boolean(t, p, "sequence_parallel", false);
  const auto recompute = r.choice(t, p, "recompute", "none", {"none", "selective", "full"});
  m.recompute = recompute == "full"        ? Recompute::Full
                : recompute == "selective" ? Recompute::Selective
                                           : Recompute::None;
  m.flash_attention = r.boolean(t, p, "flash_attention", false);
  m.gated_mlp = r.boolean(t, p, "gated_mlp", false);
  m.learned_positions = r.boolean(t, p, "learned_positions", true);
  m.balance_embedding = r.boolean(t, p, "balance_embedding", false);
  m.grad_bytes_per_param = r.number(t, p, "grad_bytes_per_param", 4.0, 0.0, 64.0, false);
  m.optimizer_bytes_per_param = r.number(t, p, "optimizer_bytes_per_param", 12.0, 0.0, 64.0, false);
  if (m.hidden % m.heads != 0) {
    r.fail(t.get("hidden")->source(), "transformer.hidden",
           fmt::format("{} is not a multiple of heads = {}", m.hidden, m.heads));
  }
  if (m.heads % m.kv_heads != 0) {
    r.fail(t.get("kv_heads")->source(), "transformer.kv_heads",
           fmt::format("heads = {} is not a multiple of {}", m.heads, m.kv_heads));
  }
  return m;
}

ExplicitWorkload read_explicit(const Reader& r, const toml::table& t) {
  const std::string p = "explicit";
  r.only(t, p,
         {"forward_s", "input_grad_s", "weight_grad_s", "message_bytes", "activation_bytes",
          "activation_kept_for_weight_grad", "weight_bytes", "grad_bytes", "optimizer_bytes"});
  ExplicitWorkload e;
  e.forward_s = r.number(t, p, "forward_s", std::nullopt, 0.0, kHuge, true);
  e.input_grad_s = r.number(t, p, "input_grad_s", std::nullopt, 0.0, kHuge, true);
  e.weight_grad_s = r.number(t, p, "weight_grad_s", std::nullopt, 0.0, kHuge, true);
  e.message_bytes = r.number(t, p, "message_bytes", std::nullopt, 0.0, kHuge, false);
  e.activation_bytes = r.number(t, p, "activation_bytes", std::nullopt, 0.0, kHuge, false);
  e.activation_kept_for_weight_grad = r.number(t, p, "activation_kept_for_weight_grad",
                                               e.activation_bytes, 0.0, e.activation_bytes, false);
  e.weight_bytes = r.number(t, p, "weight_bytes", 0.0, 0.0, kHuge, false);
  e.grad_bytes = r.number(t, p, "grad_bytes", 0.0, 0.0, kHuge, false);
  e.optimizer_bytes = r.number(t, p, "optimizer_bytes", 0.0, 0.0, kHuge, false);
  return e;
}

LinkSpec read_link(const Reader& r, const toml::table& parent, const std::string& prefix,
                   std::string_view key) {
  const std::string p = Reader::join(prefix, key);
  const toml::table* t = r.table(parent, prefix, key);
  if (t == nullptr) r.fail(parent.source(), p, "missing");
  r.only(*t, p, {"latency_s", "bandwidth"});
  LinkSpec link;
  link.latency_s = r.number(*t, p, "latency_s", std::nullopt, 0.0, 1e3, false);
  link.bandwidth = r.number(*t, p, "bandwidth", std::nullopt, 1.0, kHuge, false, true);
  return link;
}

}  // namespace

ModelConfig parse_model(std::string_view text, const std::string& file) {
  const Reader r(text, file);
  const auto& root = r.root();
  r.only(root, "", {"name", "description", "source", "transformer", "explicit"});
  ModelConfig model;
  model.name = r.string(root, "", "name").value_or(default_name(file));
  (void)r.string(root, "", "description");
  (void)r.string(root, "", "source");
  const auto* transformer = r.table(root, "", "transformer");
  const auto* explicit_costs = r.table(root, "", "explicit");
  if ((transformer == nullptr) == (explicit_costs == nullptr)) {
    r.fail(root.source(), "", "expected exactly one of the tables [transformer] and [explicit]");
  }
  if (transformer) {
    model.spec = read_transformer(r, *transformer);
  } else {
    model.spec = read_explicit(r, *explicit_costs);
  }
  return model;
}

SystemConfig parse_system(std::string_view text, const std::string& file) {
  const Reader r(text, file);
  const auto& root = r.root();
  r.only(root, "", {"name", "description", "source", "device", "network"});
  SystemConfig s;
  s.name = r.string(root, "", "name").value_or(default_name(file));
  (void)r.string(root, "", "description");
  s.source = r.string(root, "", "source").value_or("");
  const auto* device = r.table(root, "", "device");
  if (device == nullptr) r.fail(root.source(), "device", "missing");
  r.only(*device, "device", {"peak_flops", "efficiency", "memory_bytes"});
  // A lower bound of 1 FLOP/s (and of 1 B/s for links) keeps every simulated time finite.
  s.peak_flops = r.number(*device, "device", "peak_flops", std::nullopt, 1.0, kHuge, false);
  s.efficiency = r.number(*device, "device", "efficiency", std::nullopt, 0.0, 1.0, true);
  if (s.flops() < 1.0) {
    r.fail(device->get("efficiency")->source(), "device.efficiency",
           fmt::format("{:g} leaves {:g} FLOP/s of the peak: expected at least 1", s.efficiency,
                       s.flops()));
  }
  s.memory_bytes = r.number(*device, "device", "memory_bytes", std::nullopt, 1.0, kHuge, false);
  const auto* network = r.table(root, "", "network");
  if (network == nullptr) r.fail(root.source(), "network", "missing");
  r.only(*network, "network", {"topology", "devices_per_node", "intra", "inter"});
  const auto topology =
      r.choice(*network, "network", "topology", "switched", {"switched", "chain"});
  s.topology = topology == "chain" ? Topology::Chain : Topology::Switched;
  s.devices_per_node =
      static_cast<std::int32_t>(r.integer(*network, "network", "devices_per_node", 8, 1, 1 << 20));
  if (s.topology == Topology::Chain && network->get("devices_per_node") != nullptr) {
    r.fail(network->get("devices_per_node")->source(), "network.devices_per_node",
           "a chain has no nodes: leave devices_per_node out");
  }
  s.intra = read_link(r, *network, "network", "intra");
  if (s.topology == Topology::Switched) {
    s.inter = read_link(r, *network, "network", "inter");
  } else if (network->get("inter") != nullptr) {
    r.fail(network->get("inter")->source(), "network.inter",
           "a chain has one link class: give [network.intra] only");
  }
  return s;
}

std::vector<std::string> model_presets() {
  return detail::preset_names("models");
}
std::vector<std::string> system_presets() {
  return detail::preset_names("systems");
}

std::string_view preset_text(std::string_view kind, std::string_view name) {
  return detail::preset(kind, name);
}

namespace {

template <class Config, class Parse>
Config load(const std::string& name_or_path, std::string_view kind, const char* option,
            Parse&& parse) {
  const auto text = detail::preset(kind, name_or_path);
  if (!text.empty()) return parse(text, fmt::format("(preset {})", name_or_path));
  std::error_code ec;
  if (!std::filesystem::exists(name_or_path, ec)) {
    throw Error(fmt::format("{} {}: no such preset or file (presets: {})", option, name_or_path,
                            fmt::join(detail::preset_names(kind), ", ")));
  }
  return parse(read_file(name_or_path), name_or_path);
}

}  // namespace

ModelConfig load_model(const std::string& name_or_path) {
  return load<ModelConfig>(name_or_path, "models", "--model", parse_model);
}

SystemConfig load_system(const std::string& name_or_path) {
  return load<SystemConfig>(name_or_path, "systems", "--system", parse_system);
}

}  // namespace pipetab::io
