// The workload as today's stacks run it (issue 24): FP8 linears and their quantisation,
// torchtitan's recomputation policies, eager element-wise kernels, the power cap's clock, and the
// measured-run files' layout keys. Bytes and FLOPs are worked out by hand in each test.
#include <algorithm>

#include "helpers.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pipetab/cost/gemm.hpp"
#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/study/measurements.hpp"

namespace pipetab {
namespace {

using test::find_op;

// Llama 3.1 8B under its model file's job and layout.
test::ModelRun llama8b() {
  return io::load_model("llama3.1-8b");
}

using test::workload;

TEST(Fp8, LayerLinearsRunInFp8AndTheRestInBf16) {
  auto m = llama8b();
  m.job.precision = Precision::FP8;
  const auto ops = model_operators(workload(m));
  for (const char* name : {"qkv", "projection", "fc1", "fc2"})
    EXPECT_TRUE(find_op(ops.layer.forward, name)->fp8) << name;
  for (const char* name : {"qkv.input_grad", "fc2.input_grad"})
    EXPECT_TRUE(find_op(ops.layer.input_grad, name)->fp8) << name;
  EXPECT_TRUE(find_op(ops.layer.weight_grad, "fc1.weight_grad")->fp8);
  // The output layer and attention stay in BF16.
  EXPECT_FALSE(find_op(ops.output.forward, "logits")->fp8);
  EXPECT_FALSE(find_op(ops.output.weight_grad, "logits.weight_grad")->fp8);
  // qkv's input quantised by a fused cast-transpose: s·h elements, read in 16 bits and written
  // twice in FP8: (2 + 2) bytes each.
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "qkv.quantize")->bytes, 4.0 * 8192 * 4096);
  // A BF16 model has neither.
  const auto bf16_run = llama8b();
  const auto bf16 = model_operators(workload(bf16_run));
  EXPECT_FALSE(find_op(bf16.layer.forward, "qkv")->fp8);
  EXPECT_EQ(find_op(bf16.layer.forward, "qkv.quantize"), nullptr);
}

// Current scaling (tensorwise) needs a tensor's amax before its first element is cast: with
// Transformer Engine an amax pass over the 16-bit input (2 more bytes an element) and four kernels
// from one call (the amax zeroed, the amax, the scale, the cast-transpose); after a norm in the
// same module (the QKV's LayerNormLinear) the norm finds the amax and three kernels remain.
// Delayed scaling casts with the previous amax; torch.compile's torchao reduces, then casts.
TEST(Fp8, CurrentScalingReadsTheInputAgainForItsAmax) {
  auto m = llama8b();
  m.job.precision = Precision::FP8;
  ASSERT_EQ(m.job.fp8_recipe, Fp8Recipe::Tensorwise);
  const double s = 8192, h = 4096, ffn = 14336;
  struct Expected {
    const char* name;
    double bytes;
    std::int32_t inner;
  };
  const auto check = [](const PassOperators& pass, const Expected& e) {
    const Operator* op = find_op(pass.forward, e.name);
    if (op == nullptr) op = find_op(pass.input_grad, e.name);
    ASSERT_NE(op, nullptr) << e.name;
    EXPECT_DOUBLE_EQ(op->bytes, e.bytes) << e.name;
    EXPECT_EQ(op->kernels, 1) << e.name;
    EXPECT_EQ(op->inner_launches, e.inner) << e.name;
  };
  const auto te = model_operators(workload(m));
  check(te.layer, {"qkv.quantize", 4 * s * h, 2});  // the attention's heads: q = h
  for (const Expected& e : {Expected{"projection.quantize", 6 * s * h, 3},
                            Expected{"fc1.quantize", 4 * s * h, 2},  // LayerNormLinear
                            Expected{"fc2.quantize", 6 * s * ffn, 3}})
    check(te.layer, e);
  // The output gradients of fc2 and of the projection: s·h elements each.
  check(te.layer, {"fc2.quantize_grad", 6 * s * h, 3});
  check(te.layer, {"projection.quantize_grad", 6 * s * h, 3});
  // On the device: the extra read and three kernels more than delayed scaling's one.
  auto delayed = m;
  delayed.job.fp8_recipe = Fp8Recipe::Delayed;
  const auto d = model_operators(workload(delayed));
  check(d.layer, {"projection.quantize", 4 * s * h, 0});
  const auto system = io::load_system("dgx-h100");
  const auto seconds = [&](const test::ModelRun& run, const PassOperators& pass) {
    return cost::operator_cost(*find_op(pass.forward, "projection.quantize"), workload(run), system)
        .seconds;
  };
  const auto& dev = system.device;
  EXPECT_NEAR(
      seconds(m, te.layer) - seconds(delayed, d.layer),
      2 * s * h / (dev.memory_bandwidth * dev.memory_efficiency) + 3 * dev.kernel_overhead_s,
      1e-12);
  // torchao under torch.compile (16-bit saved inputs): the reduction and the cast, no norm
  // fused into the amax.
  auto compiled = m;
  compiled.job.stack.fp8_saved_inputs = false;
  const auto c = model_operators(workload(compiled));
  check(c.layer, {"qkv.quantize", 6 * s * h, 1});
  check(c.layer, {"projection.quantize", 6 * s * h, 1});
}

