#include "pipetab/io/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include "config_reader.hpp"
#include "presets.hpp"
#include "toml_reader.hpp"
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "pipetab/error.hpp"
#include "pipetab/io/hf_config.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/names.hpp"

namespace pipetab::io {
namespace {

constexpr double kHuge = 1e30;

std::string default_name(const std::string& file) {
  return std::filesystem::path(file).stem().string();
}

}  // namespace

void only_transformer_keys(const Reader& r, const toml::table& t, const std::string& p,
                           std::span<const std::string_view> more) {
  // The architecture's keys, then the job's and layout's that older files carry.
  std::vector<std::string_view> allowed(kTransformerJobKeys.begin(), kTransformerJobKeys.end());
  allowed.insert(allowed.end(), more.begin(), more.end());
  r.only(t, p, {"layers",         "hidden",        "heads",
                "kv_heads",       "head_dim",      "ffn_hidden",
                "vocab",          "gated_mlp",     "learned_positions",
                "rotary",         "qk_norm",       "dropout",
                "tie_embeddings", "mtp_layers",    "attention",
                "q_lora_rank",    "kv_lora_rank",  "qk_rope_head_dim",
                "v_head_dim",     "hybrid_pattern"},
         allowed);
}

namespace {

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
  // The medium and NVLS are the node's: NCCL's network hops have constants of their own.
  // How many NICs a collective spreads over is the network's.
  static constexpr std::array<std::string_view, 2> kNodeKeys{"medium", "nvls_efficiency"};
  static constexpr std::array<std::string_view, 1> kNetworkKeys{"collective_nics"};
  r.only(*t, p,
         {"latency_s", "bandwidth", "collective_efficiency", "p2p_latency_s", "p2p_efficiency",
          "alltoall_latency_s", "alltoall_efficiency", "deepep_efficiency"},
         key == "intra" ? std::span<const std::string_view>(kNodeKeys)
                        : std::span<const std::string_view>(kNetworkKeys));
  LinkSpec link;
  if (t->get("medium") != nullptr) {
    link.medium = r.choice(*t, p, "medium", "", {"nvlink", "pcie"}) == "pcie" ? LinkMedium::Pcie
                                                                              : LinkMedium::NvLink;
  }
  link.nvls_efficiency = r.number(*t, p, "nvls_efficiency", 0.0, 0.0, 1.0, false);
  if (link.nvls_efficiency > 0.0 && link.medium != LinkMedium::NvLink) {
    r.fail(t->get("nvls_efficiency")->source(), Reader::join(p, "nvls_efficiency"),
           "NVLink SHARP runs in an NVSwitch: give medium = \"nvlink\" with it");
  }
  link.collective_nics = r.number(*t, p, "collective_nics", 0.0, 0.0, 1e6, false);
  if (link.collective_nics > 0.0 && link.collective_nics < 1.0) {
    r.fail(t->get("collective_nics")->source(), Reader::join(p, "collective_nics"),
           "a collective reaches at least one NIC of a node (0: every GPU's)");
  }
  link.latency_s = r.number(*t, p, "latency_s", std::nullopt, 0.0, 1e3, false);
  link.bandwidth = r.number(*t, p, "bandwidth", std::nullopt, 1.0, kHuge, false, true);
  link.collective_efficiency = r.number(*t, p, "collective_efficiency", 1.0, 0.0, 1.0, true);
  if (t->get("p2p_latency_s") != nullptr)
    link.p2p_latency_s = r.number(*t, p, "p2p_latency_s", std::nullopt, 0.0, 1e3, false);
  link.p2p_efficiency = r.number(*t, p, "p2p_efficiency", 1.0, 0.0, 1.0, true);
  if (t->get("alltoall_latency_s") != nullptr)
    link.alltoall_latency_s = r.number(*t, p, "alltoall_latency_s", std::nullopt, 0.0, 1e3, false);
  if (t->get("alltoall_efficiency") != nullptr)
    link.alltoall_efficiency = r.number(*t, p, "alltoall_efficiency", std::nullopt, 0.0, 1.0, true);
  if (t->get("deepep_efficiency") != nullptr)
    link.deepep_efficiency = r.number(*t, p, "deepep_efficiency", std::nullopt, 0.0, 1.0, true);
  // A tiny efficiency (1e-300) left less than a byte per second, and the simulation then failed
  // without naming the file or the key.
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"collective_efficiency", link.collective_efficiency},
        {"p2p_efficiency", link.p2p_efficiency},
        {"alltoall_efficiency", link.alltoall_share()},
        {"deepep_efficiency", link.deepep_share()}}) {
    if (std::isfinite(link.bandwidth) && link.bandwidth * value < 1.0) {
      r.fail(t->get(name)->source(), Reader::join(p, name),
             fmt::format("{:g} leaves {:g} B/s of the link's {:g} B/s: expected at least 1 B/s",
                         value, link.bandwidth * value, link.bandwidth));
    }
  }
  return link;
}

