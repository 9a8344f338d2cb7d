// The software stack as an input (issue 42, point 1): named stacks are bundles of run options
// that apply where they are named and yield to options given beside them; each fused attention
// kernel has its own measured efficiency per device, by sequence length; the stack picks the
// kernel (Transformer Engine's rule by compute capability, or its own); autocast, CUDA graphs
// and the kernel move costs the way their mechanism says.
#include <algorithm>
#include <cmath>
#include <string>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/cost/attention.hpp"
#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/model/stack.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {
namespace {

SimulationSetup setup_of(const std::string& model, const std::string& system) {
  return test::preset_setup(model, system);
}

// One device, `microbatches` microbatches of 1F1B, simulated.
Simulation simulated(const SimulationSetup& s, std::int64_t devices = 1,
                     std::int64_t microbatches = 1) {
  const auto& info = find_schedule("1f1b");
  ScheduleParams p;
  p.devices = devices;
  p.microbatches = microbatches;
  return simulate_table(generate(info, p), s, info.name);
}

TEST(Stack, EveryNamedStackIsAChoiceOfTheOptionAndAppliesCleanly) {
  const RunOption* option = find_run_option("stack");
  ASSERT_NE(option, nullptr);
  std::vector<std::string_view> names;
  for (const auto& preset : stack_presets()) {
    names.push_back(preset.name);
    EXPECT_FALSE(preset.description.empty()) << preset.name;
    EXPECT_FALSE(preset.source.empty()) << preset.name;
    EXPECT_FALSE(preset.settings.empty()) << preset.name;
    SimulationSetup s = setup_of("llama3.1-8b", "dgx-h100");
    apply_setting(s, {"stack", std::string(preset.name), "test"});
    EXPECT_EQ(s.job.stack.name, preset.name);
    // Every setting of the stack took: reading each option back gives the stack's value.
    for (const auto& setting : preset.settings) {
      const RunOption* o = find_run_option(setting.key);
      ASSERT_NE(o, nullptr) << preset.name << ": " << setting.key;
      EXPECT_EQ(o->get(s), setting.value) << preset.name << ": " << setting.key;
    }
  }
  EXPECT_TRUE(
      std::equal(names.begin(), names.end(), option->choices.begin(), option->choices.end()));
  EXPECT_EQ(find_stack_preset("no-such-stack"), nullptr);
}

TEST(Stack, SettingsGivenBesideAStackWinWhateverTheirOrder) {
  for (const bool stack_first : {true, false}) {
    std::vector<Setting> settings{{"fused_elementwise", "true", "flag"},
                                  {"attention_kernel", "cudnn", "flag"}};
    const Setting stack{"stack", "torchtitan", "flag"};
    settings.insert(stack_first ? settings.begin() : settings.end(), stack);
    SimulationSetup s = setup_of("llama3.1-8b", "dgx-h100");
    apply_settings(s, settings);
    EXPECT_TRUE(s.job.stack.fused_elementwise);  // the flag's, not torchtitan's eager
    EXPECT_EQ(s.job.stack.attention_kernel, AttentionKernel::Cudnn);
    EXPECT_TRUE(s.job.stack.flash_attention);  // torchtitan's, given by nothing else
    EXPECT_EQ(s.job.stack.name, "torchtitan");
  }
}

TEST(Stack, UnknownStackIsRejectedWithTheChoices) {
  SimulationSetup s = setup_of("llama3.1-8b", "dgx-h100");
  try {
    apply_setting(s, {"stack", "torchtitn", "--stack"});
    FAIL() << "accepted an unknown stack";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("torchtitan"), std::string::npos) << what;
    EXPECT_NE(what.find("--stack"), std::string::npos) << what;
  }
}

TEST(Stack, TransformerEngineChoosesByComputeCapability) {
  const Stack te;  // attention_kernel unset: Transformer Engine's choice
  for (const auto* name : {"dgx-h100", "dgx-h200", "grand-teton-h100", "h800", "llama3-h100-roce"})
    EXPECT_EQ(resolve_attention_kernel(te, io::load_system(name).device, name),
              AttentionKernel::Cudnn)
        << name;
  for (const auto* name : {"dgx-a100", "a100-80gb", "a100-pcie"})
    EXPECT_EQ(resolve_attention_kernel(te, io::load_system(name).device, name),
              AttentionKernel::Flash2)
        << name;
  Stack titan;
  titan.attention_kernel = AttentionKernel::Flash2;
  EXPECT_EQ(resolve_attention_kernel(titan, io::load_system("dgx-h100").device, "dgx-h100"),
            AttentionKernel::Flash2);
}

