// Model and system files, presets, and the workload model's formulas (reference §12–§14).
#include <cmath>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/gemm_probe.hpp"
#include "pipetab/model/operators.hpp"
#include "pipetab/model/workload.hpp"
#include "pipetab/study/calibrate.hpp"

namespace pipetab {
namespace {

// The message of the error `parse` throws on `text` read as `file`.
template <class Parse>
std::string error_of(Parse parse, const std::string& text, const std::string& file) {
  try {
    parse(text, file);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A model file read as every command reads it: parsed, its job and layout keys applied as the
// run's defaults (test::ModelRun), the run checked (require_runnable).
void read_model(const std::string& text, const std::string& file) {
  const test::ModelRun run = io::parse_model(text, file);
  require_runnable(run.model, run.job, run.layout);
}

std::string model_error(const std::string& text) {
  return error_of(read_model, text, "m.toml");
}

using test::workload;

std::string system_error(const std::string& text) {
  return error_of(io::parse_system, text, "s.toml");
}

const std::string kSystem =
    "name = \"x\"\n"
    "[device]\npeak_flops = 1e15\nefficiency = 0.5\nmemory_bytes = 8e10\n"
    "[network]\ntopology = \"switched\"\ndevices_per_node = 4\n"
    "[network.intra]\nlatency_s = 1e-6\nbandwidth = 4e11\n"
    "[network.inter]\nlatency_s = 5e-6\nbandwidth = inf\n";

// MPT-7B's parameters by hand (reference modern-runs.md A.1): 32 layers of 12·h² (QKV, projection,
// a 4h GELU MLP) and two LayerNorms of 2h each, the tied 50,368-token word embedding and the
// learned 2,048-position table (h each), the final LayerNorm 2h; h = 4,096.
TEST(Presets, MptSevenBHasItsParameters) {
  const test::ModelRun run = io::load_model("mpt-7b");
  const auto& m = run.transformer();
  constexpr double h = 4096;
  EXPECT_DOUBLE_EQ(total_params(workload(run)),
                   32 * (12 * h * h + 4 * h) + 50368 * h + 2048 * h + 2 * h);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_EQ(m.kv_heads, 32);
}

TEST(Presets, AllParseAndAreListed) {
  EXPECT_EQ(io::model_presets(),
            (std::vector<std::string>{
                "deepseek-v3",   "gpt-oss-120b",    "gpt3-1.3b",       "gpt3-13b",
                "gpt3-175b",     "llama2-13b",      "llama2-70b",      "llama2-7b",
                "llama3.1-405b", "llama3.1-70b",    "llama3.1-8b",     "mixtral-8x22b",
                "mixtral-8x7b",  "mpt-125m",        "mpt-13b",         "mpt-1b",
                "mpt-30b",       "mpt-350m",        "mpt-3b",          "mpt-70b",
                "mpt-760m",      "mpt-7b",          "nemotron-3-nano", "nemotron-nano-9b-v2",
                "paper",         "qwen3-235b-a22b", "qwen3-30b-a3b",   "qwen3-32b"}));
  EXPECT_EQ(io::system_presets(),
            (std::vector<std::string>{
                "a100-40gb", "a100-80gb", "a100-pcie", "balanced", "compute-bound", "dgx-a100",
                "dgx-b200", "dgx-b300", "dgx-h100", "dgx-h200", "gb200-nvl72", "gb300-nvl72",
                "grand-teton-h100", "h800", "ideal", "llama3-h100-roce", "network-bound"}));
  for (const auto& name : io::model_presets())
    EXPECT_EQ(io::load_model(name).name, name);
  for (const auto& name : io::system_presets())
    EXPECT_EQ(io::load_system(name).name, name);
}

TEST(Presets, PublishedNumbers) {
  const auto dgx = io::load_system("dgx-h100");
  EXPECT_EQ(dgx.device.peak(Precision::BF16), 989.4e12);
  EXPECT_EQ(dgx.device.peak(Precision::FP8), 1978.9e12);
  EXPECT_EQ(dgx.device.memory_bandwidth, 3.35e12);
  EXPECT_EQ(dgx.device.gemm.sms, 132);
  EXPECT_EQ(dgx.devices_per_node, 8);
  EXPECT_EQ(dgx.intra.bandwidth, 450e9);
  EXPECT_EQ(dgx.inter.bandwidth, 50e9);
  const auto a100 = io::load_system("a100-pcie");
  EXPECT_EQ(a100.device.peak(Precision::BF16), 312e12);
  EXPECT_EQ(a100.device.memory_bandwidth, 1.935e12);
  EXPECT_EQ(a100.intra.bandwidth, 32e9);
  // Selene (reference measurements.md §1): 312 TFLOP/s FP16, NVLink 3 at 300 GB/s per
  // direction, one 200 Gb/s HDR NIC per GPU.
  const auto selene = io::load_system("dgx-a100");
  EXPECT_EQ(selene.device.peak(Precision::FP16), 312e12);
  EXPECT_EQ(selene.device.peak(Precision::FP8), 0.0);  // A100 has no FP8
  EXPECT_EQ(selene.device.gemm.sms, 108);
  EXPECT_EQ(selene.intra.bandwidth, 300e9);
  EXPECT_EQ(selene.inter.bandwidth, 25e9);
  // Parameter counts against the published sizes (GPT-3 ties its embeddings; Llama 2 does not).
  const auto params = [](const char* name) {
    const test::ModelRun run = io::load_model(name);
    return total_params(workload(run));
  };
  EXPECT_NEAR(params("gpt3-1.3b"), 1.31e9, 0.03e9);
  EXPECT_NEAR(params("gpt3-13b"), 12.85e9, 0.2e9);
  EXPECT_NEAR(params("gpt3-175b"), 174.6e9, 1.5e9);
  EXPECT_NEAR(params("llama2-70b"), 68.98e9, 0.3e9);
}

// The dgx-a100 preset is data/dgx-a100-datasheet.toml, whose comments cite every constant, with
// only the calibrated efficiencies changed (experiments/accuracy writes it).
TEST(Presets, CalibratedA100IsTheDatasheetPlusItsFit) {
  const auto preset = io::load_system("dgx-a100");
  auto datasheet =
      io::load_system(std::string(PIPETAB_SOURCE_DIR) + "/data/dgx-a100-datasheet.toml");
  datasheet.name = preset.name;
  datasheet.device.gemm.max_efficiency = preset.device.gemm.max_efficiency;
  datasheet.device.gemm.k_overhead = preset.device.gemm.k_overhead;
  datasheet.device.memory_efficiency = preset.device.memory_efficiency;
  datasheet.device.gemm_fp8 = datasheet.device.gemm;  // neither file gives [device.gemm_fp8]
  EXPECT_EQ(datasheet.device, preset.device);
  EXPECT_EQ(datasheet.intra, preset.intra);
  EXPECT_EQ(datasheet.inter, preset.inter);
  EXPECT_EQ(datasheet.devices_per_node, preset.devices_per_node);
  // The fitted values are physical: below the measured matmul maximum, above half of it.
  EXPECT_GT(preset.device.gemm.max_efficiency, 0.5);
  EXPECT_LT(preset.device.gemm.max_efficiency, 0.869);
  EXPECT_GT(preset.device.memory_efficiency, 0.3);
  EXPECT_LE(preset.device.memory_efficiency, 1.0);
}

// a100-pcie carries the dgx-a100 calibration over as its file states: the GEMM efficiency is
// its own measured matmul maximum (MAMF) times the ratio fitted for A100 to its MAMF (0.869),
// the other fitted constants the same. dgx-h100 takes the memory efficiency over too.
TEST(Presets, TransferredCalibrationStaysConsistent) {
  const auto a100 = io::load_system("dgx-a100").device;
  const double ratio = a100.gemm.max_efficiency / 0.869;
  const auto pcie = io::load_system("a100-pcie").device;
  EXPECT_NEAR(pcie.gemm.max_efficiency, 252.9 / 312 * ratio, 5e-4);
  EXPECT_NEAR(pcie.memory_efficiency, a100.memory_efficiency, 5e-4);
  EXPECT_NEAR(pcie.gemm.k_overhead, a100.gemm.k_overhead, 0.5);
  EXPECT_NEAR(io::load_system("dgx-h100").device.memory_efficiency, a100.memory_efficiency, 5e-4);
}

// dgx-h100's GEMM model is the fit to the committed H100 probe (experiments/gemm-calibration):
// refitting it from the preset moves nothing beyond the preset's rounding, and the layouts it
// was not fitted on stay within the errors its file states.
TEST(Presets, H100GemmModelIsTheFitToTheProbe) {
  const auto probe =
      io::read_gemm_probe(std::string(PIPETAB_SOURCE_DIR) + "/data/gpu/h100-sxm-probe.csv");
  const auto preset = io::load_system("dgx-h100");
  GemmCalibrationOptions options;
  options.fit_on = "forward";
  const auto c = calibrate_gemm(probe, preset, options);
  EXPECT_NEAR(c.system.device.gemm.max_efficiency, preset.device.gemm.max_efficiency, 5e-4);
  EXPECT_NEAR(c.system.device.gemm.k_overhead, preset.device.gemm.k_overhead, 0.5);
  for (const auto& s : c.summaries) {
    if (s.fitted || s.group.find(">= 1024") == std::string::npos) continue;
    EXPECT_LT(s.mean_abs, 0.055) << s.group;
  }
}

// The Blackwell presets' GEMM models (experiments/blackwell-gemm-calibration): dgx-h100's
// efficiency times the B200's MAMF row over the H100's, each row read by the model with one
// parameter fitted (data/gpu/published-matmuls.csv); the other Blackwell presets share B200's.
TEST(Presets, BlackwellGemmModelIsH100sScaledByTheirMatmulMaxima) {
  const auto mamf = [](const SystemConfig& system, Precision p, double m, double n, double k,
                       double tflops) {
    // The FP8 rows run the BF16 machinery against the FP8 peak and GEMM model. MAMF's short
    // search holds the boost clock: read at clock_scale 1 (a training step's is the preset's).
    SystemConfig s = system;
    s.device.clock_scale = 1.0;
    if (p == Precision::FP8) {
      s.device.peak_flops[static_cast<std::size_t>(Precision::BF16)] = s.device.peak(p);
      s.device.gemm.max_efficiency = s.device.gemm_fp8.max_efficiency;
      s.device.gemm.k_overhead = s.device.gemm_fp8.k_overhead;
    }
    io::GemmProbe probe;
    probe.gemms.push_back({io::GemmLayout::Forward, {m, n, k}, 2.0 * m * n * k / (tflops * 1e12)});
    GemmCalibrationOptions options;
    options.fit = {"gemm.max_efficiency"};
    const auto c = calibrate_gemm(probe, s, options);
    EXPECT_EQ(c.system.device.gemm.k_overhead, s.device.gemm.k_overhead);  // not fitted
    return c.system.device.gemm.max_efficiency;
  };
  const auto h100 = io::load_system("dgx-h100");
  const auto b200 = io::load_system("dgx-b200");
  // ml-engineering @744d01e's MAMF table: H100 794.5 and 1,402.6; B200 1,745.0 and 3,432.5.
  const double bf16 = h100.device.gemm.max_efficiency *
                      mamf(b200, Precision::BF16, 1792, 16128, 3072, 1745.0) /
                      mamf(h100, Precision::BF16, 2048, 2048, 13312, 794.5);
  const double fp8 = h100.device.gemm_fp8.max_efficiency *
                     mamf(b200, Precision::FP8, 15360, 4096, 3072, 3432.5) /
                     mamf(h100, Precision::FP8, 1024, 9216, 14336, 1402.6);
  EXPECT_NEAR(b200.device.gemm.max_efficiency, bf16, 5e-4);
  EXPECT_NEAR(b200.device.gemm_fp8.max_efficiency, fp8, 5e-4);
  for (const char* name : {"dgx-b300", "gb200-nvl72", "gb300-nvl72"}) {
    const auto s = io::load_system(name);
    EXPECT_EQ(s.device.gemm, b200.device.gemm) << name;
    EXPECT_EQ(s.device.gemm_fp8, b200.device.gemm_fp8) << name;
    EXPECT_EQ(s.device.attention, b200.device.attention) << name;
    // Each precision's peak doubles the one before, as Blackwell's datasheets give them.
    EXPECT_EQ(s.device.peak(Precision::FP8), 2 * s.device.peak(Precision::BF16)) << name;
  }
  // The NVL72 racks: one NVLink domain of 18 trays of 4 GPUs.
  for (const char* name : {"gb200-nvl72", "gb300-nvl72"}) {
    const auto s = io::load_system(name);
    EXPECT_EQ(s.devices_per_node, 72) << name;
    EXPECT_EQ(s.host_size(), 4) << name;
    EXPECT_EQ(s.intra.bandwidth, 900e9) << name;
  }
  // a100-40gb is dgx-a100 but for its memory (40 GB of HBM2 at 1,555 GB/s).
  auto a100 = io::load_system("dgx-a100").device;
  const auto small = io::load_system("a100-40gb").device;
  EXPECT_EQ(small.memory_bytes, 40e9);
  EXPECT_EQ(small.memory_bandwidth, 1.555e12);
  a100.name = small.name;
  a100.memory_bytes = small.memory_bytes;
  a100.memory_bandwidth = small.memory_bandwidth;
  EXPECT_EQ(a100, small);
}

// Systems that take their device from a preset get all of it, and keys they give override it.
TEST(Presets, DeviceFromAPreset) {
  // The paper's regimes: dgx-h100's device without its overheads, at the efficiencies their
  // bandwidths were set with.
  auto regime = io::load_system("dgx-h100").device;
  regime.step_overhead_s = regime.host_launch_s = regime.comm_slowdown = 0.0;
  regime.memory_efficiency = 0.628;
  regime.gemm.max_efficiency = 0.792;
  regime.gemm.k_overhead = 165;
  for (const char* name : {"balanced", "compute-bound", "network-bound", "ideal"})
    EXPECT_EQ(io::load_system(name).device, regime) << name;
  const auto s = io::parse_system(
      "[device]\npreset = \"dgx-h100\"\nmemory_bytes = 141e9\n[device.gemm]\nmax_efficiency = 0.5\n"
      "[network]\n[network.intra]\nlatency_s = 0\nbandwidth = 1e9\n[network.inter]\nlatency_s = "
      "0\nbandwidth = 1e9\n",
      "s.toml");
  EXPECT_EQ(s.device.memory_bytes, 141e9);
  EXPECT_EQ(s.device.gemm.max_efficiency, 0.5);
  EXPECT_EQ(s.device.gemm.sms, 132);
  EXPECT_EQ(s.device.peak(Precision::BF16), 989.4e12);
  EXPECT_EQ(system_error("[device]\npreset = \"tpu\"\n[network]\n"),
            "s.toml:2:10: key 'device.preset': 'tpu' is not a system preset (presets: a100-40gb, "
            "a100-80gb, a100-pcie, balanced, compute-bound, dgx-a100, dgx-b200, dgx-b300, "
            "dgx-h100, dgx-h200, gb200-nvl72, gb300-nvl72, grand-teton-h100, h800, ideal, "
            "llama3-h100-roce, network-bound)");
}

TEST(Presets, RegimesHaveTheirRatio) {
  // rho = (α + 2·s·b·h / β) / (forward time of a 16-layer stage) for the default model.
  const test::ModelRun model = io::load_model("paper");
  const std::vector<std::int32_t> units(8, 1);
  const auto work = test::stage_work(model, units, 8);
  for (const auto& [name, rho] :
       {std::pair{"compute-bound", 0.01}, {"balanced", 0.1}, {"network-bound", 1.0}}) {
    const auto s = io::load_system(name);
    const double forward =
        cost::stage_costs(model.model, model.job, model.layout, work, s)[3].forward.seconds;
    const double transfer = s.inter.latency_s + work[3].message_bytes / s.inter.bandwidth;
    EXPECT_NEAR(transfer / forward, rho, 1e-3 * rho) << name;
    EXPECT_EQ(s.devices_per_node, 1) << name;
  }
  const auto ideal = io::load_system("ideal");
  EXPECT_EQ(ideal.inter.latency_s, 0.0);
  EXPECT_TRUE(std::isinf(ideal.inter.bandwidth));
}

TEST(Workload, TransformerLayerFormulas) {
  // GPT-3 13B, no parallelism: per layer forward 24·b·s·h² + 4·b·s²·h FLOPs (reference §13),
  // activations 34·s·b·h + 5·a·s²·b bytes (Korthikanti), I + W = 2F, messages 2·s·b·h.
  test::ModelRun model = io::load_model("gpt3-13b");
  const double s = 2048, b = 1, h = 5120, a = 40;
  const std::vector<std::int32_t> units(40, 1);  // one layer per stage
  auto work = test::stage_work(model, units, 40);
  const auto& w = work[5];
  EXPECT_EQ(w.layers, 1);
  EXPECT_DOUBLE_EQ(w.forward_flops, 24 * b * s * h * h + 4 * b * s * s * h);
  EXPECT_DOUBLE_EQ(w.input_grad_flops + w.weight_grad_flops, 2 * w.forward_flops);
  EXPECT_DOUBLE_EQ(w.weight_grad_flops, 24 * b * s * h * h);
  EXPECT_DOUBLE_EQ(w.activation_bytes, 34 * s * b * h + 5 * a * s * s * b);
  EXPECT_DOUBLE_EQ(w.activation_kept_for_weight_grad, 32 * s * b * h);
  EXPECT_DOUBLE_EQ(w.message_bytes, 2 * s * b * h);
  EXPECT_DOUBLE_EQ(w.params, 12 * h * h + 4 * h);
  EXPECT_DOUBLE_EQ(w.weight_bytes + w.grad_bytes + w.optimizer_bytes,
                   18 * w.params);  // Megatron's 18 B/param
  EXPECT_TRUE(work.front().embedding);
  EXPECT_TRUE(work.back().output);
  EXPECT_DOUBLE_EQ(work.back().message_bytes, 0.0);
  // Korthikanti's table: TP only sbh(10 + 24/t + 5as/(ht)); TP + SP sbh(34 + 5as/h)/t;
  // selective recompute drops 5as²b; full recompute keeps 2sbh.
  model.layout.tp = 8;
  work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, s * b * h * (10 + 24.0 / 8 + 5 * a * s / (h * 8)));
  EXPECT_DOUBLE_EQ(work[5].message_bytes, 2 * s * b * h / 8);
  // W keeps 32/34 of what lies outside the attention core; LayerNorms are not split.
  EXPECT_DOUBLE_EQ(work[5].activation_kept_for_weight_grad, s * b * h * (10 + 24.0 / 8) * 32 / 34);
  EXPECT_DOUBLE_EQ(work[5].params, 12 * h * h / 8 + 4 * h);
  EXPECT_DOUBLE_EQ(work.front().params, 12 * h * h / 8 + 4 * h + 50257 * h / 8 + s * h);
  EXPECT_DOUBLE_EQ(work.back().params, 12 * h * h / 8 + 4 * h + 50257 * h / 8 + 2 * h);
  model.layout.sequence_parallel = true;
  work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, s * b * h * (34 + 5 * a * s / h) / 8);
  model.job.recompute = Recompute::Selective;
  work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, 34 * s * b * h / 8);
  model.job.recompute = Recompute::Full;
  model.layout.sequence_parallel = false;
  model.layout.tp = 1;
  work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, 2 * s * b * h);
  EXPECT_DOUBLE_EQ(work[5].input_grad_flops,
                   work[5].forward_flops + (24 * b * s * h * h + 8 * b * s * s * h));
  model.job.recompute = Recompute::None;
  model.job.stack.flash_attention = true;
  work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, 34 * s * b * h + 4 * a * s * b);
  EXPECT_DOUBLE_EQ(work[5].input_grad_flops, 24 * b * s * h * h + 10 * b * s * s * h);
  // FP8 with Transformer Engine (fp8_saved_inputs): the normalised inputs of QKV and fc1 and
  // fc2's input (the GeLU's output, 4h wide) kept in one byte, an FP8 copy of the attention's
  // output beside the 16-bit one its fused backward reads: 34 − 1 − 1 − 4 + 1 = 29 sbh. On the
  // math path the copy replaces it (27 sbh); torchao's Float8Linear (off) keeps 16 bits (34).
  model.job.precision = Precision::FP8;
  work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, 29 * s * b * h + 4 * a * s * b);
  model.job.stack.flash_attention = false;
  work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, 27 * s * b * h + 5 * a * s * s * b);
  model.job.stack.fp8_saved_inputs = false;
  work = test::stage_work(model, units, 40);
  EXPECT_DOUBLE_EQ(work[5].activation_bytes, 34 * s * b * h + 5 * a * s * s * b);
}