// [device.peak_flops]: one number for every precision, or a table of them by name. Absent: the
// base device's (a preset's), if there is one.
void read_peaks(const Reader& r, const toml::table& device, DeviceSpec& spec, bool based) {
  const toml::node* node = device.get("peak_flops");
  if (node == nullptr && based) return;
  if (node == nullptr) node = &r.require(device, "device", "peak_flops");
  if (const auto* table = node->as_table()) {
    const std::string p = "device.peak_flops";
    r.only(*table, p, {"fp32", "tf32", "fp16", "bf16", "fp8", "fp4"});
    if (table->empty()) r.fail(table->source(), p, "expected at least one precision");
    for (std::size_t i = 0; i < kPrecisions; ++i) {
      spec.peak_flops[i] = r.number(*table, p, kPrecisionNames[i], 0.0, 1.0, kHuge, false);
    }
    return;
  }
  // A lower bound of 1 FLOP/s (and of 1 B/s for links) keeps every simulated time finite.
  spec.peak_flops.fill(r.number(device, "device", "peak_flops", std::nullopt, 1.0, kHuge, false));
}

// A key's fallback: the base device's value when there is one, else `none` (required when unset).
std::optional<double> from(bool based, double base, std::optional<double> none = std::nullopt) {
  return based ? std::optional<double>(base) : none;
}

// `tiles = [[M, N], ...]`, each a tile of M × N output elements.
std::vector<GemmTile> read_tiles(const Reader& r, const toml::node& node, const std::string& path) {
  const auto* array = node.as_array();
  if (array == nullptr || array->empty()) {
    r.fail(node.source(), path, "expected a non-empty array of [tile_m, tile_n] pairs");
  }
  std::vector<GemmTile> tiles;
  for (const auto& item : *array) {
    const auto* pair = item.as_array();
    const auto dimension = [&](std::size_t i) -> std::int32_t {
      const auto* v = pair->get(i)->as_integer();
      if (v == nullptr || v->get() < 1 || v->get() > (1 << 16)) {
        r.fail(pair->get(i)->source(), path,
               fmt::format("a tile's dimensions are integers in 1..{}", 1 << 16));
      }
      return static_cast<std::int32_t>(v->get());
    };
    if (pair == nullptr || pair->size() != 2) {
      r.fail(item.source(), path, "each tile is a pair [tile_m, tile_n] of integers");
    }
    tiles.push_back({dimension(0), dimension(1)});
  }
  return tiles;
}

void read_gemm(const Reader& r, const toml::table& t, GemmModel& g, bool based) {
  const std::string p = "device.gemm";
  r.only(t, p, {"sms", "tile_m", "tile_n", "tiles", "split_k_min", "max_efficiency", "k_overhead"});
  g.sms = static_cast<std::int32_t>(r.integer(
      t, p, "sms", based ? std::optional<std::int64_t>(g.sms) : std::nullopt, 1, 1 << 20));
  if (const auto* tiles = t.get("tiles")) {
    for (const auto* key : {"tile_m", "tile_n"}) {
      if (t.get(key) != nullptr) {
        r.fail(t.get(key)->source(), p + "." + key,
               "give either tiles (the set the library picks from) or tile_m and tile_n (one "
               "tile), not both");
      }
    }
    g.tiles = read_tiles(r, *tiles, p + ".tiles");
  } else if (t.get("tile_m") != nullptr || t.get("tile_n") != nullptr) {
    const GemmTile base = g.tiles.empty() ? GemmTile{} : g.tiles.front();
    g.tiles = {{static_cast<std::int32_t>(r.integer(t, p, "tile_m", base.m, 1, 1 << 16)),
                static_cast<std::int32_t>(r.integer(t, p, "tile_n", base.n, 1, 1 << 16))}};
  }
  g.split_k_min =
      static_cast<std::int32_t>(r.integer(t, p, "split_k_min", g.split_k_min, 0, 1 << 20));
  g.max_efficiency =
      r.number(t, p, "max_efficiency", from(based, g.max_efficiency), 0.0, 1.0, true);
  g.k_overhead = r.number(t, p, "k_overhead", g.k_overhead, 0.0, 1e9, false);
}

// `key` of [device.attention.KERNEL]: one number, or with `seq` an array of one per length, each
// in (0, `max`] (efficiencies: 1; cudnn_fp8's speed-ups: 2).
std::vector<double> read_efficiencies(const Reader& r, const toml::table& t, const std::string& p,
                                      std::string_view key, std::size_t points, double max = 1.0) {
  const std::string path = p + "." + std::string(key);
  const toml::node& node = r.require(t, p, key);
  if (points == 0) return {r.number(t, p, key, std::nullopt, 0.0, max, true)};
  const auto* array = node.as_array();
  if (array == nullptr || array->size() != points) {
    r.fail(node.source(), path,
           fmt::format("expected an array of {} numbers, one per length of seq", points));
  }
  std::vector<double> out;
  for (const auto& item : *array) {
    const auto v = item.value<double>();
    if (!v || !(*v > 0.0) || *v > max) {
      r.fail(item.source(), path, fmt::format("each is a number in (0, {:g}]", max));
    }
    out.push_back(*v);
  }
  return out;
}