TEST(Fp8, CostsAtTheFp8PeakWithItsOwnGemmModel) {
  auto m = llama8b();
  m.job.precision = Precision::FP8;
  auto system = io::load_system("dgx-h100");
  const auto ops = model_operators(workload(m));
  const Operator& fc1 = *find_op(ops.layer.forward, "fc1");
  const auto fp8 = cost::operator_cost(fc1, workload(m), system);
  EXPECT_DOUBLE_EQ(fp8.efficiency, cost::gemm_efficiency(system.device.gemm_fp8, fc1.gemm));
  // With the FP8 model equal to the BF16 one, an FP8 GEMM takes the BF16 one's time scaled by
  // the peaks (989.4 / 1978.9) when compute-bound.
  system.device.gemm_fp8 = system.device.gemm;
  auto bf16_model = llama8b();
  const auto bf16_ops = model_operators(workload(bf16_model));  // kept: fc1_bf16 points into it
  const Operator& fc1_bf16 = *find_op(bf16_ops.layer.forward, "fc1");
  const auto a = cost::operator_cost(fc1, workload(m), system);
  const auto b = cost::operator_cost(fc1_bf16, workload(bf16_model), system);
  EXPECT_NEAR(a.seconds - system.device.kernel_overhead_s,
              (b.seconds - system.device.kernel_overhead_s) * 989.4 / 1978.9, 1e-12);
}

TEST(Fp8, TransformerEngineKeepsFp8WeightCopies) {
  // One byte per layer-linear parameter on top of the 16-bit weights: for Llama 3.1 8B's layer,
  // 2·h·q + 2·h·kv + 3·h·ffn = 218,103,808 parameters.
  auto fp8 = llama8b(), bf16 = llama8b();
  fp8.job.precision = Precision::FP8;
  const std::vector<std::int32_t> one{1};
  const auto a = test::stage_work(fp8, one, 1)[0];
  const auto b = test::stage_work(bf16, one, 1)[0];
  EXPECT_DOUBLE_EQ(a.fp8_weight_copy_bytes, 32.0 * 218103808);
  EXPECT_DOUBLE_EQ(a.weight_bytes, b.weight_bytes);
  fp8.job.stack.fused_elementwise = false;  // torchao casts each forward: no copy kept
  EXPECT_DOUBLE_EQ(test::stage_work(fp8, one, 1)[0].fp8_weight_copy_bytes, 0.0);
}

// FP8 weights alone (Megatron-Core's --fp8-param-gather, Megatron-Bridge's FP8 recipes): the
// layer linears' 16-bit copy goes, and the distributed optimizer all-gathers them in FP8, except
// MXFP8's, gathered in BF16 and quantised after (reuse_grad_buf_for_mxfp8_param_ag).
TEST(Fp8, Fp8ParamsKeepTheFp8WeightsAlone) {
  constexpr double linears = 32.0 * 218103808;  // Llama 3.1 8B's 32 layers, as above
  auto base = llama8b();
  base.job.precision = Precision::FP8;
  auto alone = base;
  alone.job.fp8_params = true;
  const std::vector<std::int32_t> one{1};
  const auto a = test::stage_work(base, one, 1)[0];
  const auto b = test::stage_work(alone, one, 1)[0];
  EXPECT_DOUBLE_EQ(a.weight_bytes - b.weight_bytes, 2.0 * linears);
  EXPECT_DOUBLE_EQ(b.fp8_weight_copy_bytes, a.fp8_weight_copy_bytes);
  EXPECT_DOUBLE_EQ(a.param_gather_bytes, a.weight_bytes);
  EXPECT_DOUBLE_EQ(a.param_gather_bytes - b.param_gather_bytes, linears);  // 2 bytes become 1
  auto mx = alone;
  mx.job.fp8_recipe = Fp8Recipe::Mxfp8;
  const auto c = test::stage_work(mx, one, 1)[0];
  EXPECT_DOUBLE_EQ(c.weight_bytes, b.weight_bytes);
  EXPECT_DOUBLE_EQ(c.param_gather_bytes, a.weight_bytes);
  // Without FP8, or where torchao casts 16-bit weights each forward, it is refused by name.
  auto bf16 = llama8b();
  bf16.job.fp8_params = true;
  for (const auto* run : {&bf16, &alone}) {
    auto r = *run;
    if (run == &alone) r.job.stack.fused_elementwise = false;
    try {
      require_runnable(r.model, r.job, r.layout);
      ADD_FAILURE();
    } catch (const OptionError& e) {
      EXPECT_EQ(e.key(), "fp8_params");
    }
  }
  EXPECT_NO_THROW(require_runnable(alone.model, alone.job, alone.layout));
}

