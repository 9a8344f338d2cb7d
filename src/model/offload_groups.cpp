// What Megatron-Core's fine-grained activation offload moves of each module (Job::
// offload_modules), in the terms of the layer's activation accounting (memory.cpp), and the
// rules under which it runs. Sources, Megatron-LM @d98e8a64: transformer_layer.py
// (_set_offload_modules: the norms only where they are not an IdentityOp), attention.py and
// multi_latent_attention.py (qkv_linear around get_query_key_value_tensors, attn_proj around
// linear_proj), moe/experts.py (expert_fc1 around the grouped fc1, moe_act around the
// activation; with expert_fc1 offloaded under an FP8 recipe other than MXFP8 or NVFP4, fc1 saves
// its 16-bit input: set_save_original_input), fine_grained_activation_offload.py.
#include "pipetab/model/offload_groups.hpp"

#include <algorithm>

#include "builder.hpp"
#include "memory.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {

std::string offload_modules_text(std::uint8_t modules) {
  return name_set_text(kOffloadModuleNames, modules);
}

OffloadModulesParse parse_offload_modules(std::string_view text) {
  NameSetParse parsed = parse_name_set(kOffloadModuleNames, text, "module");
  if (parsed.error.starts_with("unknown module 'fused_group_mlp'"))
    parsed.error = "fused_group_mlp (Transformer Engine's fused grouped MLP) is not modelled";
  return {static_cast<std::uint8_t>(parsed.bits), parsed.error};
}

namespace {

bool on(const Job& job, OffloadModule m) {
  return (job.offload_modules & offload_bit(m)) != 0;
}

// The tensors a group saves: their bytes, those of them below Megatron-Core's size threshold
// left out.
struct Saved {
  double bytes = 0.0;
  void add(double elements, double bytes_per_element) {
    if (elements >= kMinOffloadedElements) bytes += elements * bytes_per_element;
  }
};

}  // namespace

std::vector<OffloadGroup> offload_groups(const Workload& run, bool moe_layer) {
  std::vector<OffloadGroup> out;
  if (run.job.offload_modules == 0) return out;
  const TransformerConfig& m = run.model;
  const Workload layer_run{moe_layer ? m : detail::dense_layer_model(m), run.job, run.layout};
  const detail::Dims d = detail::dims(layer_run);
  const bool latent = m.attention == AttentionKind::Latent;
  const bool fp8_inputs = detail::fp8_saved_inputs(run);
  const double T = d.s * d.b;
  const double u = run.layout.sequence_parallel ? d.t : 1.0;  // the norms' split
  const double e = d.e;
  const double input_e = fp8_inputs ? 1.0 : e;  // a linear's saved input (TE: saved_inputmat)
  auto group = [&](OffloadModule module, const Saved& copied, double freed,
                   std::vector<std::string_view> ops) {
    if (!on(run.job, module) || !(copied.bytes > 0.0)) return;
    out.push_back({module, copied.bytes, freed, std::move(ops)});
  };
  // attn_norm: the input norm is its own module under latent attention (TENorm); Transformer
  // Engine fuses it into the QKV linear otherwise (TELayerNormColumnParallelLinear), where
  // Megatron-Core finds an IdentityOp and skips it.
  Saved norm1;
  norm1.add(T * d.h / u, e);
  if (latent) group(OffloadModule::AttnNorm, norm1, norm1.bytes, {"layernorm1"});
  // qkv_linear: the QKV linear's input (and the fused norm's), or latent attention's
  // projections: the normalised input and the four latents.
  Saved qkv;
  if (!latent) qkv.bytes = norm1.bytes;
  qkv.add(T * d.h / u, input_e);
  if (latent) {
    for (const double width : detail::mla_kept(layer_run, d).latents)
      qkv.add(T * width, e);
    group(OffloadModule::QkvLinear, qkv, qkv.bytes,
          {"attention.all_gather", "mla.q_down.quantize", "mla.q_down", "mla.q_norm",
           "mla.q_up.quantize", "mla.q_up", "mla.kv_down.quantize", "mla.kv_down", "mla.kv_norm",
           "mla.kv_up.quantize", "mla.kv_up"});
  } else {
    group(OffloadModule::QkvLinear, qkv, qkv.bytes,
          {"layernorm1", "attention.all_gather", "qkv.quantize", "qkv"});
  }
  // core_attn: what the fused attention saves, Q, K, V and its output (its FP8 copies under FP8
  // attention) and the fp32 log-sum-exp. Its output is also the output projection's saved input
  // unless that keeps an FP8 copy: then the device frees it only with attn_proj offloaded too.
  const detail::SavedAttentionBytes kept = detail::saved_attention_bytes(run, e);
  double q = T * d.q / d.t, k = T * d.kv / d.t, v = k, o = q, heads = d.a / d.t;
  if (latent) {
    const detail::MlaKept mla = detail::mla_kept(layer_run, d);
    q = T * mla.q, k = T * mla.k, v = T * mla.v, o = T * mla.out, heads = mla.heads;
  }
  Saved core, out_saved;
  core.add(q, kept.qkv), core.add(k, kept.qkv), core.add(v, kept.qkv);
  core.add(T * heads, 4.0);
  out_saved.add(o, kept.out);
  const double core_freed = core.bytes + (fp8_inputs ? out_saved.bytes : 0.0);
  core.bytes += out_saved.bytes;
  group(OffloadModule::CoreAttn, core, core_freed,
        {"attention.cp_all_gather", "attention.cp_all_to_all", "attention.quantize",
         "attention.cp_ring", "attention.flash", "attention.cp_all_to_all.output"});
  // attn_proj: the output projection's input, an FP8 copy of the attention's output, or that
  // output again (copied twice; freed here, where core_attn's copy left the projection's hold).
  Saved proj;
  if (fp8_inputs) {
    proj.add(o, 1.0);
    group(OffloadModule::AttnProj, proj, proj.bytes, {"projection.quantize", "projection"});
  } else {
    group(OffloadModule::AttnProj, out_saved, out_saved.bytes,
          {"projection.quantize", "projection"});
  }
  if (!moe_layer || !m.moe) return out;
  // mlp_norm: the pre-MLP norm of a mixture-of-experts layer (its own TENorm; fused into fc1 in
  // a dense layer).
  Saved norm2;
  norm2.add(T * d.h / u, e);
  group(OffloadModule::MlpNorm, norm2, norm2.bytes, {"layernorm2"});
  // The experts: the busiest rank's dispatched rows (memory.cpp's moe_layer_activation_bytes).
  const MoeConfig& moe = *m.moe;
  const double etp = static_cast<double>(run.layout.etp);
  const double rows = run.job.moe.load() * T / d.t * static_cast<double>(moe.top_k) * etp;
  const double width = static_cast<double>(moe.expert_ffn_hidden) / etp;
  const bool block_scaled =
      run.job.fp8_recipe == Fp8Recipe::Mxfp8 || run.job.fp8_recipe == Fp8Recipe::Nvfp4;
  Saved fc1;
  fc1.add(rows * d.h, fp8_inputs && !block_scaled ? e : input_e);
  Saved fc1_accounted;
  fc1_accounted.add(rows * d.h, input_e);
  group(OffloadModule::ExpertFc1, fc1, fc1_accounted.bytes,
        {"experts.fc1.quantize", "experts.fc1"});
  Saved act;
  act.add(rows * (m.gated_mlp ? 2 : 1) * width, e);
  group(OffloadModule::MoeAct, act, act.bytes, {"experts.activation"});
  return out;
}

