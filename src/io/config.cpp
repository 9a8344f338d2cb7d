#include "pipetab/io/config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "presets.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "pipetab/error.hpp"
#include "pipetab/io/table_file.hpp"

namespace pipetab::io {
namespace {

const char* type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number with a fraction";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date or time";
  }
}

// Reads keys of one TOML document strictly: every key must be expected, every value typed and
// in range; errors carry the file, the line and column of the key, and its dotted path.
class Reader {
 public:
  Reader(std::string_view text, const std::string& file) : file_(file) {
    try {
      root_ = toml::parse(text, file);
    } catch (const toml::parse_error& e) {
      throw ParseError(file_, static_cast<int>(e.source().begin.line),
                       static_cast<int>(e.source().begin.column),
                       fmt::format("invalid TOML: {}", e.description()));
    }
  }

  const toml::table& root() const { return root_; }

  [[noreturn]] void fail(const toml::source_region& where, const std::string& path,
                         const std::string& message) const {
    throw ParseError(file_, std::max(1, static_cast<int>(where.begin.line)),
                     std::max(1, static_cast<int>(where.begin.column)),
                     path.empty() ? message : fmt::format("key '{}': {}", path, message));
  }

  // Every key of `table` must be in `allowed`.
  void only(const toml::table& table, const std::string& prefix,
            std::initializer_list<std::string_view> allowed) const {
    for (auto&& [key, node] : table) {
      if (std::find(allowed.begin(), allowed.end(), key.str()) == allowed.end()) {
        fail(key.source(), join(prefix, key.str()),
             fmt::format("unknown key (expected: {})", fmt::join(allowed, ", ")));
      }
    }
  }

  const toml::table* table(const toml::table& parent, const std::string& prefix,
                           std::string_view key) const {
    const toml::node* node = parent.get(key);
    if (node == nullptr) return nullptr;
    if (!node->is_table())
      fail(node->source(), join(prefix, key),
           fmt::format("expected a table, got {}", type_name(*node)));
    return node->as_table();
  }

  const toml::node& require(const toml::table& table, const std::string& prefix,
                            std::string_view key) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      fail(table.source(), prefix.empty() ? std::string(key) : prefix,
           prefix.empty() ? std::string("missing") : fmt::format("missing key '{}'", key));
    }
    return *node;
  }

  std::int64_t integer(const toml::table& table, const std::string& prefix, std::string_view key,
                       std::optional<std::int64_t> fallback, std::int64_t lo,
                       std::int64_t hi) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (fallback) return *fallback;
      require(table, prefix, key);
    }
    const auto path = join(prefix, key);
    if (!node->is_integer())
      fail(node->source(), path, fmt::format("expected an integer, got {}", type_name(*node)));
    const auto value = node->as_integer()->get();
    if (value < lo || value > hi)
      fail(node->source(), path, fmt::format("{} is out of range ({}..{})", value, lo, hi));
    return value;
  }

  // A number (integer or float); `inf` only where allowed; within [lo, hi] (lo open if `open`).
  double number(const toml::table& table, const std::string& prefix, std::string_view key,
                std::optional<double> fallback, double lo, double hi, bool open_lo,
                bool allow_inf = false) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) {
      if (fallback) return *fallback;
      require(table, prefix, key);
    }
    const auto path = join(prefix, key);
    double value = 0.0;
    if (node->is_integer()) {
      value = static_cast<double>(node->as_integer()->get());
    } else if (node->is_floating_point()) {
      value = node->as_floating_point()->get();
    } else {
      fail(node->source(), path, fmt::format("expected a number, got {}", type_name(*node)));
    }
    if (allow_inf && std::isinf(value) && value > 0) return value;
    if (std::isnan(value) || std::isinf(value))
      fail(node->source(), path, fmt::format("{} is not allowed here", value));
    if ((open_lo ? value <= lo : value < lo) || value > hi) {
      fail(node->source(), path,
           fmt::format("{} is out of range ({}{:g} .. {:g}{})", value, open_lo ? "above " : "", lo,
                       hi, allow_inf ? ", or inf" : ""));
    }
    return value;
  }

  bool boolean(const toml::table& table, const std::string& prefix, std::string_view key,
               bool fallback) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return fallback;
    if (!node->is_boolean()) {
      fail(node->source(), join(prefix, key),
           fmt::format("expected true or false, got {}", type_name(*node)));
    }
    return node->as_boolean()->get();
  }

  std::optional<std::string> string(const toml::table& table, const std::string& prefix,
                                    std::string_view key) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_string())
      fail(node->source(), join(prefix, key),
           fmt::format("expected a string, got {}", type_name(*node)));
    return node->as_string()->get();
  }

  // A string that must be one of `choices`.
  std::string choice(const toml::table& table, const std::string& prefix, std::string_view key,
                     std::string fallback, std::initializer_list<std::string_view> choices) const {
    const auto value = string(table, prefix, key);
    if (!value) return fallback;
    if (std::find(choices.begin(), choices.end(), *value) == choices.end()) {
      fail(table.get(key)->source(), join(prefix, key),
           fmt::format("'{}' is not one of: {}", *value, fmt::join(choices, ", ")));
    }
    return *value;
  }

  static std::string join(const std::string& prefix, std::string_view key) {
    return prefix.empty() ? std::string(key) : fmt::format("{}.{}", prefix, key);
  }

 private:
  std::string file_;
  toml::table root_;
};

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