// MXFP8 (Transformer Engine's MXFP8BlockScaling): block-scaled GEMMs on their own model, both
// quantised copies with a scale byte per 32 elements each, both weight copies kept; refused where
// the device has no block-scaled tensor cores.
TEST(Fp8, Mxfp8RunsOnBlackwellsBlockScaledGemms) {
  auto m = llama8b();
  m.job.precision = Precision::FP8;
  auto mx = m;
  mx.job.fp8_recipe = Fp8Recipe::Mxfp8;
  const auto ops = model_operators(workload(mx));
  // qkv's input, s·h elements: read in 16 bits, written twice in FP8 with 1/32 B of scales each.
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "qkv.quantize")->bytes,
                   (4.0 + 2.0 / 32.0) * 8192 * 4096);
  const auto system = io::load_system("dgx-b200");
  ASSERT_TRUE(system.device.gemm_mxfp8);
  const Operator& fc1 = *find_op(ops.layer.forward, "fc1");
  EXPECT_DOUBLE_EQ(cost::operator_cost(fc1, workload(mx), system).efficiency,
                   cost::gemm_efficiency(*system.device.gemm_mxfp8, fc1.gemm));
  const auto tensorwise_ops = model_operators(workload(m));  // kept: the operator points into it
  const Operator& fc1_tensorwise = *find_op(tensorwise_ops.layer.forward, "fc1");
  EXPECT_DOUBLE_EQ(cost::operator_cost(fc1_tensorwise, workload(m), system).efficiency,
                   cost::gemm_efficiency(system.device.gemm_fp8, fc1.gemm));
  // 218,103,808 layer-linear parameters per layer, 32 layers: two copies of 1 + 1/32 B each.
  const std::vector<std::int32_t> one{1};
  EXPECT_DOUBLE_EQ(test::stage_work(mx, one, 1)[0].fp8_weight_copy_bytes,
                   32.0 * 218103808 * 2 * (1 + 1.0 / 32));
  // Hopper has none: refused with the rule.
  const auto work = test::stage_work(mx, one, 1);
  try {
    (void)cost::stage_costs(mx.model, mx.job, mx.layout, work, io::load_system("dgx-h100"));
    ADD_FAILURE();
  } catch (const ParamError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_recipe mxfp8: system 'dgx-h100' (H100 SXM5 80GB) "
                                         "gives no MXFP8 GEMM model ([device.gemm_mxfp8])"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(cost::stage_costs(mx.model, mx.job, mx.layout, work, system));
}

// NVFP4 (Transformer Engine's NVFP4BlockScaling): the layer linears' GEMMs on the FP4 peak and
// their own model, the quantisation at NVFP4's measured cost, both weight copies at half a byte
// and a scale byte per 16; refused where the device has no FP4 tensor cores.
TEST(Fp8, Nvfp4RunsOnBlackwellsFp4TensorCores) {
  auto m = llama8b();
  m.job.precision = Precision::FP8;
  m.job.fp8_recipe = Fp8Recipe::Nvfp4;
  const auto ops = model_operators(workload(m));
  // MXFP8's 4 + 2/32 bytes per element times 2.689 / 1.823 ms (the B300's measured overheads).
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "qkv.quantize")->bytes,
                   (4.0 + 2.0 / 32.0) * 2.689 / 1.823 * 8192 * 4096);
  const auto system = io::load_system("gb200-nvl72");
  ASSERT_TRUE(system.device.gemm_nvfp4);
  EXPECT_EQ(system.device.peak(Precision::FP4), 2 * system.device.peak(Precision::FP8));
  const Operator& fc1 = *find_op(ops.layer.forward, "fc1");
  const auto c = cost::operator_cost(fc1, workload(m), system);
  EXPECT_DOUBLE_EQ(c.efficiency, cost::gemm_efficiency(*system.device.gemm_nvfp4, fc1.gemm));
  // At the FP4 peak: the same GEMM under MXFP8 takes longer, by at most the peaks' and models'
  // ratio (the kernel's launch, alike in both, takes some of it).
  auto mx = m;
  mx.job.fp8_recipe = Fp8Recipe::Mxfp8;
  const auto mx_ops = model_operators(workload(mx));
  const auto mx_cost =
      cost::operator_cost(*find_op(mx_ops.layer.forward, "fc1"), workload(mx), system);
  EXPECT_GT(mx_cost.seconds / c.seconds, 1.8);
  EXPECT_LE(mx_cost.seconds / c.seconds, 2 * c.efficiency / mx_cost.efficiency * (1 + 1e-12));
  const std::vector<std::int32_t> one{1};
  EXPECT_DOUBLE_EQ(test::stage_work(m, one, 1)[0].fp8_weight_copy_bytes,
                   32.0 * 218103808 * 2 * (0.5 + 1.0 / 16));
  const auto work = test::stage_work(m, one, 1);
  try {
    (void)cost::stage_costs(m.model, m.job, m.layout, work, io::load_system("dgx-h100"));
    ADD_FAILURE();
  } catch (const ParamError& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_recipe nvfp4: system 'dgx-h100' (H100 SXM5 80GB) "
                                         "gives no fp4 peak (device.peak_flops.fp4)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(cost::stage_costs(m.model, m.job, m.layout, work, system));
  // Read and written back.
  const auto back = io::parse_system(io::system_toml(system), "back.toml");
  EXPECT_EQ(back.device.gemm_nvfp4, system.device.gemm_nvfp4);
  EXPECT_EQ(back.device.peak(Precision::FP4), system.device.peak(Precision::FP4));
}