// A [device.attention.KERNEL] table: `seq` (optional, ascending) and one figure per length under
// `forward_key` and `backward_key`.
AttentionCurve read_curve(const Reader& r, const toml::table& t, const std::string& p,
                          std::string_view forward_key, std::string_view backward_key, double max) {
  r.only(t, p, {"seq", forward_key, backward_key});
  AttentionCurve curve;
  if (const toml::node* seq = t.get("seq")) {
    const auto* array = seq->as_array();
    if (array == nullptr || array->size() < 2) {
      r.fail(seq->source(), p + ".seq",
             "expected an array of at least two sequence lengths (one point: leave seq out)");
    }
    for (const auto& item : *array) {
      const auto v = item.value<double>();
      if (!v || !(*v >= 1.0) || *v > 1e9 || (!curve.seq.empty() && !(*v > curve.seq.back()))) {
        r.fail(item.source(), p + ".seq",
               "sequence lengths are numbers in 1 .. 1e9, strictly ascending");
      }
      curve.seq.push_back(*v);
    }
  }
  curve.forward = read_efficiencies(r, t, p, forward_key, curve.seq.size(), max);
  curve.backward = read_efficiencies(r, t, p, backward_key, curve.seq.size(), max);
  return curve;
}

// [device.attention]: forward_efficiency and backward_efficiency for every fused kernel alike
// (older files), and [device.attention.KERNEL] tables, each a kernel's own figures, flat or by
// sequence length (system.hpp's AttentionCurve). A preset-based device keeps the preset's
// kernels where the file gives none; a device without any figure runs every kernel at its
// GEMMs' best efficiency.
void read_attention(const Reader& r, const toml::table& device, DeviceSpec& d, bool based) {
  if (!based) d.attention.fill(AttentionCurve::flat(d.gemm.max_efficiency, d.gemm.max_efficiency));
  const toml::table* attention = r.table(device, "device", "attention");
  if (attention == nullptr) return;
  const std::string p = "device.attention";
  r.only(*attention, p,
         {"forward_efficiency", "backward_efficiency", "flash2", "flash3", "cudnn", "triton",
          "cudnn_fp8"});
  const bool flat = attention->get("forward_efficiency") != nullptr ||
                    attention->get("backward_efficiency") != nullptr;
  if (flat) {
    const double forward = r.number(*attention, p, "forward_efficiency",
                                    d.attention.front().forward.front(), 0.0, 1.0, true);
    const double backward = r.number(*attention, p, "backward_efficiency",
                                     d.attention.front().backward.front(), 0.0, 1.0, true);
    d.attention.fill(AttentionCurve::flat(forward, backward));
  }
  bool any_kernel = false;
  for (std::size_t k = 0; k < kAttentionKernels; ++k) {
    const std::string_view name = kAttentionKernelNames[k];
    const toml::table* t = r.table(*attention, p, name);
    if (t == nullptr) continue;
    const std::string kp = p + "." + std::string(name);
    if (flat) {
      r.fail(t->source(), kp,
             "not with device.attention.forward_efficiency: give every kernel's figures in its "
             "own table, or one pair for all");
    }
    if (!any_kernel && !based) d.attention.fill({});  // the kernels a file names are all it has
    any_kernel = true;
    d.attention[k] = read_curve(r, *t, kp, "forward_efficiency", "backward_efficiency", 1.0);
  }
  // FP8 attention as a speed-up over cuDNN's BF16 kernel: at most FP8's peak over BF16's, twice.
  if (const toml::table* t = r.table(*attention, p, "cudnn_fp8")) {
    d.cudnn_fp8_speedup =
        read_curve(r, *t, p + ".cudnn_fp8", "forward_speedup", "backward_speedup", 2.0);
  }
}

SystemConfig parse_system_at(std::string_view text, const std::string& file, int depth);