TEST(Stack, AKernelTheDeviceGivesNoFiguresForIsRefusedNamingWhatItGives) {
  Stack fa3;
  fa3.attention_kernel = AttentionKernel::Flash3;
  try {
    (void)resolve_attention_kernel(fa3, io::load_system("a100-80gb").device, "a100-80gb");
    FAIL() << "FlashAttention-3 accepted on an A100";
  } catch (const ParamError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'a100-80gb' gives no figures for the attention kernel 'flash3'"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("it gives: flash2, triton"), std::string::npos) << what;
  }
  // And through a simulation: the same refusal, not a number.
  SimulationSetup s = setup_of("llama3.1-8b", "a100-80gb");
  apply_settings(
      s, std::vector<Setting>{{"flash_attention", "true", ""}, {"attention_kernel", "flash3", ""}});
  EXPECT_THROW((void)simulated(s, 2, 4), ParamError);
}

// Every kernel every GPU preset gives: an efficiency in (0, 1] at every length from 256 to 1M,
// equal to its points at its points, between its neighbours between them, flat beyond the ends.
TEST(Stack, AttentionCurvesInterpolateBetweenTheirPointsOnEveryPreset) {
  for (const auto& name : io::system_presets()) {
    const DeviceSpec d = io::load_system(name).device;
    for (std::size_t k = 0; k < kAttentionKernels; ++k) {
      const AttentionCurve& c = d.attention[k];
      if (!c.given()) continue;
      for (const bool backward : {false, true}) {
        const auto& e = backward ? c.backward : c.forward;
        for (double s = 256; s <= 1 << 20; s *= 1.5) {
          const double v = c.at(s, backward);
          EXPECT_GT(v, 0.0) << name;
          EXPECT_LE(v, 1.0) << name;
        }
        for (std::size_t i = 0; i < c.seq.size(); ++i) {
          EXPECT_DOUBLE_EQ(c.at(c.seq[i], backward), e[i]) << name;
          if (i + 1 == c.seq.size()) continue;
          const double mid = c.at(std::sqrt(c.seq[i] * c.seq[i + 1]), backward);
          EXPECT_NEAR(mid, (e[i] + e[i + 1]) / 2, 1e-12) << name;  // halfway in log2(seq)
        }
        if (!c.seq.empty()) {
          EXPECT_EQ(c.at(c.seq.front() / 4, backward), e.front()) << name;
          EXPECT_EQ(c.at(c.seq.back() * 4, backward), e.back()) << name;
        }
      }
    }
  }
}

// The measured kernels on one H100 at the Llama 3.1 8B shape (data/gpu/h100-sxm-attention.csv,
// causal, 8192): cuDNN 569.5 TFLOP/s forward, FlashAttention-2 288.6-325.2 (three head counts).
TEST(Stack, H100KernelsAreTheMeasuredOnes) {
  const DeviceSpec d = io::load_system("dgx-h100").device;
  EXPECT_NEAR(d.attention_of(AttentionKernel::Cudnn).at(8192, false) * 989.4, 569.5, 0.5);
  EXPECT_NEAR(d.attention_of(AttentionKernel::Flash2).at(8192, false) * 989.4,
              (288.569 + 324.831 + 325.164) / 3, 0.5);
  // And the same die under another name carries the same kernels.
  EXPECT_EQ(io::load_system("h800").device.attention, d.attention);
  EXPECT_EQ(io::load_system("grand-teton-h100").device.attention, d.attention);
}