// FP8 attention (Transformer Engine's fp8_dpa): cuDNN's kernel at the device's FP8 speed-up over
// its BF16 one, Q, K, V (and dO) quantised first, and the saved tensors as TE keeps them.
TEST(Fp8, Fp8AttentionRunsCudnnsKernelAtItsSpeedup) {
  auto bf16_attention = llama8b();  // seq 8192, q = 4096, kv = 1024 (8 heads of 128)
  bf16_attention.job.precision = Precision::FP8;
  auto m = bf16_attention;
  m.job.fp8_attention = true;
  const auto system = io::load_system("dgx-h100");
  const auto ops = model_operators(workload(m));
  const auto plain = model_operators(workload(bf16_attention));
  const Operator& fwd = *find_op(ops.layer.forward, "attention.flash");
  const Operator& bwd = *find_op(ops.layer.input_grad, "attention.flash.backward");
  EXPECT_TRUE(fwd.fp8);
  EXPECT_TRUE(bwd.fp8);
  EXPECT_FALSE(find_op(plain.layer.forward, "attention.flash")->fp8);
  EXPECT_EQ(find_op(plain.layer.forward, "attention.quantize"), nullptr);
  // At 8192 the forward runs 971/600 = 1.618 times as fast (dgx-h100's cudnn_fp8), the backward
  // as in BF16; the launch is the same kernel's.
  const double launch = system.device.kernel_overhead_s;
  const auto time = [&](const ModelOperators& p, bool backward, const test::ModelRun& r) {
    const auto& pass = backward ? p.layer.input_grad : p.layer.forward;
    return cost::operator_cost(
               *find_op(pass, backward ? "attention.flash.backward" : "attention.flash"),
               workload(r), system)
               .seconds -
           launch;
  };
  EXPECT_NEAR(time(ops, false, m), time(plain, false, bf16_attention) / 1.618, 1e-12);
  EXPECT_NEAR(time(ops, true, m), time(plain, true, bf16_attention), 1e-12);
  // Current scaling quantises Q, K, V (8192 · 6144 values) with an amax pass first: read 2,
  // read 2 and write 1 byte each; dO (8192 · 4096) likewise in the backward.
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.quantize")->bytes, 5.0 * 8192 * 6144);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.input_grad, "attention.quantize_grad")->bytes,
                   5.0 * 8192 * 4096);
  auto delayed = m, mx = m;
  delayed.job.fp8_recipe = Fp8Recipe::Delayed;
  mx.job.fp8_recipe = Fp8Recipe::Mxfp8;
  EXPECT_DOUBLE_EQ(
      find_op(model_operators(workload(delayed)).layer.forward, "attention.quantize")->bytes,
      3.0 * 8192 * 6144);
  EXPECT_DOUBLE_EQ(
      find_op(model_operators(workload(mx)).layer.forward, "attention.quantize")->bytes,
      (2.0 + 2 * (1 + 1.0 / 32)) * 8192 * 6144);
  // Kept for the backward, per layer (32 of them): Q, K, V in one byte instead of two under
  // current scaling; the output in one too under delayed; under MXFP8 both copies of Q, K, V.
  const std::vector<std::int32_t> one{1};
  const double base = test::stage_work(bf16_attention, one, 1)[0].activation_bytes;
  EXPECT_DOUBLE_EQ(test::stage_work(m, one, 1)[0].activation_bytes - base, -32.0 * 8192 * 6144);
  EXPECT_DOUBLE_EQ(test::stage_work(delayed, one, 1)[0].activation_bytes - base,
                   -32.0 * 8192 * (6144 + 4096));
  EXPECT_DOUBLE_EQ(test::stage_work(mx, one, 1)[0].activation_bytes - base,
                   32.0 * 8192 * 6144 * (2.0 / 32));
}