// [device]. With `preset = "NAME"` every key defaults to that system preset's device.
void read_device(const Reader& r, const toml::table& device, DeviceSpec& d, int depth) {
  r.only(device, "device",
         {"preset",
          "name",
          "peak_flops",
          "clock_scale",
          "efficiency",
          "memory_bytes",
          "memory_reserve",
          "context_bytes",
          "memory_bandwidth",
          "memory_efficiency",
          "gemm_memory_efficiency",
          "kernel_overhead_s",
          "step_overhead_s",
          "host_launch_s",
          "comm_slowdown",
          "overlapped_deepep_efficiency",
          "gemm",
          "gemm_fp8",
          "gemm_mxfp8",
          "gemm_nvfp4",
          "attention",
          "compute_capability"});
  bool based = false;
  if (const auto preset = r.string(device, "device", "preset")) {
    const auto text = detail::preset("systems", *preset);
    if (text.empty() || depth > 0) {
      r.fail(device.get("preset")->source(), "device.preset",
             text.empty() ? fmt::format("'{}' is not a system preset (presets: {})", *preset,
                                        fmt::join(detail::preset_names("systems"), ", "))
                          : std::string("a preset's device cannot name a preset in turn"));
    }
    d = parse_system_at(text, fmt::format("(preset {})", *preset), depth + 1).device;
    based = true;
  }
  d.name = r.string(device, "device", "name").value_or(d.name);
  read_peaks(r, device, d, based);
  d.clock_scale = r.number(device, "device", "clock_scale", d.clock_scale, 0.01, 1.0, false);
  d.compute_capability =
      r.number(device, "device", "compute_capability", d.compute_capability, 0.0, 100.0, false);
  d.memory_bytes =
      r.number(device, "device", "memory_bytes", from(based, d.memory_bytes), 1.0, kHuge, false);
  if (device.get("memory_reserve") != nullptr)
    d.memory_reserve = r.number(device, "device", "memory_reserve", std::nullopt, 0.0, 0.9, true);
  d.context_bytes = r.number(device, "device", "context_bytes", d.context_bytes, 0.0, 1e12, false);
  if (device.get("efficiency") != nullptr) {
    d.flat_efficiency = r.number(device, "device", "efficiency", std::nullopt, 0.0, 1.0, true);
    for (const double peak : d.peak_flops) {
      if (peak > 0.0 && peak * *d.flat_efficiency < 1.0) {
        r.fail(device.get("efficiency")->source(), "device.efficiency",
               fmt::format("{:g} leaves {:g} FLOP/s of the peak: expected at least 1",
                           *d.flat_efficiency, peak * *d.flat_efficiency));
      }
    }
    if (device.get("gemm") != nullptr) {
      r.fail(device.get("gemm")->source(), "device.gemm",
             "not with device.efficiency: give the FLOP-proportional efficiency or the "
             "operator-level model's [device.gemm], not both");
    }
  }
  d.memory_bandwidth =
      r.number(device, "device", "memory_bandwidth",
               from(based || d.flat_efficiency.has_value(), d.memory_bandwidth), 1.0, kHuge, false);
  d.memory_efficiency =
      r.number(device, "device", "memory_efficiency", d.memory_efficiency, 0.0, 1.0, true);
  if (device.get("memory_efficiency") != nullptr &&
      d.memory_bandwidth * d.memory_efficiency < 1.0) {
    r.fail(device.get("memory_efficiency")->source(), "device.memory_efficiency",
           fmt::format("{:g} leaves {:g} B/s of the memory bandwidth: expected at least 1 B/s",
                       d.memory_efficiency, d.memory_bandwidth * d.memory_efficiency));
  }
  d.gemm_memory_efficiency = r.number(device, "device", "gemm_memory_efficiency",
                                      d.gemm_memory_efficiency, 0.0, 1.0, true);
  d.kernel_overhead_s =
      r.number(device, "device", "kernel_overhead_s", d.kernel_overhead_s, 0.0, 1.0, false);
  d.step_overhead_s =
      r.number(device, "device", "step_overhead_s", d.step_overhead_s, 0.0, 1.0, false);
  d.host_launch_s = r.number(device, "device", "host_launch_s", d.host_launch_s, 0.0, 1.0, false);
  d.comm_slowdown = r.number(device, "device", "comm_slowdown", d.comm_slowdown, 0.0, 10.0, false);
  d.overlapped_deepep_efficiency = r.number(device, "device", "overlapped_deepep_efficiency",
                                            d.overlapped_deepep_efficiency, 0.0, 1.0, true);
  if (!d.flat_efficiency) {
    const toml::table* gemm = r.table(device, "device", "gemm");
    if (gemm == nullptr && !based) {
      r.fail(device.source(), "device.gemm",
             "missing: the operator-level model needs the GEMM efficiency model [device.gemm] "
             "(sms, max_efficiency, ...), or give device.efficiency for the FLOP-proportional one");
    }
    const GemmModel base_fp8 = d.gemm_fp8;  // a preset's, when based on one
    const std::optional<GemmModel> base_mxfp8 = d.gemm_mxfp8;
    const std::optional<GemmModel> base_nvfp4 = d.gemm_nvfp4;
    if (gemm != nullptr) read_gemm(r, *gemm, d.gemm, based);
    // FP8 GEMMs: the BF16 model's tiles; the efficiency of [device.gemm_fp8], else the base
    // preset's, else the BF16 model's. MXFP8 GEMMs the same way, but a device has them only where
    // a file (its own or its base preset's) gives [device.gemm_mxfp8].
    const GemmModel bf16 = d.gemm;
    const auto read_efficiency = [&](std::string_view key, GemmModel& model) {
      const toml::table* t = r.table(device, "device", std::string(key));
      if (t == nullptr) return false;
      const std::string p = "device." + std::string(key);
      r.only(*t, p, {"max_efficiency", "k_overhead"});
      model.max_efficiency =
          r.number(*t, p, "max_efficiency", model.max_efficiency, 0.0, 1.0, true);
      model.k_overhead = r.number(*t, p, "k_overhead", model.k_overhead, 0.0, 1e9, false);
      return true;
    };
    const auto with_tiles = [&](const GemmModel& efficiencies) {
      GemmModel m = bf16;
      m.max_efficiency = efficiencies.max_efficiency;
      m.k_overhead = efficiencies.k_overhead;
      return m;
    };
    d.gemm_fp8 = based ? with_tiles(base_fp8) : bf16;
    read_efficiency("gemm_fp8", d.gemm_fp8);
    GemmModel mxfp8 = base_mxfp8 ? with_tiles(*base_mxfp8) : d.gemm_fp8;
    const bool has_mxfp8 = read_efficiency("gemm_mxfp8", mxfp8);
    d.gemm_mxfp8.reset();
    if (has_mxfp8 || base_mxfp8) d.gemm_mxfp8 = mxfp8;
    GemmModel nvfp4 = base_nvfp4 ? with_tiles(*base_nvfp4) : d.gemm_fp8;
    const bool has_nvfp4 = read_efficiency("gemm_nvfp4", nvfp4);
    d.gemm_nvfp4.reset();
    if (has_nvfp4 || base_nvfp4) d.gemm_nvfp4 = nvfp4;
  } else {
    for (const char* key : {"gemm_fp8", "gemm_mxfp8", "gemm_nvfp4"}) {
      if (device.get(key) != nullptr) {
        r.fail(device.get(key)->source(), fmt::format("device.{}", key),
               "not with device.efficiency: the FLOP-proportional model has no GEMM model");
      }
    }
  }
  read_attention(r, device, d, based);
}

}  // namespace