// A head narrower or wider than 128 runs at the FlashAttention-3 paper's ratio of the bars (H100,
// BF16, no causal mask): cuDNN at head dim 64 408 against 609 TFLOP/s at 4K, at 256 581; the
// ratio at the bars' lengths and head dims, halfway between them in log2, flat beyond.
TEST(Stack, HeadWidthScalesAttentionAsThePapersBars) {
  using cost::attention_head_dim_scale;
  const auto cudnn = AttentionKernel::Cudnn, fa2 = AttentionKernel::Flash2,
             fa3 = AttentionKernel::Flash3;
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(cudnn, 64, 4096), 408.0 / 609);
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(cudnn, 256, 4096), 581.0 / 609);
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(fa2, 64, 16384), 324.0 / 370);
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(fa3, 256, 1024), 639.0 / 565);
  // Halfway in log2(seq) between 4K and 8K, and in log2(head dim) between 64 and 128.
  EXPECT_NEAR(attention_head_dim_scale(cudnn, 64, std::sqrt(4096.0 * 8192)),
              (408.0 / 609 + 412.0 / 600) / 2, 1e-12);
  EXPECT_NEAR(attention_head_dim_scale(cudnn, std::sqrt(64.0 * 128), 4096), (408.0 / 609 + 1) / 2,
              1e-12);
  // Flat beyond the bars: below 1K, above 16K, below 64, above 256.
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(cudnn, 64, 256), 373.0 / 574);
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(cudnn, 64, 1 << 20), 413.0 / 595);
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(cudnn, 32, 4096), 408.0 / 609);
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(cudnn, 512, 4096), 581.0 / 609);
  for (const auto k : {cudnn, fa2, fa3, AttentionKernel::Triton}) {
    for (double s = 256; s <= 1 << 20; s *= 2)
      EXPECT_DOUBLE_EQ(attention_head_dim_scale(k, 128, s), 1.0) << to_string(k);
  }
  EXPECT_DOUBLE_EQ(attention_head_dim_scale(AttentionKernel::Triton, 64, 4096), 1.0);
  // A model of 64-wide heads (gpt-oss-120b) pays it in its attention ops: the same operator at
  // 128 takes 609 / 408 less time, less its launch, on a dgx-h100 at 4,096 tokens.
  const test::ModelRun run = io::load_model("gpt-oss-120b");  // kept: the workload refers to it
  const Workload w = test::workload(run);
  ASSERT_EQ(w.job.seq_len, 4096);
  const auto ops = model_operators(w);
  const auto system = io::load_system("dgx-h100");
  Operator op = *test::find_op(ops.moe_layer.forward, "attention.flash");
  EXPECT_EQ(op.head_dim, 64.0);
  const double launch = system.device.kernel_overhead_s;
  const double narrow = cost::operator_cost(op, w, system).seconds - launch;
  op.head_dim = 128;
  EXPECT_NEAR(narrow, (cost::operator_cost(op, w, system).seconds - launch) * 609 / 408, 1e-12);
}

double iteration_s(SimulationSetup s, const std::vector<Setting>& settings) {
  apply_settings(s, settings);
  return simulated(s).metrics.runtime_s;
}

TEST(Stack, EachSettingMovesTheRuntimeTheWayItsMechanismSays) {
  SimulationSetup base = setup_of("llama3.1-8b", "dgx-h100");
  apply_settings(base,
                 std::vector<Setting>{{"seq_len", "8192", ""}, {"flash_attention", "true", ""}});
  // cuDNN's fused attention runs about twice FlashAttention-2's rate on an H100.
  const double cudnn = iteration_s(base, {{"attention_kernel", "cudnn", ""}});
  const double flash2 = iteration_s(base, {{"attention_kernel", "flash2", ""}});
  EXPECT_LT(cudnn, flash2);
  // torch.compile's fused element-wise work beats eager PyTorch.
  EXPECT_LT(iteration_s(base, {{"stack", "torchtitan-compile", ""}}),
            iteration_s(base, {{"stack", "torchtitan", ""}}));
  // CUDA graphs never make a step slower, and help where the host is the bottleneck: a small
  // model's eager kernels at a short sequence.
  SimulationSetup small = setup_of("mpt-125m", "dgx-h100");
  apply_settings(small,
                 std::vector<Setting>{{"seq_len", "512", ""}, {"fused_elementwise", "false", ""}});
  EXPECT_LT(iteration_s(small, {{"cuda_graphs", "true", ""}}), iteration_s(small, {}));
  // Autocast's fp32 softmax costs the math path time and memory; a fused kernel ignores it.
  SimulationSetup math = setup_of("gpt3-1.3b", "dgx-a100");
  apply_settings(math, std::vector<Setting>{{"seq_len", "2048", ""}});
  EXPECT_GT(iteration_s(math, {{"autocast", "true", ""}}), iteration_s(math, {}));
  const auto peak = [&](bool autocast) {
    SimulationSetup s = math;
    s.job.stack.autocast = autocast;
    return simulated(s).metrics.peak_memory_max();
  };
  EXPECT_GT(peak(true), peak(false));
  apply_settings(math, std::vector<Setting>{{"flash_attention", "true", ""}});
  EXPECT_DOUBLE_EQ(iteration_s(math, {{"autocast", "true", ""}}), iteration_s(math, {}));
}

}  // namespace
}  // namespace pipetab