// FP8 attention where Transformer Engine does not run it is refused with the rule.
TEST(Fp8, Fp8AttentionIsRefusedWhereTransformerEngineDoesNotRunIt) {
  const auto refused = [](test::ModelRun r, std::string_view why) {
    try {
      require_runnable(r.model, r.job, r.layout);
      ADD_FAILURE() << why;
    } catch (const OptionError& e) {
      EXPECT_EQ(e.key(), "fp8_attention");
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  auto m = llama8b();
  m.job.fp8_attention = true;
  refused(m, "needs --precision fp8");
  m.job.precision = Precision::FP8;
  EXPECT_NO_THROW(require_runnable(m.model, m.job, m.layout));
  for (const Fp8Recipe r : {Fp8Recipe::Blockwise, Fp8Recipe::Rowwise, Fp8Recipe::Nvfp4}) {
    auto other = m;
    other.job.fp8_recipe = r;
    refused(other, fmt::format("fp8_recipe {}: Transformer Engine runs", to_string(r)));
  }
  auto eager = m;
  eager.job.stack.fused_elementwise = false;
  refused(eager, "this stack runs eager element-wise kernels");
  // A system whose kernel is not cuDNN's, or that gives no FP8 figures for it.
  const std::vector<std::int32_t> one{1};
  const auto work = test::stage_work(m, one, 1);
  const auto cost_error = [&](const test::ModelRun& r, const SystemConfig& system) {
    try {
      (void)cost::stage_costs(r.model, r.job, r.layout, work, system);
    } catch (const ParamError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto flash3 = m;
  flash3.job.stack.attention_kernel = AttentionKernel::Flash3;
  EXPECT_NE(cost_error(flash3, io::load_system("dgx-h100")).find("this job runs flash3"),
            std::string::npos);
  auto h100 = io::load_system("dgx-h100");
  EXPECT_EQ(cost_error(m, h100), "");
  h100.device.cudnn_fp8_speedup = {};
  EXPECT_NE(cost_error(m, h100).find("gives no FP8 attention figures "
                                     "([device.attention.cudnn_fp8]"),
            std::string::npos);
}

// [device.attention.cudnn_fp8] is read, written back, and bounded by FP8's peak over BF16's.
TEST(Fp8, SystemFilesTakeCudnnFp8Speedups) {
  for (const char* name : {"dgx-h100", "dgx-h200", "h800", "gb200-nvl72", "dgx-b200"}) {
    const auto s = io::load_system(name);
    EXPECT_TRUE(s.device.cudnn_fp8_speedup.given()) << name;
    const auto again = io::parse_system(io::system_toml(s, "x"), "again.toml");
    EXPECT_EQ(again.device.cudnn_fp8_speedup, s.device.cudnn_fp8_speedup) << name;
    EXPECT_EQ(again.device.attention, s.device.attention) << name;
  }
  EXPECT_FALSE(io::load_system("dgx-a100").device.cudnn_fp8_speedup.given());
  const std::string head =
      "name = \"b\"\n[device]\npreset = \"dgx-h100\"\n[device.attention.cudnn_fp8]\n";
  const std::string net =
      "[network]\ndevices_per_node = 8\n[network.intra]\nlatency_s = 1e-6\nbandwidth = 9e11\n"
      "[network.inter]\nlatency_s = 5e-6\nbandwidth = 5e10\n";
  const auto flat =
      io::parse_system(head + "forward_speedup = 1.5\nbackward_speedup = 1.25\n" + net, "b.toml");
  EXPECT_DOUBLE_EQ(flat.device.cudnn_fp8_speedup.at(4096, false), 1.5);
  EXPECT_DOUBLE_EQ(flat.device.cudnn_fp8_speedup.at(4096, true), 1.25);
  try {
    (void)io::parse_system(head + "forward_speedup = 2.5\nbackward_speedup = 1\n" + net, "b.toml");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b.toml:5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("device.attention.cudnn_fp8.forward_speedup"),
              std::string::npos)
        << e.what();
  }
}

// [device.gemm_mxfp8] is read, written back, inherited from a preset, and absent where no file
// gives it.
TEST(Fp8, SystemFilesTakeGemmMxfp8) {
  const auto b200 = io::load_system("dgx-b200");
  ASSERT_TRUE(b200.device.gemm_mxfp8);
  EXPECT_EQ(b200.device.gemm_mxfp8->tiles, b200.device.gemm.tiles);
  EXPECT_LT(b200.device.gemm_mxfp8->max_efficiency, b200.device.gemm_fp8.max_efficiency);
  const auto again = io::parse_system(io::system_toml(b200, "x"), "again.toml");
  EXPECT_EQ(again.device.gemm_mxfp8, b200.device.gemm_mxfp8);
  const std::string based =
      "name = \"b\"\n[device]\npreset = \"dgx-b200\"\n[device.gemm_mxfp8]\nmax_efficiency = 0.5\n"
      "[network]\ndevices_per_node = 8\n[network.intra]\nlatency_s = 1e-6\nbandwidth = 9e11\n"
      "[network.inter]\nlatency_s = 5e-6\nbandwidth = 5e10\n";
  const auto b = io::parse_system(based, "b.toml");
  ASSERT_TRUE(b.device.gemm_mxfp8);
  EXPECT_EQ(b.device.gemm_mxfp8->max_efficiency, 0.5);
  EXPECT_EQ(b.device.gemm_mxfp8->k_overhead, b200.device.gemm_mxfp8->k_overhead);
  EXPECT_FALSE(io::load_system("dgx-h100").device.gemm_mxfp8);
}

TEST(Fp8, SystemFilesTakeGemmFp8) {
  const auto s = io::load_system("dgx-h100");
  EXPECT_EQ(s.device.gemm_fp8.tiles, s.device.gemm.tiles);
  EXPECT_NE(s.device.gemm_fp8.max_efficiency, s.device.gemm.max_efficiency);
  // Written back and read again, unchanged (calibrate -o).
  const auto again = io::parse_system(io::system_toml(s, "x"), "again.toml");
  EXPECT_EQ(again.device.gemm_fp8, s.device.gemm_fp8);
  // A system without it uses the BF16 model for FP8.
  const auto a100 = io::load_system("dgx-a100");
  EXPECT_EQ(a100.device.gemm_fp8, a100.device.gemm);
}

TEST(Recompute, SelectiveOpRecomputesElementwiseAndEveryOtherMatmul) {
  auto m = llama8b();
  m.job.recompute = Recompute::SelectiveOp;
  const auto ops = model_operators(workload(m));
  const auto none_run = llama8b();
  const auto none = model_operators(workload(none_run));
  // The head of the input-gradient pass: the forward's memory-bound kernels, then wk, wo and w3
  // (torchtitan's second, fourth and sixth matmul), never attention.
  const double h = 4096, kv = 1024, ffn = 14336, T = 8192;
  double head_flops = 0.0;
  for (const auto& op : ops.layer.input_grad) {
    if (op.name == "qkv.recompute_key" || op.name == "projection.recompute" ||
        op.name == "fc1.recompute_up")
      head_flops += op.flops;
  }
  EXPECT_DOUBLE_EQ(head_flops, 2 * T * (h * kv + h * h + h * ffn));
  EXPECT_EQ(find_op(ops.layer.input_grad, "attention.flash"), nullptr);
  EXPECT_DOUBLE_EQ(matmul_flops(ops.layer.input_grad) - matmul_flops(none.layer.input_grad),
                   head_flops);
}

TEST(Recompute, EveryOtherLayerIsHalfAFullRecompute) {
  auto full = llama8b(), half = llama8b(), none = llama8b();
  full.job.recompute = Recompute::Full;
  half.job.recompute = Recompute::EveryOtherLayer;
  const auto f = matmul_flops(model_operators(workload(full)).layer.input_grad);
  const auto e = matmul_flops(model_operators(workload(half)).layer.input_grad);
  const auto n = matmul_flops(model_operators(workload(none)).layer.input_grad);
  EXPECT_DOUBLE_EQ(e - n, (f - n) / 2);
  // Memory: the mean of keeping everything and keeping the layer input.
  const test::ModelRun &a = full, &b = half, &c = none;
  const std::vector<std::int32_t> one{1};
  const auto act = [&](const test::ModelRun& x) {
    const auto w = test::stage_work(x, one, 1)[0];
    return w.activation_bytes;
  };
  EXPECT_NEAR(act(b), (act(a) + act(c)) / 2, 1e-6 * act(c));
}

TEST(Eager, ElementwiseKernelsMoveWhatEagerPyTorchMoves) {
  auto eager = llama8b();
  eager.job.stack.fused_elementwise = false;
  const auto ops = model_operators(workload(eager));
  const auto fused_run = llama8b();
  const auto fused = model_operators(workload(fused_run));
  const double x = 8192.0 * 4096;  // the residual stream's elements
  // RMSNorm: 4e + 28 = 36 bytes per element in 8 kernels against the fused 2e = 4.
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "layernorm1")->bytes, 36 * x);
  EXPECT_EQ(find_op(ops.layer.forward, "layernorm1")->kernels, 8);
  EXPECT_DOUBLE_EQ(find_op(fused.layer.forward, "layernorm1")->bytes, 4 * x);
  // Rotary embeddings of Q and K (4096 + 1024 wide): 2e + 16 = 20 bytes per element in six
  // kernels; Transformer Engine's fused kernel reads and writes each element once, 2e = 4, in
  // one kernel for Q and one for K.
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "rotary")->bytes, 20 * 8192.0 * (4096 + 1024));
  EXPECT_EQ(find_op(ops.layer.forward, "rotary")->kernels, 6);
  EXPECT_DOUBLE_EQ(find_op(fused.layer.forward, "rotary")->bytes, 4 * 8192.0 * (4096 + 1024));
  EXPECT_EQ(find_op(fused.layer.forward, "rotary")->kernels, 2);
  EXPECT_DOUBLE_EQ(find_op(fused.layer.input_grad, "rotary.backward")->bytes,
                   4 * 8192.0 * (4096 + 1024));
  // SwiGLU: silu and the product apart, 5e against 3e per element of the 14,336-wide MLP.
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "mlp.activation")->bytes, 10 * 8192.0 * 14336);
  EXPECT_DOUBLE_EQ(find_op(fused.layer.forward, "mlp.activation")->bytes, 6 * 8192.0 * 14336);
  // The same FLOPs either way.
  EXPECT_DOUBLE_EQ(matmul_flops(ops.layer.forward), matmul_flops(fused.layer.forward));
}