ModelConfig parse_model(std::string_view text, const std::string& file) {
  const Reader r(text, file);
  const auto& root = r.root();
  r.only(root, "", {"name", "description", "source", "transformer", "explicit", "moe", "mamba"});
  ModelConfig model;
  model.name = r.string(root, "", "name").value_or(default_name(file));
  model.description = r.string(root, "", "description").value_or("");
  (void)r.string(root, "", "source");
  const auto* transformer = r.table(root, "", "transformer");
  const auto* explicit_costs = r.table(root, "", "explicit");
  if ((transformer == nullptr) == (explicit_costs == nullptr)) {
    r.fail(root.source(), "", "expected exactly one of the tables [transformer] and [explicit]");
  }
  if (transformer) {
    only_transformer_keys(r, *transformer, "transformer");
    auto t = read_transformer(r, *transformer, "transformer");
    model.defaults = transformer_settings(r, *transformer, "transformer");
    if (const auto* moe = r.table(root, "", "moe")) {
      r.only(*moe, "moe", {}, kMoeKeys);
      t.moe = read_moe(r, *moe, "moe", t);
      const auto more = moe_settings(r, *moe, "moe");
      model.defaults.insert(model.defaults.end(), more.begin(), more.end());
    }
    if (const auto* mamba = r.table(root, "", "mamba")) {
      r.only(*mamba, "mamba", {}, kMambaKeys);
      t.mamba = read_mamba(r, *mamba, "mamba", t, mamba->source());
    } else if (block_counts(t.hybrid_pattern, 0, t.layers)[index(BlockKind::Mamba)] > 0) {
      r.fail(transformer->get("hybrid_pattern")->source(), "transformer.hybrid_pattern",
             "Mamba layers (M) need their mixer: give a [mamba] table (heads, head_dim, state, "
             "groups, conv_kernel, chunk)");
    }
    if (block_counts(t.hybrid_pattern, 0, t.layers)[index(BlockKind::Moe)] > 0 && !t.moe) {
      r.fail(transformer->get("hybrid_pattern")->source(), "transformer.hybrid_pattern",
             "mixture-of-experts layers (E) need their experts: give a [moe] table");
    }
    if (!model.defaults.empty()) {
      std::string keys;
      for (const auto& d : model.defaults)
        keys += fmt::format("{}{}", keys.empty() ? "" : ", ", d.key);
      model.notes.push_back(fmt::format(
          "{}: the model file also sets the job and layout's {}: read as defaults, under a job "
          "file (--job) and the flags",
          file, keys));
    }
    model.spec = std::move(t);
  } else if (const auto* moe = root.get("moe")) {
    r.fail(moe->source(), "moe", "experts replace a transformer's MLP: [moe] needs [transformer]");
  } else if (const auto* mamba = root.get("mamba")) {
    r.fail(mamba->source(), "mamba",
           "a Mamba mixer is a hybrid transformer's: [mamba] needs [transformer]");
  } else {
    model.spec = read_explicit(r, *explicit_costs);
  }
  return model;
}