TEST(Workload, Partition) {
  TransformerConfig m;
  m.layers = 10;
  Layout layout;
  const std::vector<std::int32_t> equal(4, 1), skewed{1, 1, 2, 2};
  EXPECT_EQ(partition_layers(m, layout, equal), (std::vector<std::int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(partition_layers(m, layout, skewed), (std::vector<std::int64_t>{2, 2, 3, 3}));
  layout.balance_embedding = true;  // 12 slots; the first and last give one each to emb./output
  EXPECT_EQ(partition_layers(m, layout, equal), (std::vector<std::int64_t>{2, 3, 3, 2}));
  m.layers = 3;
  layout.balance_embedding = false;
  EXPECT_THROW(partition_layers(m, layout, equal), ParamError);
}

TEST(Workload, ExplicitScalesByShare) {
  ExplicitWorkload e;
  e.forward_s = 2.0;
  e.input_grad_s = 1.0;
  e.weight_grad_s = 3.0;
  e.message_bytes = 7.0;
  e.activation_bytes = 10.0;
  const std::vector<std::int32_t> units{1, 1, 1, 1};  // 4 stages on 2 devices: half a share each
  const auto work = stage_work({"e", e}, Job{}, Layout{}, units, 2);
  EXPECT_DOUBLE_EQ(work[0].forward_s, 1.0);
  EXPECT_DOUBLE_EQ(work[0].weight_grad_s, 1.5);
  EXPECT_DOUBLE_EQ(work[0].activation_bytes, 5.0);
  EXPECT_DOUBLE_EQ(work[0].message_bytes, 7.0);
}

TEST(Config, ReadsAModelAndASystem) {
  const auto model = io::parse_model(
      "name = \"tiny\"\n[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nkv_heads = 2\nseq_len = "
      "32\nvocab = 100\n"
      "recompute = \"selective\"\nflash_attention = true\n",
      "m.toml");
  const auto& t = std::get<TransformerConfig>(model.spec);
  EXPECT_EQ(model.name, "tiny");
  EXPECT_EQ(t.kv_heads, 2);
  EXPECT_EQ(t.ffn_hidden, 256);
  EXPECT_EQ(test::ModelRun(model).job.recompute, Recompute::Selective);
  const auto system = io::parse_system(kSystem, "s.toml");
  EXPECT_EQ(system.devices_per_node, 4);
  EXPECT_TRUE(std::isinf(system.inter.bandwidth));
  EXPECT_EQ(
      io::parse_model(
          "[explicit]\nforward_s = 1\ninput_grad_s = 1\nweight_grad_s = 1\nmessage_bytes = 0\n"
          "activation_bytes = 5\n",
          "dir/costs.toml")
          .name,
      "costs");
}

TEST(Config, ErrorsNameFileLineAndKey) {
  const std::string head =
      "[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\nvocab = 100\n";
  EXPECT_EQ(
      model_error(head + "colour = 3\n"),
      "m.toml:7:1: key 'transformer.colour': unknown key (expected: layers, hidden, heads, "
      "kv_heads, head_dim, ffn_hidden, vocab, gated_mlp, learned_positions, rotary, qk_norm, "
      "dropout, tie_embeddings, mtp_layers, attention, q_lora_rank, kv_lora_rank, "
      "qk_rope_head_dim, v_head_dim, hybrid_pattern, seq_len, micro_batch, precision, dtype_bytes, "
      "tensor_parallel, sequence_parallel, recompute, flash_attention, fused_elementwise, "
      "balance_embedding, grad_accumulation_fusion, grad_bytes_per_param, "
      "optimizer_bytes_per_param)");
  EXPECT_EQ(model_error("[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\n"),
            "m.toml:1:1: key 'transformer': missing key 'vocab'");
  EXPECT_EQ(model_error(head + "micro_batch = \"two\"\n"),
            "m.toml:7:15: key 'transformer.micro_batch': expected an integer, got a string");
  EXPECT_EQ(model_error(head + "micro_batch = 0\n"),
            "m.toml:7:15: key 'transformer.micro_batch': micro_batch = '0': expected a whole "
            "number from 1 to 1048576");
  EXPECT_EQ(model_error(head + "recompute = \"some\"\n"),
            "m.toml:7:13: key 'transformer.recompute': recompute = 'some': expected one of none, "
            "selective, full, selective-op, every-other-layer, lgd");
  EXPECT_EQ(
      model_error(head + "flash_attention = 1\n"),
      "m.toml:7:19: key 'transformer.flash_attention': expected true or false, got an integer");
  EXPECT_EQ(
      model_error("[transformer]\nlayers = 4\nhidden = 65\nheads = 4\nseq_len = 32\nvocab = 100\n"),
      "m.toml:3:10: key 'transformer.hidden': 65 is not a multiple of heads = 4: set head_dim if "
      "the heads' width is not hidden / heads");
  // With head_dim the heads need not tile the hidden size (Qwen3-32B: 64 × 128 on 5120).
  EXPECT_EQ(model_error("[transformer]\nlayers = 4\nhidden = 65\nheads = 4\nhead_dim = 16\n"
                        "seq_len = 32\nvocab = 100\n"),
            "(no error)");
  EXPECT_EQ(model_error(head + "head_dim = 0\n"),
            "m.toml:7:12: key 'transformer.head_dim': 0 is out of range (1..1048576)");
  EXPECT_EQ(model_error(head + "kv_heads = 3\n"),
            "m.toml:7:12: key 'transformer.kv_heads': heads = 4 is not a multiple of 3");
  EXPECT_EQ(model_error("name = \"x\"\n"),
            "m.toml:1:1: expected exactly one of the tables [transformer] and [explicit]");
  EXPECT_EQ(model_error("layers = [\n"),
            "m.toml:1:12: invalid TOML: Error while parsing array: encountered end-of-file");
  EXPECT_EQ(model_error("transformer = 3\n"),
            "m.toml:1:15: key 'transformer': expected a table, got an integer");
  EXPECT_EQ(model_error("[explicit]\nforward_s = -1\n"),
            "m.toml:2:13: key 'explicit.forward_s': -1 is out of range (above 0 .. 1e+30)");
  EXPECT_EQ(model_error("[explicit]\nforward_s = nan\n"),
            "m.toml:2:13: key 'explicit.forward_s': nan is not allowed here");

  std::string text = kSystem;
  EXPECT_EQ(system_error(text.replace(text.find("efficiency = 0.5"), 16, "efficiency = 1.5")),
            "s.toml:4:14: key 'device.efficiency': 1.5 is out of range (above 0 .. 1)");
  EXPECT_EQ(system_error("[device]\npreset = \"dgx-h100\"\ngemm_memory_efficiency = 1.2\n"
                         "[network]\npreset = \"dgx-h100\"\n"),
            "s.toml:3:26: key 'device.gemm_memory_efficiency': 1.2 is out of range (above 0 .. 1)");
  text = kSystem;
  EXPECT_EQ(system_error(text.replace(text.find("\"switched\""), 10, "\"torus\"")),
            "s.toml:7:12: key 'network.topology': 'torus' is not one of: switched, chain");
  text = kSystem;
  text.replace(text.find("topology = \"switched\""), 21, "topology = \"chain\"");
  EXPECT_EQ(system_error(text),
            "s.toml:8:20: key 'network.devices_per_node': a chain has no "
            "nodes: leave devices_per_node out");
  text.replace(text.find("devices_per_node = 4\n"), 21, "");
  EXPECT_EQ(system_error(text),
            "s.toml:11:1: key 'network.inter': a chain has one link class: "
            "give [network.intra] only");
  // A node of several hosts (an NVL72 rack of trays): whole hosts, on a switched topology.
  const auto with_network = [](const std::string& network) {
    const std::string switched = "topology = \"switched\"\ndevices_per_node = 4\n";
    std::string t = kSystem;
    return system_error(t.replace(t.find(switched), switched.size(), network));
  };
  EXPECT_EQ(with_network("topology = \"switched\"\ndevices_per_node = 4\ndevices_per_host = 3\n"),
            "s.toml:9:20: key 'network.devices_per_host': a node of 4 GPUs is whole hosts: "
            "devices_per_host must divide devices_per_node, got 3");
  EXPECT_EQ(with_network("topology = \"switched\"\ndevices_per_node = 4\ndevices_per_host = 8\n"),
            "s.toml:9:20: key 'network.devices_per_host': 8 is out of range (1..4)");
  EXPECT_EQ(with_network("topology = \"chain\"\ndevices_per_host = 2\n"),
            "s.toml:8:20: key 'network.devices_per_host': a chain has no nodes: leave "
            "devices_per_host out");
  text = kSystem;
  EXPECT_EQ(
      system_error(text.replace(text.find("bandwidth = 4e11"), 16, "bandwidth = 0.5")),
      "s.toml:11:13: key 'network.intra.bandwidth': 0.5 is out of range (1 .. 1e+30, or inf)");
  // Speeds and sizes below 1 would make simulated times overflow.
  text = kSystem;
  EXPECT_EQ(system_error(text.replace(text.find("peak_flops = 1e15"), 17, "peak_flops = 0")),
            "s.toml:3:14: key 'device.peak_flops': 0 is out of range (1 .. 1e+30)");
  text = kSystem;
  EXPECT_EQ(system_error(text.replace(text.find("efficiency = 0.5"), 16, "efficiency = 1e-300")),
            "s.toml:4:14: key 'device.efficiency': 1e-300 leaves 1e-285 FLOP/s of the peak: "
            "expected at least 1");
  text = kSystem;
  EXPECT_EQ(system_error(text.replace(text.find("memory_bytes = 8e10"), 19, "memory_bytes = 0")),
            "s.toml:5:16: key 'device.memory_bytes': 0 is out of range (1 .. 1e+30)");
  EXPECT_EQ(system_error("name = \"x\"\n"), "s.toml:1:1: key 'device': missing");
  EXPECT_EQ(system_error("[device]\npeak_flops = 1\nefficiency = 1\nmemory_bytes = 1\n[network]\n"),
            "s.toml:5:1: key 'network.intra': missing");
}

// The keys of the operator-level model, and impossible layouts.
// [moe] (issue 25, point 1): read and checked with the file, line and key of any mistake; the
// presets hold their published shapes; and every workload entry point refuses a mixture of
// experts, or multi-head latent attention, instead of pricing it as a dense model.
TEST(Config, MixtureOfExpertsIsReadAndChecked) {
  const std::string head =
      "[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\nvocab = 100\n"
      "ffn_hidden = 256\n[moe]\n";
  const test::ModelRun run = io::parse_model(head +
                                                 "experts = 16\ntop_k = 2\nexpert_ffn_hidden = 32\n"
                                                 "shared_experts = 1\ndense_layers = 1\n",
                                             "m.toml");
  const auto& moe = run.transformer().moe;
  ASSERT_TRUE(moe.has_value());
  EXPECT_EQ(moe->experts, 16);
  EXPECT_EQ(moe->top_k, 2);
  EXPECT_EQ(moe->shared_expert_ffn_hidden, 32);           // defaults to the routed experts' width
  EXPECT_EQ(moe->dense_ffn_hidden, 256);                  // defaults to the model's MLP
  EXPECT_FALSE(run.job.moe.capacity_factor.has_value());  // dropless
  EXPECT_EQ(run.job.moe.imbalance, 1.0);
  const std::string ok = "experts = 16\ntop_k = 2\nexpert_ffn_hidden = 32\n";
  EXPECT_EQ(model_error(head + "experts = 16\ntop_k = 17\nexpert_ffn_hidden = 32\n"),
            "m.toml:10:9: key 'moe.top_k': 17 is out of range (1..16)");
  EXPECT_EQ(model_error(head + ok + "dense_layers = 4\n"),
            "m.toml:12:16: key 'moe.dense_layers': 4 is out of range (0..3)");
  EXPECT_EQ(
      model_error(head + ok + "dense_ffn_hidden = 64\n"),
      "m.toml:12:20: key 'moe.dense_ffn_hidden': set with dense_layers = 0: no layer is dense");
  EXPECT_EQ(model_error(head + ok + "shared_expert_ffn_hidden = 64\n"),
            "m.toml:12:28: key 'moe.shared_expert_ffn_hidden': set with shared_experts = 0: give "
            "shared_experts too, or leave it out");
  EXPECT_EQ(model_error(head + ok + "imbalance = 9\n"),
            "moe imbalance 9: the busiest expert-parallel rank takes between 1 (balanced) and "
            "experts / top_k = 8 times the mean");
  EXPECT_EQ(model_error(head + ok + "capacity_factor = 0\n"),
            "m.toml:12:19: key 'moe.capacity_factor': moe_capacity_factor = '0': expected a number "
            "above 0, up to 1000");
  EXPECT_NE(model_error(head + ok + "routing = 1\n").find("key 'moe.routing': unknown key"),
            std::string::npos);
  EXPECT_EQ(
      model_error("[explicit]\nforward_s = 1\n[moe]\nexperts = 2\n"),
      "m.toml:3:1: key 'moe': experts replace a transformer's MLP: [moe] needs [transformer]");
  EXPECT_EQ(model_error("[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\n"
                        "vocab = 100\nattention = \"sparse\"\n"),
            "m.toml:7:13: key 'transformer.attention': 'sparse' is not one of: multi-head, latent");

  // The presets, as their sources give them.
  const auto qwen = *io::load_model("qwen3-235b-a22b").transformer();
  EXPECT_EQ(qwen.layers, 94);
  EXPECT_EQ(qwen.moe->experts, 128);
  EXPECT_EQ(qwen.moe->top_k, 8);
  EXPECT_EQ(qwen.moe->expert_ffn_hidden, 1536);
  const auto dsv3 = *io::load_model("deepseek-v3").transformer();
  EXPECT_EQ(dsv3.attention, AttentionKind::Latent);
  EXPECT_EQ(dsv3.moe->dense_layers, 3);
  EXPECT_EQ(dsv3.moe->shared_experts, 1);
  EXPECT_EQ(io::load_model("mixtral-8x7b").transformer()->moe->top_k, 2);

  EXPECT_EQ(model_error(head + ok + "dispatcher = \"nccl\"\n"),
            "m.toml:12:14: key 'moe.dispatcher': moe_dispatcher = 'nccl': expected one of "
            "alltoall, deepep, hybridep");
  EXPECT_EQ(model_error(head + ok + "recompute = \"moe\"\n"),
            "m.toml:12:13: key 'moe.recompute': moe_recompute = 'moe': expected one of none, "
            "moe_act, mlp");
  EXPECT_EQ(model_error(head + ok + "shared_expert_overlap = true\n"),
            "moe shared_expert_overlap: the model has no shared expert to run beside the "
            "all-to-alls (shared_experts = 0)");
  const test::ModelRun options =
      io::parse_model(head + ok +
                          "dispatcher = \"deepep\"\nnode_limit = 4\n"
                          "fp8_dispatch = true\nrecompute = \"moe_act\"\n",
                      "m.toml");
  EXPECT_EQ(options.job.moe.dispatcher, MoeDispatcher::DeepEp);
  EXPECT_EQ(options.transformer().moe->node_limit, 4);
  EXPECT_TRUE(options.job.moe.fp8_dispatch);
  EXPECT_EQ(options.job.moe.recompute, MoeRecompute::MoeAct);

  // gpt-oss's experts: biases, and a clamped quick-GEGLU, which needs the gated MLP.
  EXPECT_FALSE(moe->expert_bias);
  EXPECT_EQ(moe->activation_clamp, 0.0);
  const auto gpt_oss = *io::load_model("gpt-oss-120b").transformer();
  EXPECT_TRUE(gpt_oss.moe->expert_bias);
  EXPECT_EQ(gpt_oss.moe->activation_clamp, 7.0);
  std::string gated_head = head;
  gated_head.insert(gated_head.find("[moe]"), "gated_mlp = true\n");
  const test::ModelRun gated =
      io::parse_model(gated_head + ok + "expert_bias = true\nactivation_clamp = 7.5\n", "m.toml");
  EXPECT_TRUE(gated.transformer().moe->expert_bias);
  EXPECT_EQ(gated.transformer().moe->activation_clamp, 7.5);
  EXPECT_EQ(model_error(head + ok + "activation_clamp = 7\n"),
            "m.toml:12:20: key 'moe.activation_clamp': set on a model without gated_mlp: the "
            "clamp is the gated quick-GEGLU's (Megatron-Core's activation_func_clamp_value), "
            "which needs gated_mlp = true");
  EXPECT_EQ(model_error(head + ok + "activation_clamp = 0\n"),
            "m.toml:12:20: key 'moe.activation_clamp': 0 is out of range (above 0 .. 1e+06)");
  EXPECT_EQ(model_error(head + ok + "expert_bias = 1\n"),
            "m.toml:12:15: key 'moe.expert_bias': expected true or false, got an integer");

  // Every preset is priced, DeepSeek-V3's latent attention included.
  const std::int32_t units[] = {1, 1};
  for (const char* name : {"qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b", "mixtral-8x22b",
                           "gpt-oss-120b", "deepseek-v3"}) {
    const auto work = test::stage_work(io::load_model(name), units, 2);
    EXPECT_GT(work[1].moe_layers, 0) << name;
    EXPECT_GT(work[1].expert_params, 0.0) << name;
  }
  // Latent attention's keys need attention = "latent", and it needs fused attention.
  EXPECT_EQ(model_error("[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\n"
                        "vocab = 100\nkv_lora_rank = 16\n"),
            "m.toml:7:16: key 'transformer.kv_lora_rank': needs attention = \"latent\"");
  EXPECT_EQ(model_error("[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\n"
                        "vocab = 100\nattention = \"latent\"\nkv_lora_rank = 16\n"
                        "qk_rope_head_dim = 8\nv_head_dim = 16\n"),
            "latent attention needs flash_attention = true (MLA runs in fused attention "
            "kernels)");
  // The per-head Q and K norms are multi-head attention's; rotary embeddings exclude a
  // position table.
  EXPECT_EQ(model_error("[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\n"
                        "vocab = 100\nattention = \"latent\"\nkv_lora_rank = 16\n"
                        "qk_rope_head_dim = 8\nv_head_dim = 16\nqk_norm = true\n"),
            "m.toml:11:11: key 'transformer.qk_norm': needs attention = \"multi-head\": latent "
            "attention's norms are its own (q_lora_rank, kv_lora_rank)");
  EXPECT_EQ(model_error("[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\n"
                        "vocab = 100\nrotary = true\n"),
            "m.toml:7:10: key 'transformer.rotary': a model with learned_positions = true has no "
            "rotary embeddings");
}

TEST(Config, OperatorLevelKeysAreChecked) {
  const std::string head =
      "[transformer]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 32\nvocab = 100\n";
  EXPECT_EQ(model_error(head + "precision = \"fp4\"\n"),
            "m.toml:7:13: key 'transformer.precision': precision = 'fp4': expected one of fp32, "
            "tf32, fp16, bf16, fp8");
  EXPECT_EQ(model_error(head + "tensor_parallel = 3\n"),
            "--tp 3: tensor parallelism splits the heads over its ranks, and 4 heads do not "
            "divide evenly");
  EXPECT_EQ(model_error(head + "kv_heads = 2\ntensor_parallel = 4\n"),
            "--tp 4: tensor parallelism splits the kv_heads over its ranks, and 2 kv_heads do "
            "not divide evenly");
  EXPECT_EQ(model_error(head + "sequence_parallel = true\n"),
            "--sequence-parallel needs --tp > 1: sequence parallelism splits the norms and "
            "dropouts along the tensor-parallel ranks");
  EXPECT_EQ(model_error(head + "dropout = \"yes\"\n"),
            "m.toml:7:11: key 'transformer.dropout': expected true or false, got a string");
  // The precision sets the element size unless dtype_bytes says otherwise; FP8 keeps 16-bit
  // activations between layers.
  const auto dtype = [&](const std::string& extra) {
    return test::ModelRun(io::parse_model(head + extra, "m.toml")).job.element_bytes();
  };
  EXPECT_EQ(dtype(""), 2);
  EXPECT_EQ(dtype("precision = \"fp32\"\n"), 4);
  EXPECT_EQ(dtype("precision = \"fp8\"\n"), 2);
  EXPECT_EQ(dtype("precision = \"fp8\"\ndtype_bytes = 1\n"), 1);

  const std::string network =
      "[network]\n[network.intra]\nlatency_s = 0\nbandwidth = 1e9\n[network.inter]\nlatency_s = "
      "0\nbandwidth = 1e9\n";
  const std::string roofline =
      "[device]\nmemory_bytes = 8e10\nmemory_bandwidth = 2e12\n[device.peak_flops]\nbf16 = "
      "1e15\n[device.gemm]\nsms = 100\nmax_efficiency = 0.8\n";
  EXPECT_EQ(system_error(roofline + network), "(no error)");
  EXPECT_EQ(system_error("[device]\nmemory_bytes = 8e10\nmemory_bandwidth = 2e12\npeak_flops = "
                         "1e15\n" +
                         network),
            "s.toml:1:1: key 'device.gemm': missing: the operator-level model needs the GEMM "
            "efficiency model [device.gemm] (sms, max_efficiency, ...), or give "
            "device.efficiency for the FLOP-proportional one");
  EXPECT_EQ(system_error("[device]\nmemory_bytes = 8e10\npeak_flops = 1e15\n[device.gemm]\nsms "
                         "= 1\nmax_efficiency = 1\n" +
                         network),
            "s.toml:1:1: key 'device': missing key 'memory_bandwidth'");
  std::string text = roofline + network;
  EXPECT_EQ(system_error(text.replace(text.find("bf16"), 4, "fp6")),
            "s.toml:5:1: key 'device.peak_flops.fp6': unknown key (expected: fp32, tf32, fp16, "
            "bf16, fp8, fp4)");
  text = roofline + network;
  EXPECT_EQ(system_error(text.replace(text.find("sms = 100"), 9, "sms = 0")),
            "s.toml:7:7: key 'device.gemm.sms': 0 is out of range (1..1048576)");
  text = roofline + network;
  EXPECT_EQ(
      system_error(text.replace(text.find("max_efficiency = 0.8"), 20, "max_efficiency = 1.2")),
      "s.toml:8:18: key 'device.gemm.max_efficiency': 1.2 is out of range (above 0 .. 1)");
  // A tile set and split-K; each bad form named at its place.
  const auto with_gemm = [&](const std::string& keys) {
    std::string t = roofline + network;
    return t.replace(t.find("max_efficiency = 0.8"), 0, keys);
  };
  const auto tiled = io::parse_system(
      with_gemm("tiles = [[128, 128], [256, 128]]\nsplit_k_min = 256\n"), "s.toml");
  EXPECT_EQ(tiled.device.gemm.tiles, (std::vector<GemmTile>{{128, 128}, {256, 128}}));
  EXPECT_EQ(tiled.device.gemm.split_k_min, 256);
  EXPECT_EQ(io::parse_system(io::system_toml(tiled), "back.toml").device, tiled.device);
  EXPECT_EQ(system_error(with_gemm("tiles = []\n")),
            "s.toml:8:9: key 'device.gemm.tiles': expected a non-empty array of [tile_m, tile_n] "
            "pairs");
  EXPECT_EQ(system_error(with_gemm("tiles = [[128, 128], [64]]\n")),
            "s.toml:8:22: key 'device.gemm.tiles': each tile is a pair [tile_m, tile_n] of "
            "integers");
  EXPECT_EQ(system_error(with_gemm("tiles = [[128, 0]]\n")),
            "s.toml:8:16: key 'device.gemm.tiles': a tile's dimensions are integers in 1..65536");
  EXPECT_EQ(system_error(with_gemm("tiles = [[128, 128]]\ntile_m = 64\n")),
            "s.toml:9:10: key 'device.gemm.tile_m': give either tiles (the set the library picks "
            "from) or tile_m and tile_n (one tile), not both");
  EXPECT_EQ(system_error(with_gemm("split_k_min = -1\n")),
            "s.toml:8:15: key 'device.gemm.split_k_min': -1 is out of range (0..1048576)");
  text = roofline + network;
  EXPECT_EQ(system_error(text.replace(text.find("[device.peak"), 0, "efficiency = 0.5\n")),
            "s.toml:7:1: key 'device.gemm': not with device.efficiency: give the "
            "FLOP-proportional efficiency or the operator-level model's [device.gemm], not both");
  text = roofline + network;
  EXPECT_EQ(system_error(text.replace(text.find("bandwidth = 1e9"), 15,
                                      "bandwidth = 1e9\ncollective_efficiency = 0")),
            "s.toml:13:25: key 'network.intra.collective_efficiency': 0 is out of range (above 0 "
            ".. 1)");
  // NCCL's medium and NVLS: named choices, on the node's links only, read back as written.
  text = roofline + network;
  EXPECT_EQ(system_error(
                text.replace(text.find("bandwidth = 1e9"), 15, "bandwidth = 1e9\nmedium = \"ib\"")),
            "s.toml:13:10: key 'network.intra.medium': 'ib' is not one of: nvlink, pcie");
  text = roofline + network;
  EXPECT_EQ(system_error(text.replace(text.find("bandwidth = 1e9"), 15,
                                      "bandwidth = 1e9\nnvls_efficiency = 0.5")),
            "s.toml:13:19: key 'network.intra.nvls_efficiency': NVLink SHARP runs in an NVSwitch: "
            "give medium = \"nvlink\" with it");
  text = roofline + network;
  const auto nvls =
      io::parse_system(text.replace(text.find("bandwidth = 1e9"), 15,
                                    "bandwidth = 1e9\nmedium = \"nvlink\"\nnvls_efficiency = 0.5"),
                       "s.toml");
  EXPECT_EQ(nvls.intra.medium, LinkMedium::NvLink);
  EXPECT_EQ(nvls.intra.nvls_efficiency, 0.5);
  EXPECT_EQ(io::parse_system(io::system_toml(nvls), "back.toml").intra, nvls.intra);
  text = roofline + network;
  EXPECT_EQ(system_error(text.replace(text.find("[network]\n"), 10, "[network]\nnodes = 0\n")),
            "s.toml:10:9: key 'network.nodes': 0 is out of range (1..1099511627776)");
  EXPECT_EQ(
      system_error("[device]\npreset = \"dgx-h100\"\n[network]\ntopology = \"chain\"\nnodes = "
                   "2\n[network.intra]\nlatency_s = 0\nbandwidth = 1e9\n"),
      "s.toml:5:9: key 'network.nodes': a chain has no nodes: leave nodes out");
}

TEST(Config, LoadByNameOrPath) {
  try {
    io::load_system("nosuch");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--system nosuch: no such preset or file (presets: a100-40gb, a100-80gb, a100-pcie, "
              "balanced, compute-bound, dgx-a100, dgx-b200, dgx-b300, dgx-h100, dgx-h200, "
              "gb200-nvl72, gb300-nvl72, grand-teton-h100, h800, ideal, llama3-h100-roce, "
              "network-bound; `pipetab list systems` describes them)");
  }
  EXPECT_FALSE(io::preset_text("models", "paper").empty());
  EXPECT_TRUE(io::preset_text("models", "nosuch").empty());
}

// Issue 14: `inf` where a whole number belongs was called "a number with a fraction".
TEST(Config, FloatsAreNamedForWhatTheyAre) {
  const std::string head = "[transformer]\nhidden = 1024\nheads = 8\nseq_len = 1024\nvocab = 10\n";
  EXPECT_NE(model_error(head + "layers = inf\n").find("got an infinity"), std::string::npos)
      << model_error(head + "layers = inf\n");
  EXPECT_NE(model_error(head + "layers = nan\n").find("got nan (not a number)"), std::string::npos);
  EXPECT_NE(model_error(head + "layers = 4.0\n").find("got a floating-point number"),
            std::string::npos);
  EXPECT_NE(model_error(head + "layers = 4.5\n").find("got a number with a fraction"),
            std::string::npos);
}

}  // namespace
}  // namespace pipetab