TEST(Attention, Qwen3NormsEachHeadOfQAndKAndNemotronHasNoPositions) {
  // Llama 3.1 8B (32 heads of 128, 8 KV heads; 8,192 tokens) with Qwen3's per-head norms:
  // Transformer Engine's norms read and write Q (4,096 wide) and K (1,024) forward, 2e a
  // element, and read the input and the output gradient and write the input gradient backward,
  // 3e (no residual gradient, unlike the layer's norms: 4e); one kernel each.
  auto run = llama8b();
  std::get<TransformerConfig>(run.model.spec).qk_norm = true;
  const auto ops = model_operators(workload(run));
  const double q = 8192.0 * 4096, k = 8192.0 * 1024;
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.q_norm")->bytes, 4 * q);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.forward, "attention.k_norm")->bytes, 4 * k);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.input_grad, "attention.q_norm.backward")->bytes, 6 * q);
  EXPECT_DOUBLE_EQ(find_op(ops.layer.input_grad, "attention.k_norm.backward")->bytes, 6 * k);
  EXPECT_EQ(find_op(ops.layer.forward, "attention.q_norm")->kernels, 1);
  // After the QKV projection, before the rotary embedding; backward the other way round.
  const auto at = [](const std::vector<Operator>& list, std::string_view name) {
    return std::find_if(list.begin(), list.end(),
                        [&](const Operator& o) { return o.name == name; }) -
           list.begin();
  };
  EXPECT_LT(at(ops.layer.forward, "qkv"), at(ops.layer.forward, "attention.q_norm"));
  EXPECT_LT(at(ops.layer.forward, "attention.k_norm"), at(ops.layer.forward, "rotary"));
  EXPECT_LT(at(ops.layer.input_grad, "rotary.backward"),
            at(ops.layer.input_grad, "attention.q_norm.backward"));
  EXPECT_LT(at(ops.layer.input_grad, "attention.k_norm.backward"),
            at(ops.layer.input_grad, "qkv.input_grad"));
  // Without the norms, none of them.
  const auto plain = model_operators(workload(llama8b()));
  EXPECT_EQ(find_op(plain.layer.forward, "attention.q_norm"), nullptr);
  // Memory: each of the 32 layers (one stage) keeps the norms' inputs, Q and K, 2 bytes an
  // element, beside the rest.
  const std::vector<std::int32_t> one{1};
  const double with = test::stage_work(run, one, 1)[0].activation_bytes;
  const double without = test::stage_work(llama8b(), one, 1)[0].activation_bytes;
  EXPECT_NEAR(with - without, 32 * 2 * (q + k), 1e-9 * with);
  // The Qwen3 presets have them; Nemotron-H's attention has no rotary embedding.
  EXPECT_TRUE(std::get<TransformerConfig>(io::load_model("qwen3-30b-a3b").spec).qk_norm);
  const test::ModelRun nemotron = io::load_model("nemotron-3-nano");
  EXPECT_FALSE(std::get<TransformerConfig>(nemotron.model.spec).rotary_positions());
  const auto hybrid = model_operators(workload(nemotron));
  const auto& attention = hybrid.blocks[index(BlockKind::Attention)];
  EXPECT_NE(find_op(attention.forward, "qkv"), nullptr);
  EXPECT_EQ(find_op(attention.forward, "rotary"), nullptr);
  EXPECT_EQ(find_op(attention.input_grad, "rotary.backward"), nullptr);
}