namespace {

// [nccl]: the channels NCCL's logs print on the system (system.hpp, NcclSpec). NCCL builds at
// most MAXCHANNELS = 64 (src/include/device.h:91).
NcclSpec read_nccl(const Reader& r, const toml::table& t) {
  r.only(t, "nccl",
         {"channels", "inter_channels", "nvls_channels", "p2p_channels_per_peer",
          "inter_p2p_channels"});
  const auto count = [&](const char* key, std::optional<std::int64_t> fallback,
                         std::int64_t least) {
    return static_cast<std::int32_t>(r.integer(t, "nccl", key, fallback, least, 64));
  };
  NcclSpec n;
  n.channels = count("channels", std::nullopt, 1);
  n.inter_channels = count("inter_channels", n.channels, 1);
  n.nvls_channels = count("nvls_channels", 0, 0);
  n.p2p_channels_per_peer = count("p2p_channels_per_peer", std::nullopt, 1);
  n.inter_p2p_channels = count("inter_p2p_channels", n.inter_channels, 1);
  return n;
}

SystemConfig parse_system_at(std::string_view text, const std::string& file, int depth) {
  const Reader r(text, file);
  const auto& root = r.root();
  r.only(root, "", {"name", "description", "source", "device", "network", "host", "nccl"});
  SystemConfig s;
  s.name = r.string(root, "", "name").value_or(default_name(file));
  s.description = r.string(root, "", "description").value_or("");
  s.source = r.string(root, "", "source").value_or("");
  const auto* device = r.table(root, "", "device");
  if (device == nullptr) r.fail(root.source(), "device", "missing");
  read_device(r, *device, s.device, depth);
  const auto* network = r.table(root, "", "network");
  if (network == nullptr) r.fail(root.source(), "network", "missing");
  r.only(*network, "network",
         {"topology", "devices_per_node", "devices_per_host", "nodes", "intra", "inter"});
  const auto topology =
      r.choice(*network, "network", "topology", "switched", {"switched", "chain"});
  s.topology = topology == "chain" ? Topology::Chain : Topology::Switched;
  s.devices_per_node =
      static_cast<std::int32_t>(r.integer(*network, "network", "devices_per_node", 8, 1, 1 << 20));
  if (s.topology == Topology::Chain && network->get("devices_per_node") != nullptr) {
    r.fail(network->get("devices_per_node")->source(), "network.devices_per_node",
           "a chain has no nodes: leave devices_per_node out");
  }
  if (const auto* host = network->get("devices_per_host")) {
    if (s.topology == Topology::Chain) {
      r.fail(host->source(), "network.devices_per_host",
             "a chain has no nodes: leave devices_per_host out");
    }
    s.devices_per_host = static_cast<std::int32_t>(
        r.integer(*network, "network", "devices_per_host", 0, 1, s.devices_per_node));
    if (s.devices_per_node % s.devices_per_host != 0) {
      r.fail(host->source(), "network.devices_per_host",
             fmt::format("a node of {} GPUs is whole hosts: devices_per_host must divide "
                         "devices_per_node, got {}",
                         s.devices_per_node, s.devices_per_host));
    }
  }
  s.nodes = r.integer(*network, "network", "nodes", 0, 1, std::int64_t{1} << 40);
  if (s.topology == Topology::Chain && network->get("nodes") != nullptr) {
    r.fail(network->get("nodes")->source(), "network.nodes",
           "a chain has no nodes: leave nodes out");
  }
  s.intra = read_link(r, *network, "network", "intra");
  if (s.topology == Topology::Switched) {
    s.inter = read_link(r, *network, "network", "inter");
  } else if (network->get("inter") != nullptr) {
    r.fail(network->get("inter")->source(), "network.inter",
           "a chain has one link class: give [network.intra] only");
  }
  if (const auto* nccl = r.table(root, "", "nccl")) s.nccl = read_nccl(r, *nccl);
  if (const auto* host = r.table(root, "", "host")) {
    r.only(
        *host, "host",
        {"memory_bytes", "bandwidth", "gpus_per_link", "latency_s", "carries_nic", "h2d_slowdown"});
    s.host.memory_bytes = r.number(*host, "host", "memory_bytes", std::nullopt, 0.0, 1e18, true);
    s.host.bandwidth = r.number(*host, "host", "bandwidth", std::nullopt, 0.0, 1e15, true);
    s.host.gpus_per_link =
        static_cast<std::int32_t>(r.integer(*host, "host", "gpus_per_link", 1, 1, s.host_size()));
    if (s.host_size() % s.host.gpus_per_link != 0) {
      r.fail(host->get("gpus_per_link")->source(), "host.gpus_per_link",
             fmt::format("a host of {} GPUs is whole host links: gpus_per_link must divide it, "
                         "got {}",
                         s.host_size(), s.host.gpus_per_link));
    }
    s.host.latency_s = r.number(*host, "host", "latency_s", 0.0, 0.0, 1.0, false);
    s.host.carries_nic = r.boolean(*host, "host", "carries_nic", false);
    s.host.h2d_slowdown = r.number(*host, "host", "h2d_slowdown", 0.0, 0.0, 10.0, false);
    if (s.host.carries_nic && s.host.gpus_per_link != 1) {
      r.fail(host->get("carries_nic")->source(), "host.carries_nic",
             fmt::format("NIC traffic crosses a GPU's own PCIe port, a host link of one GPU; "
                         "with gpus_per_link = {} the link is the GPUs' switch uplink to the "
                         "CPU, which GPUDirect RDMA does not cross: set gpus_per_link = 1 or "
                         "carries_nic = false",
                         s.host.gpus_per_link));
    }
  }
  return s;
}

}  // namespace

SystemConfig parse_system(std::string_view text, const std::string& file) {
  return parse_system_at(text, file, 0);
}