double stage_offloaded_bytes(const StageWork& w, const Workload& run) {
  if (w.layers < 1) return 0.0;
  const double layers = static_cast<double>(w.layers);
  if (run.job.offload_layers > 0) {
    const auto n = std::min(run.job.offload_layers, w.layers - 1);
    return static_cast<double>(n) * w.layer_activation_bytes / layers;
  }
  double bytes = 0.0;
  for (const bool moe : {false, true}) {
    const double count =
        moe ? static_cast<double>(w.moe_layers) : layers - static_cast<double>(w.moe_layers);
    if (!(count > 0.0)) continue;
    for (const OffloadGroup& g : offload_groups(run, moe))
      bytes += count * g.freed_bytes;
  }
  return bytes;
}

void require_offload_modules(const ModelConfig& model, const Job& job) {
  if (job.offload_modules == 0) return;
  const auto refuse = [&](const std::string& why) {
    throw OptionError(
        "offload_modules",
        fmt::format("offload_modules {}: {}", offload_modules_text(job.offload_modules), why));
  };
  const TransformerConfig* t = model.transformer();
  if (t == nullptr || t->hybrid()) {
    refuse(
        fmt::format("model '{}' is {}; Megatron-Core's fine-grained offload is modelled for "
                    "transformer layers",
                    model.name, t == nullptr ? "given by its costs" : "a hybrid pattern"));
  }
  if (job.offload_activations > 0.0 || job.offload_layers > 0) {
    refuse(fmt::format("and --offload-{}: one offload at a time",
                       job.offload_layers > 0 ? "layers" : "activations"));
  }
  if (job.recompute != Recompute::None && job.recompute != Recompute::Selective) {
    refuse(
        fmt::format("with recompute {}: Megatron-Core's fine-grained offload goes with "
                    "recompute none or selective",
                    to_string(job.recompute)));
  }
  const bool attention = on(job, OffloadModule::CoreAttn) || on(job, OffloadModule::AttnProj);
  // fine_grained_activation_offloading.md: attn_proj "Must be used together with core_attn".
  if (on(job, OffloadModule::AttnProj) && !on(job, OffloadModule::CoreAttn))
    refuse("attn_proj needs core_attn (Megatron-Core offloads the two together)");
  if (attention && job.recompute == Recompute::Selective)
    refuse("the attention core is recomputed (recompute selective): it keeps nothing to offload");
  if (attention && !job.stack.flash_attention)
    refuse("the attention runs by the math path; the offload of its scores is not modelled");
  if (on(job, OffloadModule::CoreAttn) && job.mla_recompute_up_proj && !job.fp8_attention)
    refuse("mla_recompute_up_proj frees the heads' Q, K and V that core_attn would offload");
  const bool experts = on(job, OffloadModule::ExpertFc1) || on(job, OffloadModule::MoeAct);
  if ((experts || on(job, OffloadModule::MlpNorm)) && !t->moe) {
    refuse(
        fmt::format("model '{}' has no mixture-of-experts layers: mlp_norm, expert_fc1 and "
                    "moe_act are theirs (a dense layer's pre-MLP norm is fused into fc1)",
                    model.name));
  }
  if (experts && job.moe.recompute == MoeRecompute::Mlp)
    refuse("moe_recompute mlp recomputes the experts: they keep nothing to offload");
  if (on(job, OffloadModule::AttnNorm) && t->attention != AttentionKind::Latent)
    refuse(
        "attn_norm is fused into the QKV linear without latent attention (Megatron-Core skips "
        "it as an IdentityOp); offload qkv_linear");
}

}  // namespace pipetab