TEST(Clock, ScalesComputeButNotMemoryTraffic) {
  auto system = io::load_system("dgx-h100");
  const auto m = llama8b();
  const auto ops = model_operators(workload(m));
  const Operator& fc1 = *find_op(ops.layer.forward, "fc1");
  const Operator& norm = *find_op(ops.layer.forward, "layernorm1");
  const auto gemm = cost::operator_cost(fc1, workload(m), system);
  const auto memory = cost::operator_cost(norm, workload(m), system);
  system.device.clock_scale = 0.5;
  const double launch = system.device.kernel_overhead_s;
  EXPECT_NEAR(cost::operator_cost(fc1, workload(m), system).seconds - launch,
              2 * (gemm.seconds - launch), 1e-12);
  EXPECT_DOUBLE_EQ(cost::operator_cost(norm, workload(m), system).seconds, memory.seconds);
}

// --- Measured-run files ------------------------------------------------------------------------

const std::string kRuns =
    "[models.m]\nlayers = 4\nhidden = 256\nheads = 4\nseq_len = 1024\nvocab = 1000\n"
    "flash_attention = true\n"
    "[[run]]\nid = \"a\"\nsource = \"s1\"\nsystem = \"dgx-h100\"\nmodels = [\"m\"]\n"
    "schedule = \"1f1b\"\ndevices = 1\nmicrobatches = 2\ndata_parallel = 4\n"
    "context_parallel = 2\nfsdp = true\nmeasured_tokens_per_s_per_gpu = 512\n"
    "[[run]]\nid = \"b\"\nsource = \"s2\"\nsystem = \"dgx-a100\"\nmodels = [\"m\"]\n"
    "schedule = \"1f1b\"\ndevices = 2\nmicrobatches = 4\nmeasured_iteration_s = 1.0\n";