namespace {

std::string number(double value) {
  if (std::isinf(value)) return "inf";
  return fmt::format("{}", value);  // the shortest text that reads back to the same double
}

// A TOML basic string: quotes, backslashes and control characters escaped (TOML 1.0 §String).
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\u{:04X}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string link_toml(const char* name, const LinkSpec& link) {
  std::string out = fmt::format(
      "\n[network.{}]\nlatency_s = {}\nbandwidth = {}\ncollective_efficiency = {}\n", name,
      number(link.latency_s), number(link.bandwidth), number(link.collective_efficiency));
  if (link.p2p_latency_s) out += fmt::format("p2p_latency_s = {}\n", number(*link.p2p_latency_s));
  if (link.p2p_efficiency != 1.0)
    out += fmt::format("p2p_efficiency = {}\n", number(link.p2p_efficiency));
  if (link.alltoall_latency_s)
    out += fmt::format("alltoall_latency_s = {}\n", number(*link.alltoall_latency_s));
  if (link.alltoall_efficiency)
    out += fmt::format("alltoall_efficiency = {}\n", number(*link.alltoall_efficiency));
  if (link.deepep_efficiency)
    out += fmt::format("deepep_efficiency = {}\n", number(*link.deepep_efficiency));
  if (link.medium)
    out += fmt::format("medium = \"{}\"\n", *link.medium == LinkMedium::Pcie ? "pcie" : "nvlink");
  if (link.nvls_efficiency > 0.0)
    out += fmt::format("nvls_efficiency = {}\n", number(link.nvls_efficiency));
  if (link.collective_nics > 0.0)
    out += fmt::format("collective_nics = {}\n", number(link.collective_nics));
  return out;
}

// [device.attention]: one pair when every kernel has the same flat figures, else a table per
// kernel the device gives, and cuDNN's FP8 speed-ups where given (read back by read_attention to
// the same curves).
std::string write_attention(const DeviceSpec& d) {
  const AttentionCurve& first = d.attention.front();
  const bool uniform = first.given() && first.seq.empty() &&
                       std::all_of(d.attention.begin(), d.attention.end(),
                                   [&](const AttentionCurve& c) { return c == first; });
  const auto values = [](const AttentionCurve& c, const std::vector<double>& v) {
    if (c.seq.empty()) return number(v.front());
    std::vector<std::string> out;
    for (const double x : v)
      out.push_back(number(x));
    return fmt::format("[{}]", fmt::join(out, ", "));
  };
  std::string out;
  const auto table = [&](std::string_view name, const AttentionCurve& c, std::string_view forward,
                         std::string_view backward) {
    out += fmt::format("\n[device.attention.{}]\n", name);
    if (!c.seq.empty()) out += fmt::format("seq = {}\n", values(c, c.seq));
    out += fmt::format("{} = {}\n{} = {}\n", forward, values(c, c.forward), backward,
                       values(c, c.backward));
  };
  if (uniform) {
    out = fmt::format("\n[device.attention]\nforward_efficiency = {}\nbackward_efficiency = {}\n",
                      number(first.forward.front()), number(first.backward.front()));
  }
  for (std::size_t k = 0; k < kAttentionKernels && !uniform; ++k) {
    if (d.attention[k].given())
      table(kAttentionKernelNames[k], d.attention[k], "forward_efficiency", "backward_efficiency");
  }
  if (d.cudnn_fp8_speedup.given())
    table("cudnn_fp8", d.cudnn_fp8_speedup, "forward_speedup", "backward_speedup");
  return out;
}

}  // namespace