TEST(Runs, LayoutKeysAndTokenRates) {
  const auto runs = parse_measurements(kRuns, "runs.toml");
  const auto& a = runs.runs[0];
  EXPECT_EQ(a.layout.cp, 2);
  EXPECT_TRUE(a.layout.fsdp.enabled);
  EXPECT_EQ(a.layout.dp, 4);
  // 2 microbatches × 1 sequence × 1024 tokens × 4 replicas over 512 tokens/s × 8 GPUs.
  EXPECT_DOUBLE_EQ(a.measured_s, 2.0 * 1024 * 4 / (512.0 * 8));
  // Selecting runs.
  EXPECT_EQ(select_runs(runs, "system:dgx-a100").runs.size(), 1U);
  EXPECT_EQ(select_runs(runs, "source:s1").runs[0].id, "a");
  EXPECT_EQ(select_runs(runs, "ids:a,b").runs.size(), 2U);
  try {
    (void)select_runs(runs, "system:tpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "runs.toml: no runs match --runs system:tpu");
  }
  try {
    (void)select_runs(runs, "colour:red");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--runs colour:red: expected all, layers, profiles, iterations, source:TEXT, "
              "system:NAME or ids:ID,ID,...");
  }
  // An id the file does not hold is an error, not a smaller selection (a typo once fitted on
  // the other ids alone).
  try {
    (void)select_runs(runs, "ids:a,bb");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "runs.toml: --runs ids:a,bb: no run 'bb' in the file; did you mean 'b'?");
  }
}

TEST(Runs, LayoutErrorsNameTheEntry) {
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      (void)parse_measurements(text, "runs.toml");
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string head =
      "[models.m]\nlayers = 4\nhidden = 256\nheads = 4\nseq_len = 1024\nvocab = 1000\n"
      "flash_attention = true\n[[run]]\nid = \"a\"\nsystem = \"dgx-h100\"\nmodels = [\"m\"]\n"
      "schedule = \"1f1b\"\ndevices = 1\nmicrobatches = 2\nmeasured_iteration_s = 1.0\n";
  EXPECT_EQ(error_of(head + "fsdp_shard = 2\n"),
            "runs.toml:16:14: key 'run[0].fsdp_shard': --fsdp-shard: hybrid sharding (HSDP) needs "
            "--fsdp");
  EXPECT_EQ(error_of(head + "context_parallel = 3\n"),
            "runs.toml:16:20: key 'run[0].context_parallel': --cp 3: the sequence of 1024 tokens "
            "must split into "
            "2·cp = 6 equal chunks (causal load balancing gives rank r chunks r and 2·cp−1−r)");
}

}  // namespace
}  // namespace pipetab