std::string system_toml(const SystemConfig& s, const std::string& comment) {
  std::string out;
  std::size_t begin = 0;
  while (begin < comment.size()) {
    const auto end = comment.find('\n', begin);
    const auto line = comment.substr(begin, end == std::string::npos ? end : end - begin);
    out += line.empty() ? "#\n" : "# " + line + "\n";
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  const auto& d = s.device;
  out += fmt::format("name = {}\n", quoted(s.name));
  if (!s.source.empty()) out += fmt::format("source = {}\n", quoted(s.source));
  out += "\n[device]\n";
  if (!d.name.empty()) out += fmt::format("name = {}\n", quoted(d.name));
  if (d.clock_scale != 1.0) out += fmt::format("clock_scale = {}\n", number(d.clock_scale));
  if (d.compute_capability > 0.0)
    out += fmt::format("compute_capability = {}\n", number(d.compute_capability));
  out += fmt::format("memory_bytes = {}\n", number(d.memory_bytes));
  if (d.memory_reserve) out += fmt::format("memory_reserve = {}\n", number(*d.memory_reserve));
  if (d.context_bytes > 0.0) out += fmt::format("context_bytes = {}\n", number(d.context_bytes));
  // The efficiency only with the bandwidth it applies to (read_device refuses it alone).
  if (d.memory_bandwidth > 0.0) {
    out += fmt::format("memory_bandwidth = {}\nmemory_efficiency = {}\n",
                       number(d.memory_bandwidth), number(d.memory_efficiency));
    if (d.gemm_memory_efficiency > 0.0)
      out += fmt::format("gemm_memory_efficiency = {}\n", number(d.gemm_memory_efficiency));
  }
  out += fmt::format("kernel_overhead_s = {}\n", number(d.kernel_overhead_s));
  if (d.step_overhead_s > 0.0)
    out += fmt::format("step_overhead_s = {}\n", number(d.step_overhead_s));
  if (d.host_launch_s > 0.0) out += fmt::format("host_launch_s = {}\n", number(d.host_launch_s));
  if (d.comm_slowdown > 0.0) out += fmt::format("comm_slowdown = {}\n", number(d.comm_slowdown));
  if (d.overlapped_deepep_efficiency < 1.0)
    out +=
        fmt::format("overlapped_deepep_efficiency = {}\n", number(d.overlapped_deepep_efficiency));
  if (d.flat_efficiency) out += fmt::format("efficiency = {}\n", number(*d.flat_efficiency));
  out += "\n[device.peak_flops]\n";
  for (std::size_t i = 0; i < kPrecisions; ++i) {
    if (d.peak_flops[i] > 0.0)
      out += fmt::format("{} = {}\n", kPrecisionNames[i], number(d.peak_flops[i]));
  }
  if (!d.flat_efficiency) {
    out += fmt::format("\n[device.gemm]\nsms = {}\n", d.gemm.sms);
    if (d.gemm.tiles.size() == 1) {
      out += fmt::format("tile_m = {}\ntile_n = {}\n", d.gemm.tiles[0].m, d.gemm.tiles[0].n);
    } else {
      std::vector<std::string> tiles;
      for (const auto& tile : d.gemm.tiles)
        tiles.push_back(fmt::format("[{}, {}]", tile.m, tile.n));
      out += fmt::format("tiles = [{}]\n", fmt::join(tiles, ", "));
    }
    if (d.gemm.split_k_min > 0) out += fmt::format("split_k_min = {}\n", d.gemm.split_k_min);
    out += fmt::format("max_efficiency = {}\nk_overhead = {}\n", number(d.gemm.max_efficiency),
                       number(d.gemm.k_overhead));
    if (d.gemm_fp8 != d.gemm) {
      out += fmt::format("\n[device.gemm_fp8]\nmax_efficiency = {}\nk_overhead = {}\n",
                         number(d.gemm_fp8.max_efficiency), number(d.gemm_fp8.k_overhead));
    }
    if (d.gemm_mxfp8) {
      out += fmt::format("\n[device.gemm_mxfp8]\nmax_efficiency = {}\nk_overhead = {}\n",
                         number(d.gemm_mxfp8->max_efficiency), number(d.gemm_mxfp8->k_overhead));
    }
    if (d.gemm_nvfp4) {
      out += fmt::format("\n[device.gemm_nvfp4]\nmax_efficiency = {}\nk_overhead = {}\n",
                         number(d.gemm_nvfp4->max_efficiency), number(d.gemm_nvfp4->k_overhead));
    }
    out += write_attention(d);
  }
  out += fmt::format("\n[network]\ntopology = \"{}\"\n",
                     s.topology == Topology::Chain ? "chain" : "switched");
  if (s.topology == Topology::Switched) {
    out += fmt::format("devices_per_node = {}\n", s.devices_per_node);
    if (s.devices_per_host > 0) out += fmt::format("devices_per_host = {}\n", s.devices_per_host);
    if (s.nodes > 0) out += fmt::format("nodes = {}\n", s.nodes);
  }
  out += link_toml("intra", s.intra);
  if (s.topology == Topology::Switched) out += link_toml("inter", s.inter);
  if (s.nccl.modelled()) {
    out += fmt::format(
        "\n[nccl]\nchannels = {}\ninter_channels = {}\nnvls_channels = {}\n"
        "p2p_channels_per_peer = {}\ninter_p2p_channels = {}\n",
        s.nccl.channels, s.nccl.inter_channels, s.nccl.nvls_channels, s.nccl.p2p_channels_per_peer,
        s.nccl.inter_p2p_channels);
  }
  if (s.host.modelled()) {
    out += fmt::format("\n[host]\nmemory_bytes = {}\nbandwidth = {}\ngpus_per_link = {}\n",
                       number(s.host.memory_bytes), number(s.host.bandwidth), s.host.gpus_per_link);
    if (s.host.latency_s > 0.0) out += fmt::format("latency_s = {}\n", number(s.host.latency_s));
    if (s.host.carries_nic) out += "carries_nic = true\n";
    if (s.host.h2d_slowdown > 0.0)
      out += fmt::format("h2d_slowdown = {}\n", number(s.host.h2d_slowdown));
  }
  return out;
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
  if (std::filesystem::exists(name_or_path, ec))
    return parse(read_file(name_or_path), name_or_path);
  // A file of that name comes first; then the preset the name stands for as people write it.
  if (const auto alias = detail::preset_alias(kind, name_or_path))
    return parse(detail::preset(kind, *alias), fmt::format("(preset {})", *alias));
  const auto nearest = detail::nearest_presets(kind, name_or_path);
  throw Error(
      fmt::format("{} {}: no such preset or file{} (presets: {}; `pipetab list {}` "
                  "describes them)",
                  option, name_or_path, did_you_mean(nearest),
                  fmt::join(detail::preset_names(kind), ", "), kind));
}

}  // namespace

ModelConfig load_model(const std::string& name_or_path) {
  // A Hugging Face model: its config.json, or the folder that holds it (as a model's hub
  // repository or save_pretrained lays it out). A preset's name comes first, as for TOML files.
  if (detail::preset("models", name_or_path).empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(name_or_path, ec)) {
      const auto config = (std::filesystem::path(name_or_path) / "config.json").string();
      if (!std::filesystem::is_regular_file(config, ec)) {
        throw Error(
            fmt::format("--model {}: a folder is read as a Hugging Face model, and it "
                        "holds no config.json",
                        name_or_path));
      }
      return parse_hf_config(read_file(config), config);
    }
    if (name_or_path.ends_with(".json") && std::filesystem::exists(name_or_path, ec))
      return parse_hf_config(read_file(name_or_path), name_or_path);
  }
  ModelConfig model = load<ModelConfig>(name_or_path, "models", "--model", parse_model);
  // A preset's job keys are pipetab's documented defaults for the model (configs/models/*.toml
  // say where each comes from), not a file of the user's to point out.
  if (!detail::preset("models", name_or_path).empty() ||
      !detail::preset("models", model.name).empty())
    model.notes.clear();
  return model;
}

SystemConfig load_system(const std::string& name_or_path) {
  return load<SystemConfig>(name_or_path, "systems", "--system", parse_system);
}

}  // namespace pipetab::io
