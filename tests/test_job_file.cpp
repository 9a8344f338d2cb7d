// Job files in torchtitan's and Megatron-LM's formats (io/job_file.hpp): real files read to the
// settings their sources say (tests/data/jobs/README.md names each file's repository and commit;
// the expected values below are checked by hand against them), what is ignored and refused, the
// Megatron-LM arguments' syntax, and the writers' round trip: a Job and a Layout written and read
// back carry the same values.
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/job_file.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/sim/simulation.hpp"

namespace pipetab {
namespace {

using Values = std::map<std::string, std::string>;

const std::string kJobs = std::string(PIPETAB_SOURCE_DIR) + "/tests/data/jobs/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// key → value of every setting; each key once.
Values values_of(const io::JobFile& f) {
  Values v;
  for (const auto& s : f.settings) {
    EXPECT_TRUE(v.emplace(s.key, s.value).second) << "twice: " << s.key;
  }
  return v;
}

std::string origin_of(const io::JobFile& f, const std::string& key) {
  for (const auto& s : f.settings) {
    if (s.key == key) return s.origin;
  }
  return "(no setting " + key + ")";
}

// The 1-based line of the first line of `text` holding `needle`.
int line_of(const std::string& text, const std::string& needle) {
  const auto at = text.find(needle);
  if (at == std::string::npos) return -1;
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
}

bool has_entry(const std::vector<std::string>& list, const std::string& text) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& e) { return e.find(text) != std::string::npos; });
}

std::string all(const std::vector<std::string>& list) {
  std::string s;
  for (const auto& e : list)
    s += "  " + e + "\n";
  return s;
}

template <class Parse>
std::string error_of(Parse parse, const std::string& text, const std::string& file,
                     std::optional<std::int64_t> gpus) {
  try {
    (void)parse(text, file, gpus);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string titan_error(const std::string& text, std::optional<std::int64_t> gpus = 8) {
  return error_of(io::parse_torchtitan_job, text, "job.toml", gpus);
}

std::string megatron_error(const std::string& text, std::optional<std::int64_t> gpus = 8) {
  return error_of(io::parse_megatron_args, text, "run.args", gpus);
}

std::string bytes(double b) {
  return fmt::format("{}", b);
}

// --- torchtitan: the shipped files -------------------------------------------------------------

TEST(JobFileTorchtitan, Llama3EightBReadsToItsSettings) {
  const std::string path = kJobs + "llama3_8b.toml";
  const auto text = slurp(path);
  const auto f = io::parse_torchtitan_job(text, path, 64);
  EXPECT_EQ(f.format, "torchtitan");
  EXPECT_EQ(f.model, "llama3 8B");
  // -1 shards over the 64 GPUs the other degrees (all 1) leave; the float8 table is there but its
  // converter is commented out upstream, so the run is bf16; compile off: eager.
  EXPECT_EQ(values_of(f), (Values{{"seq_len", "8192"},
                                  {"micro_batch", "1"},
                                  {"global_batch", "64"},
                                  {"precision", "bf16"},
                                  {"recompute", "selective-op"},
                                  {"fused_elementwise", "false"},
                                  {"stack", "torchtitan"},
                                  {"tensor_parallel", "1"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "1"},
                                  {"data_parallel", "64"},
                                  {"fsdp", "true"},
                                  {"fsdp_impl", "fsdp2"},
                                  {"pipeline_parallel", "1"}}));
  EXPECT_EQ(origin_of(f, "seq_len"),
            fmt::format("{}:{}: training.seq_len", path, line_of(text, "seq_len = 8192")));
  EXPECT_EQ(origin_of(f, "recompute"),
            fmt::format("{}:{}: activation_checkpoint.selective_ac_option", path,
                        line_of(text, "selective_ac_option")));
  EXPECT_TRUE(has_entry(f.notes, "data_parallel_shard_degree = -1: 64 GPUs / 1")) << all(f.notes);
  EXPECT_TRUE(has_entry(f.ignored,
                        "quantize.linear.float8.enable_fsdp_float8_all_gather: float8 "
                        "is off"))
      << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "training.steps")) << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "optimizer.lr")) << all(f.ignored);
  EXPECT_FALSE(has_entry(f.ignored, "training.seq_len")) << all(f.ignored);
  EXPECT_FALSE(has_entry(f.ignored, "model.name")) << all(f.ignored);
  // Settings in file order: [training]'s before [parallelism]'s.
  const auto at = [&](const std::string& key) {
    for (std::size_t i = 0; i < f.settings.size(); ++i) {
      if (f.settings[i].key == key) return i;
    }
    return f.settings.size();
  };
  EXPECT_LT(at("seq_len"), at("tensor_parallel"));
}

TEST(JobFileTorchtitan, MinusOneShardNeedsTheGpuCount) {
  const std::string path = kJobs + "llama3_8b.toml";
  const auto text = slurp(path);
  const auto message = error_of(io::parse_torchtitan_job, text, path, std::nullopt);
  EXPECT_EQ(
      message.rfind(fmt::format("{}:{}:", path, line_of(text, "data_parallel_shard_degree")), 0),
      0u)
      << message;
  EXPECT_NE(message.find("parallelism.data_parallel_shard_degree"), std::string::npos) << message;
  EXPECT_NE(message.find("--gpus"), std::string::npos) << message;
  // A count the other degrees do not divide.
  const auto odd = titan_error("[parallelism]\ntensor_parallel_degree = 8\n", 12);
  EXPECT_NE(odd.find("job.toml:1:"), std::string::npos) << odd;
  EXPECT_NE(odd.find("12 GPUs are not a multiple of the other degrees' product 8"),
            std::string::npos)
      << odd;
  // The default -1 too, with no [parallelism] at all.
  EXPECT_NE(titan_error("[training]\nseq_len = 4\n", std::nullopt).find("the default -1"),
            std::string::npos);
}

TEST(JobFileTorchtitan, Llama3FourOFiveBReadsToItsSettings) {
  const std::string path = kJobs + "llama3_405b.toml";
  const auto f = io::parse_torchtitan_job(slurp(path), path, 128);
  EXPECT_EQ(f.model, "llama3 405B");
  // FSDP 16 × TP 8; converters = ["float8"] with torchao's default tensorwise recipe and the
  // float8 all-gather; async TP, which the compiled model allows.
  EXPECT_EQ(values_of(f), (Values{{"seq_len", "8192"},
                                  {"micro_batch", "2"},
                                  {"global_batch", "32"},
                                  {"precision", "fp8"},
                                  {"fp8_recipe", "tensorwise"},
                                  {"recompute", "full"},
                                  {"fused_elementwise", "true"},
                                  {"stack", "torchtitan-compile"},
                                  {"tensor_parallel", "8"},
                                  {"sequence_parallel", "true"},
                                  {"tp_overlap", "all"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "1"},
                                  {"data_parallel", "16"},
                                  {"fsdp", "true"},
                                  {"fsdp_impl", "fsdp2"},
                                  {"fsdp_fp8_all_gather", "true"},
                                  {"pipeline_parallel", "1"}}));
  EXPECT_TRUE(has_entry(f.ignored, "quantize.linear.float8.precompute_float8_dynamic_scale"))
      << all(f.ignored);
  // 128 GPUs that the degrees do not multiply to: 8 × 16 is 128, 8 × 20 is not.
  EXPECT_NE(error_of(io::parse_torchtitan_job, slurp(path), path, 100).find("not a multiple"),
            std::string::npos);
}

TEST(JobFileTorchtitan, Llama4PipelinedReadsToItsSettings) {
  const std::string path = kJobs + "llama4_17bx128e.toml";
  const auto text = slurp(path);
  const auto f = io::parse_torchtitan_job(text, path, 256);
  // TP 8 × PP 4 × FSDP 8; the default 1F1B schedule, one microbatch of the local batch of 1.
  EXPECT_EQ(values_of(f), (Values{{"seq_len", "8192"},
                                  {"micro_batch", "1"},
                                  {"global_batch", "8"},
                                  {"precision", "bf16"},
                                  {"recompute", "full"},
                                  {"fused_elementwise", "false"},
                                  {"stack", "torchtitan"},
                                  {"tensor_parallel", "8"},
                                  {"sequence_parallel", "true"},
                                  {"tp_overlap", "none"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "1"},
                                  {"data_parallel", "8"},
                                  {"fsdp", "true"},
                                  {"fsdp_impl", "fsdp2"},
                                  {"pipeline_parallel", "4"},
                                  {"schedule", "1f1b"}}));
  EXPECT_TRUE(has_entry(f.ignored,
                        "parallelism.expert_tensor_parallel_degree: "
                        "expert_parallel_degree is 1"))
      << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "quantize.linear.mx.filter_fqns: MXFP8 is off"))
      << all(f.ignored);
  EXPECT_EQ(origin_of(f, "micro_batch"),
            path + ": parallelism.pipeline_parallel_microbatch_size (torchtitan's default)");
}

TEST(JobFileTorchtitan, DeepSeekV3ReadsToItsSettings) {
  const std::string path = kJobs + "deepseek_v3_671b.toml";
  const auto f = io::parse_torchtitan_job(slurp(path), path, 64);
  // compile's components leave the model out: eager blocks.
  EXPECT_EQ(values_of(f), (Values{{"seq_len", "4096"},
                                  {"micro_batch", "4"},
                                  {"global_batch", "256"},
                                  {"precision", "bf16"},
                                  {"recompute", "selective-op"},
                                  {"fused_elementwise", "false"},
                                  {"stack", "torchtitan"},
                                  {"tensor_parallel", "1"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "1"},
                                  {"data_parallel", "64"},
                                  {"fsdp", "true"},
                                  {"fsdp_impl", "fsdp2"},
                                  {"pipeline_parallel", "1"}}));
  EXPECT_TRUE(has_entry(f.ignored,
                        "parallelism.pipeline_parallel_schedule: "
                        "pipeline_parallel_degree is 1"))
      << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored,
                        "parallelism.enable_async_tensor_parallel: "
                        "tensor_parallel_degree is 1"))
      << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "quantize.grouped_mm.float8.fqns: float8 is off"))
      << all(f.ignored);
}

// --- torchtitan: rules ---------------------------------------------------------------------------

TEST(JobFileTorchtitan, DegreesGivenImplyTheGpus) {
  const std::string text =
      "[parallelism]\n"
      "data_parallel_replicate_degree = 2\n"
      "data_parallel_shard_degree = 4\n"
      "context_parallel_degree = 2\n"
      "context_parallel_rotate_method = \"alltoall\"\n";
  const auto f = io::parse_torchtitan_job(text, "job.toml", std::nullopt);
  const auto v = values_of(f);
  // HSDP: replicas of shard × CP groups; torchtitan's "alltoall" rotation is a ring.
  EXPECT_EQ(v.at("gpus"), "16");
  EXPECT_EQ(v.at("data_parallel"), "8");
  EXPECT_EQ(v.at("fsdp"), "true");
  EXPECT_EQ(v.at("fsdp_shard"), "8");
  EXPECT_EQ(v.at("cp_method"), "ring");
  EXPECT_TRUE(has_entry(f.notes, "a ring")) << all(f.notes);
  // The product is checked against a count given.
  const auto message = titan_error(text, 32);
  EXPECT_EQ(message.rfind("job.toml:3:", 0), 0u) << message;
  EXPECT_NE(message.find("= 16 GPUs, not the 32 given"), std::string::npos) << message;
}

TEST(JobFileTorchtitan, PipelineKeys) {
  const std::string base =
      "[training]\nlocal_batch_size = 8\nglobal_batch_size = 32\n"
      "[parallelism]\ndata_parallel_shard_degree = 2\npipeline_parallel_degree = 4\n";
  {
    const auto f = io::parse_torchtitan_job(base +
                                                "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                                                "pipeline_parallel_microbatch_size = 2\n",
                                            "job.toml", 8);
    const auto v = values_of(f);
    EXPECT_EQ(v.at("schedule"), "interleaved");
    EXPECT_EQ(v.at("chunks"), "2");  // torchtitan's two stages per rank
    EXPECT_EQ(v.at("micro_batch"), "2");
    EXPECT_EQ(v.at("global_batch"), "32");
    EXPECT_TRUE(has_entry(f.notes, "2 steps of gradient accumulation")) << all(f.notes);
  }
  {
    // Split points give the stages: 7 points, 8 stages, 2 a rank.
    const auto f = io::parse_torchtitan_job(
        base +
            "pipeline_parallel_schedule = \"LoopedBFS\"\n"
            "pipeline_parallel_split_points = [\"layers.1\", \"layers.2\", \"layers.3\", "
            "\"layers.4\", \"layers.5\", \"layers.6\", \"layers.7\"]\n",
        "job.toml", 8);
    EXPECT_EQ(values_of(f).at("schedule"), "looped-bfs");
    EXPECT_EQ(values_of(f).at("chunks"), "2");
  }
  {
    // Modules per part give the layout too.
    const auto f = io::parse_torchtitan_job(
        base +
            "pipeline_parallel_schedule = \"ZBVZeroBubble\"\n"
            "module_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\"], [\"layers.1\"], "
            "[\"layers.2\"], [\"layers.3\"], [\"layers.4\"], [\"layers.5\"], [\"layers.6\"], "
            "[\"layers.7\", \"norm\", \"output\"]]\n",
        "job.toml", 8);
    const auto v = values_of(f);
    EXPECT_EQ(v.at("schedule"), "zb-v");
    EXPECT_EQ(v.count("chunks"), 0u);  // a V takes no chunks option
    EXPECT_EQ(v.at("pipeline_layout"), "Et|t|t|t|t|t|t|tL");
  }
  // A single-stage schedule with two stages a rank, a V with four.
  EXPECT_NE(titan_error(base + "pipeline_parallel_split_points = [\"layers.1\", \"layers.2\", "
                               "\"layers.3\", \"layers.4\", \"layers.5\", \"layers.6\", "
                               "\"layers.7\"]\n")
                .find("1F1B runs one"),
            std::string::npos);
  // An unknown schedule: file, line, key, PyTorch's names.
  const auto unknown = titan_error(base + "pipeline_parallel_schedule = \"zb-h1\"\n");
  EXPECT_EQ(unknown.rfind("job.toml:7:", 0), 0u) << unknown;
  EXPECT_NE(unknown.find("parallelism.pipeline_parallel_schedule"), std::string::npos);
  EXPECT_NE(unknown.find("Interleaved1F1B"), std::string::npos) << unknown;
  // The microbatch size must divide the local batch.
  const auto micro = titan_error(base + "pipeline_parallel_microbatch_size = 3\n");
  EXPECT_EQ(micro.rfind("job.toml:7:", 0), 0u) << micro;
  EXPECT_NE(micro.find("3 does not divide training.local_batch_size = 8"), std::string::npos)
      << micro;
  // The global batch, a multiple of local × data-parallel degree.
  const auto global = titan_error(
      "[training]\nlocal_batch_size = 3\nglobal_batch_size = 10\n"
      "[parallelism]\ndata_parallel_shard_degree = 2\n",
      2);
  EXPECT_EQ(global.rfind("job.toml:3:", 0), 0u) << global;
  EXPECT_NE(global.find("training.global_batch_size"), std::string::npos) << global;
}

TEST(JobFileTorchtitan, RefusesWhatItCannotModel) {
  EXPECT_NE(titan_error("[activation_checkpoint]\nmode = \"memory_budget\"\n").find("job.toml:2:"),
            std::string::npos);
  EXPECT_NE(titan_error("[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = "
                        "\"3\"\n")
                .find("every 3th block is not modelled"),
            std::string::npos);
  EXPECT_NE(
      titan_error("[activation_checkpoint]\nselective_ac_option = \"x\"\n").find("neither \"op\""),
      std::string::npos);
  EXPECT_NE(titan_error("[model]\nconverters = [\"quantize.linear.mx\"]\n").find("MXFP8"),
            std::string::npos);
  // Async TP without the compiled model, and DDP beside TP: torchtitan refuses both.
  EXPECT_NE(titan_error("[parallelism]\ntensor_parallel_degree = 8\n"
                        "enable_async_tensor_parallel = true\n")
                .find("job.toml:3:"),
            std::string::npos);
  EXPECT_NE(titan_error("[parallelism]\ndata_parallel_replicate_degree = 4\n"
                        "data_parallel_shard_degree = 1\ntensor_parallel_degree = 2\n")
                .find("DDP"),
            std::string::npos);
  // ETP is 1 or TP.
  EXPECT_NE(titan_error("[parallelism]\ntensor_parallel_degree = 4\nexpert_parallel_degree = 2\n"
                        "expert_tensor_parallel_degree = 2\n")
                .find("takes 1 or tensor_parallel_degree"),
            std::string::npos);
  // "1" checkpoints every block: full, with a note.
  const auto one = io::parse_torchtitan_job(
      "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"1\"\n", "j.toml", 8);
  EXPECT_EQ(values_of(one).at("recompute"), "full");
}

TEST(JobFileTorchtitan, BadValuesNameTheirKey) {
  const auto type = titan_error("[training]\nseq_len = \"long\"\n");
  EXPECT_EQ(type.rfind("job.toml:2:", 0), 0u) << type;
  EXPECT_NE(type.find("key 'training.seq_len': expected an integer, got a string"),
            std::string::npos)
      << type;
  EXPECT_NE(titan_error("[parallelism]\ndata_parallel_shard_degree = 0\n").find("got 0"),
            std::string::npos);
  EXPECT_NE(titan_error("[parallelism]\ntensor_parallel_degree = -2\n").find("out of range"),
            std::string::npos);
  EXPECT_NE(titan_error("[parallelism]\ncontext_parallel_rotate_method = \"ulysses\"\n")
                .find("'ulysses' is not one of: allgather, alltoall"),
            std::string::npos);
  EXPECT_NE(titan_error("[model]\nconverters = \"float8\"\n").find("expected an array"),
            std::string::npos);
  EXPECT_NE(titan_error("[training\n").find("invalid TOML"), std::string::npos);
  EXPECT_NE(titan_error("parallelism = 3\n").find("expected a table"), std::string::npos);
}

TEST(JobFileTorchtitan, OlderSpellings) {
  // torchtitan in mid-2025: batch_size, [training] compile, [float8] with converters = ["float8"].
  const auto f = io::parse_torchtitan_job(
      "[model]\nconverters = [\"float8\"]\n"
      "[training]\nbatch_size = 4\ncompile = true\n"
      "[parallelism]\ndata_parallel_shard_degree = 8\n"
      "[float8]\nenable_fsdp_float8_all_gather = true\nrecipe_name = \"rowwise\"\n",
      "old.toml", std::nullopt);
  const auto v = values_of(f);
  EXPECT_EQ(v.at("micro_batch"), "4");
  EXPECT_EQ(v.at("fused_elementwise"), "true");
  EXPECT_EQ(v.at("precision"), "fp8");
  EXPECT_EQ(v.at("fp8_recipe"), "rowwise");
  EXPECT_EQ(v.at("fsdp_fp8_all_gather"), "true");
  EXPECT_EQ(v.at("gpus"), "8");
  // Before [parallelism] (2025-03): the degrees in [training], the pipeline in [experimental],
  // its microbatches counted, by default one per stage.
  const std::string legacy =
      "[training]\nbatch_size = 8\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 2\n"
      "[experimental]\npipeline_parallel_degree = 2\n";
  const auto old = io::parse_torchtitan_job(legacy, "2024.toml", 8);
  const auto w = values_of(old);
  EXPECT_EQ(w.at("data_parallel"), "2");
  EXPECT_EQ(w.at("tensor_parallel"), "2");
  EXPECT_EQ(w.at("pipeline_parallel"), "2");
  EXPECT_EQ(w.at("schedule"), "1f1b");
  EXPECT_EQ(w.at("micro_batch"), "4");  // 8 / the 2 stages
  EXPECT_EQ(origin_of(old, "tensor_parallel"), "2024.toml:4: parallelism.tensor_parallel_degree");
  EXPECT_TRUE(has_entry(old.notes,
                        "experimental.pipeline_parallel_degree, "
                        "training.data_parallel_shard_degree"))
      << all(old.notes);
  EXPECT_TRUE(old.ignored.empty()) << all(old.ignored);
  EXPECT_EQ(values_of(io::parse_torchtitan_job(legacy + "pipeline_parallel_microbatches = 8\n",
                                               "2024.toml", 8))
                .at("micro_batch"),
            "1");
  EXPECT_NE(titan_error(legacy + "pipeline_parallel_microbatches = 3\n").find("job.toml:7:"),
            std::string::npos);
}

// --- Megatron-LM: the launch scripts -------------------------------------------------------------

TEST(JobFileMegatron, Llama3EightBFp8ReadsToItsSettings) {
  const std::string path = kJobs + "megatron_llama3_8b_h100_fp8.args";
  const auto text = slurp(path);
  const auto f = io::parse_megatron_args(text, path, std::nullopt);
  EXPECT_EQ(f.format, "megatron");
  // torchrun's one node of 8 gives the GPUs; FP8 hybrid with the default delayed recipe; the
  // gradient buckets Megatron-Core's default 4e7 parameters of bf16 gradients.
  EXPECT_EQ(values_of(f), (Values{{"gpus", "8"},
                                  {"data_parallel", "8"},
                                  {"tensor_parallel", "1"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "1"},
                                  {"pipeline_parallel", "1"},
                                  {"seq_len", "8192"},
                                  {"micro_batch", "1"},
                                  {"global_batch", "128"},
                                  {"precision", "fp8"},
                                  {"fp8_recipe", "delayed"},
                                  {"fp8_params", "true"},
                                  {"fp8_attention", "false"},
                                  {"recompute", "none"},
                                  {"moe_recompute", "none"},
                                  {"moe_shared_expert_overlap", "false"},
                                  {"a2a_overlap", "false"},
                                  {"fsdp", "false"},
                                  {"distributed_optimizer", "true"},
                                  {"dp_overlap", "true"},
                                  {"dp_bucket_bytes", bytes(8e7)},
                                  {"flash_attention", "true"},
                                  {"attention_kernel", "cudnn"},
                                  {"fused_elementwise", "true"},
                                  {"stack", "megatron-core"},
                                  {"grad_accumulation_fusion", "true"}}));
  EXPECT_EQ(origin_of(f, "seq_len"),
            fmt::format("{}:{}: --seq-length", path, line_of(text, "--seq-length")));
  EXPECT_EQ(origin_of(f, "gpus"), fmt::format("{}:{}: --nproc_per_node × --nnodes", path,
                                              line_of(text, "--nproc_per_node")));
  EXPECT_TRUE(has_entry(f.ignored, "--hidden-size: the model comes from --model"))
      << all(f.ignored);
  EXPECT_FALSE(has_entry(f.ignored, "--fp8-param-gather")) << all(f.ignored);
  EXPECT_EQ(origin_of(f, "fp8_params"),
            fmt::format("{}:{}: --fp8-param-gather", path, line_of(text, "--fp8-param-gather")));
  EXPECT_TRUE(has_entry(f.ignored, "--lr")) << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "'torchrun' (a word before any flag)")) << all(f.ignored);
  EXPECT_FALSE(has_entry(f.ignored, "--seq-length")) << all(f.ignored);
  EXPECT_TRUE(has_entry(f.notes, "--sequence-parallel with tensor parallel size 1"))
      << all(f.notes);
  // The file's 8 GPUs against another count.
  EXPECT_NE(error_of(io::parse_megatron_args, text, path, 16).find("= 8 GPUs, not the 16 given"),
            std::string::npos);
}

TEST(JobFileMegatron, MixtralReadsToItsSettings) {
  const std::string path = kJobs + "megatron_mixtral_8x7b.args";
  const auto f = io::parse_megatron_args(slurp(path), path, std::nullopt);
  // 4 nodes of 8: PP 4 leaves 8 data-parallel replicas, over which EP 8 spreads the experts; ETP
  // is TP's 1 by default.
  EXPECT_EQ(values_of(f), (Values{{"gpus", "32"},
                                  {"data_parallel", "8"},
                                  {"tensor_parallel", "1"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "8"},
                                  {"expert_tensor_parallel", "1"},
                                  {"pipeline_parallel", "4"},
                                  {"schedule", "1f1b"},
                                  {"seq_len", "4096"},
                                  {"micro_batch", "1"},
                                  {"global_batch", "256"},
                                  {"precision", "bf16"},
                                  {"recompute", "none"},
                                  {"moe_recompute", "none"},
                                  {"moe_dispatcher", "alltoall"},
                                  {"moe_shared_expert_overlap", "false"},
                                  {"a2a_overlap", "false"},
                                  {"fsdp", "false"},
                                  {"distributed_optimizer", "true"},
                                  {"dp_overlap", "true"},
                                  {"dp_bucket_bytes", bytes(1.6e8)},
                                  {"flash_attention", "true"},
                                  {"fused_elementwise", "true"},
                                  {"stack", "megatron-core"},
                                  {"grad_accumulation_fusion", "true"}}));
  EXPECT_TRUE(has_entry(f.notes, "1 of Megatron-LM's 5 element-wise fusions turned off"))
      << all(f.notes);
  EXPECT_TRUE(has_entry(f.ignored, "--num-experts: the model comes from --model"))
      << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "--no-position-embedding")) << all(f.ignored);
}

TEST(JobFileMegatron, Gpt3OneSeventyFiveBReadsToItsSettings) {
  const std::string path = kJobs + "megatron_gpt3_175b.args";
  const auto text = slurp(path);
  const auto f = io::parse_megatron_args(text, path, 1024);
  EXPECT_EQ(values_of(f), (Values{{"data_parallel", "8"},
                                  {"tensor_parallel", "8"},
                                  {"sequence_parallel", "false"},
                                  {"tp_overlap", "backward"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "1"},
                                  {"pipeline_parallel", "16"},
                                  {"schedule", "1f1b"},
                                  {"seq_len", "2048"},
                                  {"micro_batch", "1"},
                                  {"global_batch", "1536"},
                                  {"precision", "fp16"},
                                  {"recompute", "none"},
                                  {"moe_recompute", "none"},
                                  {"moe_shared_expert_overlap", "false"},
                                  {"a2a_overlap", "false"},
                                  {"fsdp", "false"},
                                  {"distributed_optimizer", "false"},
                                  {"dp_overlap", "false"},
                                  {"flash_attention", "true"},
                                  {"fused_elementwise", "true"},
                                  {"stack", "megatron-core"},
                                  {"grad_accumulation_fusion", "true"}}));
  EXPECT_TRUE(has_entry(f.ignored, "--rampup-batch-size: the global batch's ramp-up"))
      << all(f.ignored);
  // Without a GPU count the data-parallel size stays open.
  const auto open = io::parse_megatron_args(text, path, std::nullopt);
  EXPECT_EQ(values_of(open).count("data_parallel"), 0u);
  EXPECT_EQ(values_of(open).count("global_batch"), 1u);
  EXPECT_TRUE(has_entry(open.notes, "pass --gpus")) << all(open.notes);
  // 64 GPUs are no multiple of TP 8 × PP 16.
  const auto few = error_of(io::parse_megatron_args, text, path, 64);
  EXPECT_EQ(
      few.rfind(fmt::format("{}:{}:", path, line_of(text, "--tensor-model-parallel-size")), 0), 0u)
      << few;
  EXPECT_NE(few.find("--tensor-model-parallel-size: 64 GPUs are not a multiple"), std::string::npos)
      << few;
}

TEST(JobFileMegatron, Sc21InterleavedReadsToItsSettings) {
  const std::string path = kJobs + "megatron_sc21_figure_12.args";
  const auto f = io::parse_megatron_args(slurp(path), path, 96);
  // 96 layers over 12 stages of 8, two layers a virtual stage: 4 chunks.
  EXPECT_EQ(values_of(f), (Values{{"data_parallel", "1"},
                                  {"tensor_parallel", "8"},
                                  {"sequence_parallel", "false"},
                                  {"tp_overlap", "backward"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "1"},
                                  {"pipeline_parallel", "12"},
                                  {"schedule", "interleaved"},
                                  {"chunks", "4"},
                                  {"seq_len", "2048"},
                                  {"micro_batch", "1"},
                                  {"global_batch", "12"},
                                  {"precision", "fp16"},
                                  {"recompute", "none"},
                                  {"moe_recompute", "none"},
                                  {"moe_shared_expert_overlap", "false"},
                                  {"a2a_overlap", "false"},
                                  {"fsdp", "false"},
                                  {"distributed_optimizer", "false"},
                                  {"dp_overlap", "false"},
                                  {"flash_attention", "true"},
                                  {"fused_elementwise", "true"},
                                  {"stack", "megatron-core"},
                                  {"grad_accumulation_fusion", "true"}}));
  EXPECT_TRUE(has_entry(f.ignored,
                        "--activations-checkpoint-method: Megatron-LM's recomputation "
                        "flag before 2022"))
      << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "--DDP-impl")) << all(f.ignored);
  EXPECT_FALSE(has_entry(f.ignored, "--num-layers")) << all(f.ignored);  // used for the chunks
}

TEST(JobFileMegatron, DeepSeekV3FsdpReadsEitherFlexBackend) {
  const std::string path = kJobs + "megatron_deepseek_v3_fsdp.args";
  auto text = slurp(path);
  // The file's backend is HybridEP, read as its own dispatcher and named by its flag's line.
  const auto hybrid = io::parse_megatron_args(text, path, 256);
  EXPECT_EQ(values_of(hybrid).at("moe_dispatcher"), "hybridep");
  EXPECT_EQ(origin_of(hybrid, "moe_dispatcher"),
            fmt::format("{}:{}: --moe-flex-dispatcher-backend", path,
                        line_of(text, "--moe-flex-dispatcher-backend")));
  text.replace(text.find("hybridep"), 8, "deepep");
  const auto f = io::parse_megatron_args(text, path, 256);
  // Megatron-FSDP over 256 replicas; the MLP and MoE modules recomputed, not the attention.
  EXPECT_EQ(values_of(f), (Values{{"data_parallel", "256"},
                                  {"tensor_parallel", "1"},
                                  {"context_parallel", "1"},
                                  {"expert_parallel", "8"},
                                  {"expert_tensor_parallel", "1"},
                                  {"pipeline_parallel", "1"},
                                  {"seq_len", "4096"},
                                  {"micro_batch", "4"},
                                  {"global_batch", "2048"},
                                  {"precision", "bf16"},
                                  {"recompute", "none"},
                                  {"moe_recompute", "mlp"},
                                  {"moe_recompute_norm", "true"},
                                  {"mla_recompute_up_proj", "true"},
                                  {"moe_dispatcher", "deepep"},
                                  {"moe_shared_expert_overlap", "false"},
                                  {"a2a_overlap", "false"},
                                  {"fused_multihot", "true"},
                                  {"fsdp", "true"},
                                  {"fsdp_impl", "megatron"},
                                  {"distributed_optimizer", "true"},
                                  {"dp_overlap", "true"},
                                  {"dp_bucket_bytes", bytes(2.56e8 * 2)},
                                  {"flash_attention", "true"},
                                  {"fused_elementwise", "true"},
                                  {"stack", "megatron-core"},
                                  {"grad_accumulation_fusion", "false"}}));
  EXPECT_FALSE(has_entry(f.notes, "--recompute-modules mla_up_proj")) << all(f.notes);
  EXPECT_EQ(origin_of(f, "mla_recompute_up_proj"),
            fmt::format("{}:{}: --recompute-modules", path, line_of(text, "--recompute-modules")));
  EXPECT_FALSE(has_entry(f.notes, "--recompute-modules layernorm")) << all(f.notes);
  EXPECT_EQ(origin_of(f, "moe_recompute_norm"),
            fmt::format("{}:{}: --recompute-modules", path, line_of(text, "--recompute-modules")));
  EXPECT_TRUE(has_entry(f.notes, "--use-distributed-optimizer is given twice")) << all(f.notes);
  EXPECT_TRUE(has_entry(f.ignored, "--moe-router-topk: the model comes from --model"))
      << all(f.ignored);
  // --enable-experimental fuses DeepEP's multi-hot conversion only beside the fused permutation
  // (Megatron-Core's is_experimental_enabled() and moe_permute_fusion).
  EXPECT_EQ(origin_of(f, "fused_multihot"),
            fmt::format("{}:{}: --enable-experimental with --moe-permute-fusion", path,
                        line_of(text, "--enable-experimental")));
  auto unfused = text;
  unfused.replace(unfused.find("--moe-permute-fusion\n"), 21, "\n");
  const auto g = io::parse_megatron_args(unfused, path, 256);
  EXPECT_EQ(values_of(g).at("fused_multihot"), "false");
  EXPECT_EQ(origin_of(g, "fused_multihot"),
            fmt::format("{}:{}: --enable-experimental without --moe-permute-fusion", path,
                        line_of(unfused, "--enable-experimental")));
}

// --- Megatron-LM: syntax and rules ---------------------------------------------------------------

TEST(JobFileMegatron, Syntax) {
  // Continuations, several flags a line, --flag=value, quotes, comments (also after a flag), a
  // flag given twice, unknown flags with values.
  const std::string text =
      "# a comment line\n"
      "torchrun --nproc-per-node=4 pretrain_gpt.py \\\n"
      "  --tensor-model-parallel-size=2 --seq-length 1024 \\  \n"
      "  --micro-batch-size 2   # two sequences\n"
      "--global-batch-size \"16\" --some-new-flag a b c\n"
      "--micro-batch-size 1\n"
      "--cp-comm-type p2p --bf16\n";
  const auto f = io::parse_megatron_args(text, "run.args", std::nullopt);
  const auto v = values_of(f);
  EXPECT_EQ(v.at("gpus"), "4");
  EXPECT_EQ(v.at("data_parallel"), "2");
  EXPECT_EQ(v.at("tensor_parallel"), "2");
  EXPECT_EQ(v.at("seq_len"), "1024");
  EXPECT_EQ(v.at("micro_batch"), "1");  // the last counts
  EXPECT_EQ(v.at("global_batch"), "16");
  EXPECT_EQ(v.at("precision"), "bf16");
  EXPECT_EQ(origin_of(f, "seq_len"), "run.args:3: --seq-length");
  EXPECT_EQ(origin_of(f, "micro_batch"), "run.args:6: --micro-batch-size");
  EXPECT_TRUE(has_entry(f.ignored, "--some-new-flag")) << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "--micro-batch-size: given again on line 6")) << all(f.ignored);
  EXPECT_TRUE(has_entry(f.ignored, "--cp-comm-type: context parallel size is 1")) << all(f.ignored);
  EXPECT_TRUE(has_entry(f.notes, "--micro-batch-size is given twice")) << all(f.notes);
}

TEST(JobFileMegatron, BadFlagsNameFileLineAndFlag) {
  EXPECT_EQ(megatron_error("--bf16\n--seq-length\n"),
            "run.args:2:1: --seq-length: expected an integer after it");
  EXPECT_EQ(megatron_error("--seq-length\n4096\n"),
            "run.args:1:1: --seq-length: expected an integer after it");
  EXPECT_EQ(megatron_error("--bf16 --micro-batch-size two\n"),
            "run.args:1:8: --micro-batch-size: expected an integer, got 'two'");
  EXPECT_EQ(megatron_error("--bf16=yes\n"),
            "run.args:1:1: --bf16: takes no value (it is a switch), got 'yes'");
  EXPECT_EQ(megatron_error("--seq-length 10 20\n"),
            "run.args:1:1: --seq-length: takes one value, got 2: 10 20");
  EXPECT_NE(megatron_error("--moe-expert-capacity-factor nan\n").find("expected a positive number"),
            std::string::npos);
  EXPECT_NE(megatron_error("--recompute-granularity partial\n").find("'partial' is not one of"),
            std::string::npos);
  EXPECT_EQ(megatron_error("--seq-length '4096\n"), "run.args:1:14: a ' quote is not closed");
}

// Megatron-Core's recompute modules mlp, moe and moe_act (transformer_layer.py): mlp is the dense
// layers' MLP alone, moe the MoE blocks (pipetab's moe_recompute mlp, which takes the dense MLPs
// along), and they combine with moe_act as NVIDIA's DeepSeek-V3 GB200 run does.
TEST(JobFileMegatron, RecomputeModulesMlpMoeAndMoeAct) {
  const auto read = [](const std::string& modules) {
    return values_of(io::parse_megatron_args(
        "--recompute-granularity selective\n--recompute-modules " + modules + "\n", "run.args", 8));
  };
  auto v = read("mlp moe_act");
  EXPECT_EQ(v.at("dense_mlp_recompute"), "true");
  EXPECT_EQ(v.at("moe_recompute"), "moe_act");
  v = read("mlp");
  EXPECT_EQ(v.at("dense_mlp_recompute"), "true");
  EXPECT_EQ(v.at("moe_recompute"), "none");
  v = read("mlp moe");
  EXPECT_EQ(v.count("dense_mlp_recompute"), 0U);
  EXPECT_EQ(v.at("moe_recompute"), "mlp");
  const auto moe = io::parse_megatron_args(
      "--recompute-granularity selective\n--recompute-modules moe\n", "run.args", 8);
  EXPECT_EQ(values_of(moe).at("moe_recompute"), "mlp");
  EXPECT_TRUE(has_entry(moe.notes, "recomputes the dense layers' MLP too")) << all(moe.notes);
}

TEST(JobFileMegatron, RefusesWhatItCannotModel) {
  EXPECT_NE(megatron_error("--context-parallel-size 2 --cp-comm-type a2a+p2p\n").find("a2a+p2p"),
            std::string::npos);
  EXPECT_NE(megatron_error("--context-parallel-size 2 --cp-comm-type p2p a2a\n")
                .find("a method per layer"),
            std::string::npos);
  // MXFP8 is read (its GEMMs need a device with [device.gemm_mxfp8]: stage_cost.cpp); a
  // quantizer factory is not.
  EXPECT_EQ(
      values_of(io::parse_megatron_args("--fp8-format e4m3\n--fp8-recipe mxfp8\n", "run.args", 8))
          .at("fp8_recipe"),
      "mxfp8");
  EXPECT_NE(megatron_error("--fp8-format hybrid\n--fp8-recipe custom\n").find("custom"),
            std::string::npos);
  // FP4: Transformer Engine's NVFP4, carried as the FP8 job's nvfp4 recipe; not beside FP8.
  const auto fp4 = values_of(io::parse_megatron_args("--bf16\n--fp4-format e2m1\n", "run.args", 8));
  EXPECT_EQ(fp4.at("fp8_recipe"), "nvfp4");
  EXPECT_EQ(fp4.at("precision"), "fp8");
  EXPECT_NE(megatron_error("--fp8-format hybrid\n--fp4-format e2m1\n").find("beside --fp8-format"),
            std::string::npos);
  EXPECT_NE(megatron_error("--fp4-format e2m1\n--fp4-recipe custom\n").find("custom"),
            std::string::npos);
  EXPECT_NE(megatron_error("--moe-token-dispatcher-type allgather\n").find("allgather dispatcher"),
            std::string::npos);
  // Megatron-LM's default dispatcher, for a file that names experts.
  EXPECT_NE(megatron_error("--num-experts 8\n").find("Megatron-LM's default dispatcher"),
            std::string::npos);
  EXPECT_NE(megatron_error("--bf16 --fp16\n").find("--fp16: beside --bf16"), std::string::npos);
  EXPECT_NE(megatron_error("--recompute-granularity full\n").find("needs --recompute-method"),
            std::string::npos);
  // Block recomputation of some of a chunk's layers.
  EXPECT_NE(megatron_error("--num-layers 32 --pipeline-model-parallel-size 2\n"
                           "--recompute-granularity full --recompute-method block "
                           "--recompute-num-layers 4\n",
                           16)
                .find("run.args:2:"),
            std::string::npos);
  const auto whole = io::parse_megatron_args(
      "--num-layers 32 --pipeline-model-parallel-size 2 --recompute-granularity full "
      "--recompute-method block --recompute-num-layers 16\n",
      "run.args", 16);
  EXPECT_EQ(values_of(whole).at("recompute"), "full");
  EXPECT_NE(megatron_error("--tensor-model-parallel-size 2 --tp-comm-overlap\n")
                .find("without --sequence-parallel"),
            std::string::npos);
  EXPECT_NE(megatron_error("--use-torch-fsdp2 --pipeline-model-parallel-size 2\n")
                .find("with pipeline parallelism"),
            std::string::npos);
  EXPECT_NE(
      megatron_error("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage"
                     " 2\n")
          .find("needs --num-layers"),
      std::string::npos);
  EXPECT_NE(megatron_error("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank"
                           " 2 --pipeline-model-parallel-layout 'Et|tt|tt|tL'\n")
                .find("give only one"),
            std::string::npos);
  EXPECT_NE(
      megatron_error("--micro-batch-size 2 --global-batch-size 6\n", 2).find("not a multiple"),
      std::string::npos);
}

// Transformer Engine's CPU offload of whole layers, as Megatron-Bridge's GB200 and GB300 Llama 3
// 70B recipes run it (reference blackwell-runs.md B33, B37), read and written back.
TEST(JobFileMegatron, CpuOffloadingReadsToOffloadLayers) {
  const auto f =
      io::parse_megatron_args("--cpu-offloading\n--cpu-offloading-num-layers 40\n", "run.args", 8);
  EXPECT_EQ(values_of(f).at("offload_layers"), "40");
  EXPECT_EQ(origin_of(f, "offload_layers"), "run.args:2: --cpu-offloading-num-layers");
  EXPECT_NE(megatron_error("--cpu-offloading\n").find("without --cpu-offloading-num-layers"),
            std::string::npos);
  Job job;
  job.seq_len = 8192;
  job.global_batch = 8;
  job.offload_layers = 20;
  const auto args = io::megatron_arguments(job, Layout{}, 1, "offload");
  EXPECT_NE(args.find("--cpu-offloading-num-layers 20"), std::string::npos) << args;
  EXPECT_EQ(values_of(io::parse_megatron_args(args, "w.args", 1)).at("offload_layers"), "20");
  job.offload_layers = 0;
  job.offload_activations = 0.5;
  EXPECT_THROW(io::megatron_arguments(job, Layout{}, 1, "offload"), Error);
}

// Megatron-Core's fine-grained activation offload (docs/user-guide/features/
// fine_grained_activation_offloading.md's example), read, refused where pipetab does not model
// it, and written back.
TEST(JobFileMegatron, FineGrainedOffloadReadsToOffloadModules) {
  const auto f = io::parse_megatron_args(
      "--fine-grained-activation-offloading\n--offload-modules core_attn attn_proj expert_fc1\n",
      "run.args", 8);
  EXPECT_EQ(values_of(f).at("offload_modules"), "core_attn+attn_proj+expert_fc1");
  EXPECT_EQ(origin_of(f, "offload_modules"), "run.args:2: --offload-modules");
  EXPECT_NE(
      megatron_error("--fine-grained-activation-offloading\n").find("without --offload-modules"),
      std::string::npos);
  EXPECT_NE(megatron_error("--fine-grained-activation-offloading --offload-modules moe_act\n"
                           "--activation-offload-fraction 0.5\n")
                .find("not modelled"),
            std::string::npos);
  EXPECT_NE(megatron_error("--offload-modules moe_act --min-offloaded-tensor-size 0 "
                           "--fine-grained-activation-offloading\n")
                .find("0 elements: not modelled"),
            std::string::npos);
  EXPECT_NE(megatron_error("--offload-modules bogus\n").find("bogus"), std::string::npos);
  // Without the switch Megatron-LM offloads nothing: the modules are ignored, with the reason.
  const auto off = io::parse_megatron_args("--offload-modules core_attn\n", "run.args", 8);
  EXPECT_EQ(values_of(off).count("offload_modules"), 0U);
  EXPECT_TRUE(has_entry(off.ignored, "--offload-modules")) << all(off.ignored);
  Job job;
  job.seq_len = 8192;
  job.global_batch = 8;
  job.offload_modules = offload_bit(OffloadModule::MoeAct) | offload_bit(OffloadModule::QkvLinear);
  const auto args = io::megatron_arguments(job, Layout{}, 1, "offload");
  EXPECT_NE(args.find("--fine-grained-activation-offloading"), std::string::npos) << args;
  EXPECT_NE(args.find("--offload-modules qkv_linear moe_act"), std::string::npos) << args;
  EXPECT_EQ(values_of(io::parse_megatron_args(args, "w.args", 1)).at("offload_modules"),
            "qkv_linear+moe_act");
}

// CUDA graphs: the full iteration (Megatron-Core's local implementation, or the legacy switch)
// and Transformer Engine's per-layer graphs of named modules, read, refused where pipetab does
// not model them, and written back.
TEST(JobFileMegatron, CudaGraphsReadToTheFullGraphOrTheCapturedModules) {
  const auto te = io::parse_megatron_args(
      "--cuda-graph-impl transformer_engine\n--cuda-graph-scope attn moe_router moe_preprocess\n",
      "run.args", 8);
  EXPECT_EQ(values_of(te).at("cuda_graph_scope"), "attn+moe_router+moe_preprocess");
  EXPECT_EQ(origin_of(te, "cuda_graph_scope"), "run.args:2: --cuda-graph-scope");
  EXPECT_EQ(values_of(io::parse_megatron_args(
                          "--cuda-graph-impl transformer_engine --cuda-graph-modules mamba\n",
                          "run.args", 8))
                .at("cuda_graph_scope"),
            "mamba");
  EXPECT_EQ(
      values_of(io::parse_megatron_args(
                    "--cuda-graph-impl local --cuda-graph-scope attn moe_router\n", "run.args", 8))
          .at("cuda_graph_scope"),
      "attn+moe_router");
  // The whole iteration, or every layer whole (no scope, or "full"): the passes' host time out.
  for (const char* full : {"--cuda-graph-impl local --cuda-graph-scope full_iteration\n",
                           "--cuda-graph-impl full_iteration\n", "--enable-cuda-graph\n",
                           "--cuda-graph-impl transformer_engine\n",
                           "--cuda-graph-impl local --cuda-graph-scope full\n"})
    EXPECT_EQ(values_of(io::parse_megatron_args(full, "run.args", 8)).at("cuda_graphs"), "true")
        << full;
  EXPECT_NE(megatron_error("--cuda-graph-impl transformer_engine --cuda-graph-scope moe\n")
                .find("drop-padding"),
            std::string::npos);
  EXPECT_NE(megatron_error("--cuda-graph-impl transformer_engine --cuda-graph-scope "
                           "full_iteration\n")
                .find("needs --cuda-graph-impl local"),
            std::string::npos);
  EXPECT_NE(megatron_error("--cuda-graph-impl transformer_engine --cuda-graph-scope attn "
                           "--cuda-graph-modules mlp\n")
                .find("give --cuda-graph-scope or --cuda-graph-modules"),
            std::string::npos);
  const auto none = io::parse_megatron_args("--cuda-graph-scope attn\n", "run.args", 8);
  EXPECT_EQ(values_of(none).count("cuda_graph_scope"), 0U);
  EXPECT_TRUE(has_entry(none.ignored, "--cuda-graph-scope")) << all(none.ignored);
  Job job;
  job.seq_len = 8192;
  job.global_batch = 8;
  job.stack.graph_modules = graph_bit(GraphModule::Attn) | graph_bit(GraphModule::Mamba);
  const auto args = io::megatron_arguments(job, Layout{}, 1, "graphs");
  EXPECT_NE(args.find("--cuda-graph-impl transformer_engine"), std::string::npos) << args;
  EXPECT_NE(args.find("--cuda-graph-scope attn mamba"), std::string::npos) << args;
  EXPECT_EQ(values_of(io::parse_megatron_args(args, "w.args", 1)).at("cuda_graph_scope"),
            "attn+mamba");
  job.stack.graph_modules = 0;
  job.stack.cuda_graphs = true;
  EXPECT_EQ(values_of(io::parse_megatron_args(io::megatron_arguments(job, Layout{}, 1, "graphs"),
                                              "w.args", 1))
                .at("cuda_graphs"),
            "true");
}

TEST(JobFileMegatron, LayoutAndOtherMappings) {
  const auto f = io::parse_megatron_args(
      "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|(tt|)*2tL'\n"
      "--context-parallel-size 2 --cp-comm-type all_gather\n"
      "--recompute-granularity selective --recompute-modules core_attn moe_act\n"
      "--moe-token-dispatcher-type flex --moe-enable-deepep --moe-expert-capacity-factor 1.25\n"
      "--attention-backend unfused --bf16\n",
      "run.args", 8);
  const auto v = values_of(f);
  EXPECT_EQ(v.at("pipeline_layout"), "Et|(tt|)*2tL");
  EXPECT_EQ(v.at("schedule"), "interleaved");
  EXPECT_EQ(v.at("chunks"), "2");
  EXPECT_EQ(v.at("cp_method"), "allgather");
  EXPECT_EQ(v.at("recompute"), "selective");
  EXPECT_EQ(v.at("moe_recompute"), "moe_act");
  EXPECT_EQ(v.at("moe_dispatcher"), "deepep");
  EXPECT_EQ(v.at("moe_capacity_factor"), "1.25");
  EXPECT_EQ(v.at("flash_attention"), "false");
  EXPECT_EQ(v.at("data_parallel"), "2");
  EXPECT_EQ(v.at("fsdp"), "false");
  EXPECT_TRUE(has_entry(f.notes, "does not pad")) << all(f.notes);
  // PyTorch's FSDP2, kept unsharded from the forward to the backward.
  const auto fsdp =
      values_of(io::parse_megatron_args("--use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward "
                                        "--no-gradient-accumulation-fusion\n",
                                        "run.args", 8));
  EXPECT_EQ(fsdp.at("fsdp"), "true");
  EXPECT_EQ(fsdp.at("fsdp_impl"), "fsdp2");
  EXPECT_EQ(fsdp.at("reshard_after_forward"), "false");
  EXPECT_EQ(fsdp.at("grad_accumulation_fusion"), "false");
}

// --- read_job_file ---------------------------------------------------------------------------

TEST(JobFile, ReadsByNameOrContent) {
  EXPECT_EQ(io::read_job_file(kJobs + "llama3_405b.toml", 128).format, "torchtitan");
  EXPECT_EQ(io::read_job_file(kJobs + "megatron_mixtral_8x7b.args", std::nullopt).format,
            "megatron");
  EXPECT_THROW((void)io::read_job_file(kJobs + "no-such-file.toml", 8), Error);
}

// --- The writers' round trip -----------------------------------------------------------------

struct Case {
  Job job;
  Layout layout;
  std::int64_t gpus;
};

std::string text(double v) {
  return fmt::format("{}", v);
}
std::string text(bool v) {
  return v ? "true" : "false";
}
std::string text(std::int64_t v) {
  return fmt::format("{}", v);
}

// The settings a torchtitan file of this Job and Layout carries, by the rules of docs/jobs.md.
Values titan_values(const Case& c) {
  const Job& j = c.job;
  const Layout& l = c.layout;
  Values v{{"gpus", text(c.gpus)},
           {"seq_len", text(j.seq_len)},
           {"micro_batch", text(j.micro_batch)},
           {"global_batch", text(j.global_batch)},
           {"precision", std::string(to_string(j.precision))},
           {"recompute", std::string(to_string(j.recompute))},
           {"fused_elementwise", text(j.stack.fused_elementwise)},
           {"stack", j.stack.name},
           {"tensor_parallel", text(l.tp)},
           {"context_parallel", text(l.cp)},
           {"expert_parallel", text(l.ep)},
           {"data_parallel", text(l.dp)},
           {"fsdp", text(l.fsdp.enabled)},
           {"pipeline_parallel", text(l.pp)}};
  if (j.precision == Precision::FP8) v["fp8_recipe"] = to_string(j.fp8_recipe);
  if (l.tp > 1) {
    v["sequence_parallel"] = text(l.sequence_parallel == true);
    v["tp_overlap"] = to_string(j.tp_overlap);
  }
  if (l.cp > 1) v["cp_method"] = to_string(l.cp_method);
  if (l.ep > 1) {
    v["expert_tensor_parallel"] = text(l.etp);
    v["moe_dispatcher"] = to_string(j.moe.dispatcher);
  }
  if (l.fsdp.enabled) {
    v["fsdp_impl"] = "fsdp2";
    if (l.fsdp.shard > 0) v["fsdp_shard"] = text(l.fsdp.shard);
    if (l.fsdp.reshard_after_forward)
      v["reshard_after_forward"] = text(*l.fsdp.reshard_after_forward);
    if (j.precision == Precision::FP8) v["fsdp_fp8_all_gather"] = text(l.fsdp.fp8_all_gather);
  } else if (l.dp > 1) {
    v["dp_overlap"] = "true";
  }
  if (l.pp > 1) {
    const auto& info = find_schedule(l.schedule);
    v["schedule"] = info.name;
    if (info.default_chunks > 0) v["chunks"] = text(l.chunks > 0 ? l.chunks : info.default_chunks);
  }
  return v;
}

// The same for Megatron-LM's arguments (read back with the GPU count).
Values megatron_values(const Case& c) {
  const Job& j = c.job;
  const Layout& l = c.layout;
  Values v{{"data_parallel", text(l.dp)},
           {"tensor_parallel", text(l.tp)},
           {"context_parallel", text(l.cp)},
           {"expert_parallel", text(l.ep)},
           {"expert_tensor_parallel", text(l.etp)},
           {"pipeline_parallel", text(l.pp)},
           {"seq_len", text(j.seq_len)},
           {"micro_batch", text(j.micro_batch)},
           {"global_batch", text(j.global_batch)},
           {"precision", std::string(to_string(j.precision))},
           {"recompute", std::string(to_string(j.recompute))},
           {"moe_recompute", std::string(to_string(j.moe.recompute))},
           {"moe_dispatcher", std::string(to_string(j.moe.dispatcher))},
           {"moe_shared_expert_overlap", text(j.moe.shared_expert_overlap)},
           {"a2a_overlap", text(j.a2a_overlap)},
           {"fsdp", text(l.fsdp.enabled)},
           {"distributed_optimizer", text(j.distributed_optimizer)},
           {"dp_overlap", text(j.dp_overlap)},
           {"flash_attention", text(j.stack.flash_attention)},
           {"fused_elementwise", text(j.stack.fused_elementwise)},
           {"grad_accumulation_fusion", text(j.stack.grad_accumulation_fusion)},
           {"stack", j.stack.name}};
  if (j.precision == Precision::FP8) {
    v["fp8_recipe"] = to_string(j.fp8_recipe);
    v["fp8_params"] = text(j.fp8_params);
    v["fp8_attention"] = text(j.fp8_attention);
  }
  if (l.tp > 1) {
    v["sequence_parallel"] = text(l.sequence_parallel == true);
    v["tp_overlap"] = to_string(j.tp_overlap);
  }
  if (l.cp > 1) v["cp_method"] = to_string(l.cp_method);
  if (j.moe.capacity_factor) v["moe_capacity_factor"] = text(*j.moe.capacity_factor);
  if (j.moe.recompute_norm) v["moe_recompute_norm"] = "true";
  if (j.mla_recompute_up_proj) v["mla_recompute_up_proj"] = "true";
  if (j.dense_mlp_recompute) v["dense_mlp_recompute"] = "true";
  // Written as --moe-permute-fusion --enable-experimental, read back.
  if (j.moe.dispatcher == MoeDispatcher::DeepEp && j.stack.fused_multihot)
    v["fused_multihot"] = "true";
  if (j.dp_overlap) v["dp_bucket_bytes"] = text(j.dp_bucket_bytes);
  if (l.fsdp.enabled) {
    v["fsdp_impl"] = to_string(l.fsdp.impl);
    // Megatron-LM's FSDP2 reshards unless told not to (as pipetab's default without pipelining).
    if (l.fsdp.impl == FsdpImpl::Fsdp2)
      v["reshard_after_forward"] = text(l.fsdp.reshard_after_forward.value_or(true));
    if (j.precision == Precision::FP8) v["fsdp_fp8_all_gather"] = text(l.fsdp.fp8_all_gather);
  }
  if (l.pp > 1) {
    const auto& info = find_schedule(l.schedule);
    v["schedule"] = info.name;
    if (info.default_chunks > 0) v["chunks"] = text(l.chunks > 0 ? l.chunks : info.default_chunks);
  }
  if (!l.pipeline_layout.empty()) v["pipeline_layout"] = l.pipeline_layout;
  return v;
}

Job base_job() {
  Job j;
  j.seq_len = 4096;
  j.micro_batch = 1;
  j.global_batch = 64;
  return j;
}

Layout layout(std::int64_t tp, std::int64_t pp, std::int64_t cp, std::int64_t dp) {
  Layout l;
  l.tp = tp;
  l.pp = pp;
  l.cp = cp;
  l.dp = dp;
  l.sequence_parallel = tp > 1;
  l.schedule = "1f1b";
  return l;
}

std::vector<Case> titan_grid() {
  std::vector<Case> cases;
  // A torchtitan job runs torchtitan's stack: SDPA's flash backend, eager or compiled.
  const auto add = [&](Job j, Layout l) {
    j.stack.name = j.stack.fused_elementwise ? "torchtitan-compile" : "torchtitan";
    j.stack.flash_attention = true;
    j.stack.attention_kernel = AttentionKernel::Flash2;
    j.stack.fused_loss = false;
    j.stack.fp8_saved_inputs = false;  // torchao's Float8Linear
    cases.push_back({j, l, l.tp * l.pp * l.cp * l.dp});
  };
  Job eager = base_job();
  eager.tp_overlap = Overlap::Never;
  eager.stack.fused_elementwise = false;
  eager.recompute = Recompute::SelectiveOp;
  Job compiled = base_job();
  compiled.tp_overlap = Overlap::All;
  compiled.recompute = Recompute::Full;
  Job fp8 = compiled;
  fp8.precision = Precision::FP8;
  fp8.fp8_recipe = Fp8Recipe::Rowwise;
  fp8.recompute = Recompute::EveryOtherLayer;
  // FSDP over all ranks, with TP; with CP folded in.
  for (const auto& j : {eager, compiled, fp8}) {
    auto l = layout(8, 1, 1, 8);
    l.fsdp.enabled = true;
    l.fsdp.fp8_all_gather = j.precision == Precision::FP8;
    add(j, l);
    auto c = layout(1, 1, 4, 4);
    c.fsdp.enabled = true;
    c.cp_method = CpMethod::AllGather;
    add(j, c);
  }
  // HSDP: 4 replicas of 2 × CP 2 shards, resharding never.
  {
    auto l = layout(2, 1, 2, 8);
    l.fsdp.enabled = true;
    l.fsdp.shard = 4;
    l.fsdp.reshard_after_forward = false;
    l.cp_method = CpMethod::Ring;
    add(compiled, l);
  }
  // DDP alone, fp32.
  {
    Job j = eager;
    j.precision = Precision::FP32;
    j.dp_overlap = true;
    add(j, layout(1, 1, 1, 4));
  }
  // Pipelines: 1F1B, interleaved with its 2 stages a rank, ZB-V, with FSDP and TP.
  for (const char* schedule : {"1f1b", "interleaved", "zb-v", "gpipe", "interleaved-zb"}) {
    auto l = layout(2, 4, 1, 2);
    l.schedule = schedule;
    l.fsdp.enabled = true;
    l.fsdp.reshard_after_forward = true;
    Job j = compiled;
    j.micro_batch = 2;
    j.global_batch = 32;
    add(j, l);
  }
  // Experts: EP 4 with ETP 1 over FSDP 4 × TP 2, DeepEP; ETP = TP.
  {
    auto l = layout(2, 1, 1, 4);
    l.fsdp.enabled = true;
    l.ep = 4;
    Job j = compiled;
    j.moe.dispatcher = MoeDispatcher::DeepEp;
    add(j, l);
    l.etp = 2;
    add(compiled, l);
  }
  return cases;
}

std::vector<Case> megatron_grid() {
  std::vector<Case> cases;
  // Megatron-LM's arguments run Megatron-Core's stack (Transformer Engine's kernel choice).
  const auto add = [&](Job j, Layout l) {
    j.stack.name = "megatron-core";
    cases.push_back({j, l, l.tp * l.pp * l.cp * l.dp});
  };
  Job plain = base_job();
  plain.precision = Precision::BF16;
  plain.stack.flash_attention = true;
  Job tuned = plain;
  tuned.distributed_optimizer = true;
  tuned.dp_overlap = true;
  tuned.dp_bucket_bytes = 1.6e8;
  tuned.tp_overlap = Overlap::All;
  tuned.recompute = Recompute::Selective;
  Job fp8 = tuned;
  fp8.precision = Precision::FP8;
  fp8.fp8_recipe = Fp8Recipe::Blockwise;
  fp8.recompute = Recompute::Full;
  Job fp8_params = fp8;  // Megatron-Bridge's FP8 recipes: FP8 weights alone
  fp8_params.fp8_params = true;
  Job fp8_attention = fp8_params;  // and attention in FP8 (--fp8-dot-product-attention)
  fp8_attention.fp8_recipe = Fp8Recipe::Tensorwise;
  fp8_attention.fp8_attention = true;
  Job old = plain;
  old.precision = Precision::FP16;
  old.stack.flash_attention = false;
  old.stack.fused_elementwise = false;
  old.stack.grad_accumulation_fusion = false;
  Job fp32 = plain;
  fp32.precision = Precision::FP32;
  fp32.stack.flash_attention = false;
  Job dense_mlp = tuned;  // --recompute-modules core_attn mlp
  dense_mlp.dense_mlp_recompute = true;
  for (const auto& j : {plain, tuned, fp8, fp8_params, fp8_attention, old, fp32, dense_mlp}) {
    add(j, layout(8, 1, 1, 4));
    // 1F1B and interleaved with 2 and 4 chunks.
    auto p = layout(4, 4, 1, 2);
    add(j, p);
    p.schedule = "interleaved";
    add(j, p);
    p.chunks = 4;
    add(j, p);
  }
  // Context parallelism, each method.
  for (const auto method : {CpMethod::Ring, CpMethod::AllGather, CpMethod::AllToAll}) {
    auto l = layout(2, 1, 4, 2);
    l.cp_method = method;
    add(tuned, l);
  }
  // Experts: EP 8, ETP 1 and 2; DeepEP with dropped tokens, MoE recomputation, overlaps.
  {
    Job j = tuned;
    j.moe.dispatcher = MoeDispatcher::DeepEp;
    j.moe.capacity_factor = 1.25;
    j.moe.recompute = MoeRecompute::MoeAct;
    j.moe.recompute_norm = true;  // --recompute-modules moe_act layernorm mla_up_proj
    j.mla_recompute_up_proj = true;
    j.moe.shared_expert_overlap = true;
    j.a2a_overlap = true;
    auto l = layout(2, 2, 1, 8);
    l.ep = 8;
    add(j, l);
    j.moe.recompute = MoeRecompute::Mlp;
    j.recompute = Recompute::None;
    l.etp = 2;
    add(j, l);
    j.moe.dispatcher = MoeDispatcher::HybridEp;  // --moe-flex-dispatcher-backend hybridep
    add(j, l);
  }
  // A pipeline layout (interleaved, 2 stages a device).
  {
    auto l = layout(1, 2, 1, 4);
    l.schedule = "interleaved";
    l.chunks = 2;
    l.pipeline_layout = "Et|(tt|)*2tL";
    add(plain, l);
  }
  // FSDP2 (without gradient accumulation fusion, as Megatron-LM requires) and Megatron-FSDP.
  {
    Job j = plain;
    j.stack.grad_accumulation_fusion = false;
    auto l = layout(2, 1, 1, 8);
    l.fsdp.enabled = true;
    add(j, l);
    l.fsdp.reshard_after_forward = false;
    add(j, l);
    Job f = fp8;
    f.stack.grad_accumulation_fusion = false;
    f.distributed_optimizer = false;
    l.fsdp.reshard_after_forward.reset();
    l.fsdp.fp8_all_gather = true;
    f.fp8_params = true;  // --fp8-param-gather does both
    add(f, l);
    Job m = tuned;
    auto ml = layout(2, 1, 1, 8);
    ml.fsdp.enabled = true;
    ml.fsdp.impl = FsdpImpl::Megatron;
    ml.ep = 4;
    add(m, ml);
  }
  return cases;
}

std::string describe(const Case& c, const std::string& written) {
  return fmt::format("tp {} pp {} cp {} dp {} ep {} etp {} schedule {} chunks {} fsdp {}\n{}",
                     c.layout.tp, c.layout.pp, c.layout.cp, c.layout.dp, c.layout.ep, c.layout.etp,
                     c.layout.schedule, c.layout.chunks, c.layout.fsdp.enabled, written);
}

TEST(JobFileRoundTrip, TorchtitanCarriesTheJobAndLayout) {
  for (const auto& c : titan_grid()) {
    std::string written;
    try {
      written = io::torchtitan_job_toml(c.job, c.layout, c.gpus, "a test\n\nof the writer");
    } catch (const Error& e) {
      ADD_FAILURE() << e.what() << "\n" << describe(c, "");
      continue;
    }
    EXPECT_EQ(written.rfind("# a test\n#\n# of the writer\n", 0), 0u) << written;
    const auto f = io::parse_torchtitan_job(written, "written.toml", c.gpus);
    EXPECT_EQ(values_of(f), titan_values(c)) << describe(c, written);
    // Nothing written is ignored, and gpus are not needed: the degrees are explicit.
    EXPECT_TRUE(f.ignored.empty()) << all(f.ignored) << describe(c, written);
    EXPECT_EQ(values_of(io::parse_torchtitan_job(written, "written.toml", std::nullopt)),
              titan_values(c));
  }
}

TEST(JobFileRoundTrip, MegatronCarriesTheJobAndLayout) {
  for (const auto& c : megatron_grid()) {
    std::string written;
    try {
      written = io::megatron_arguments(c.job, c.layout, c.gpus, "a test");
    } catch (const Error& e) {
      ADD_FAILURE() << e.what() << "\n" << describe(c, "");
      continue;
    }
    EXPECT_EQ(written.rfind("# a test\n", 0), 0u) << written;
    const auto f = io::parse_megatron_args(written, "written.args", c.gpus);
    EXPECT_EQ(values_of(f), megatron_values(c)) << describe(c, written);
    EXPECT_TRUE(f.ignored.empty()) << all(f.ignored) << describe(c, written);
  }
}

// The round trip through a whole simulation: a dense run's Job and Layout written as the tool's
// file, read back and applied over the model's defaults (as `--job` does), simulate exactly as
// the Job and Layout themselves: the same iteration time and the same memory.
SimulationSetup written_back(const ModelConfig& model, const SystemConfig& system,
                             const io::JobFile& file) {
  SimulationSetup back = default_setup(model, system);
  std::vector<Setting> settings;
  for (const auto& s : file.settings) {
    if (s.key != "gpus") settings.push_back(s);
  }
  apply_settings(back, settings);  // as the commands do: a stack first, its options over it
  return back;
}

void expect_simulates_as_written(const Case& c, const std::string& written,
                                 const io::JobFile& file) {
  // A small dense model the grid's layouts split: 16 layers of hidden 1024, 16 heads, 8 KV heads.
  TransformerConfig m;
  m.layers = 16;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 8;
  m.ffn_hidden = 4096;
  m.vocab = 32000;
  m.gated_mlp = true;
  m.learned_positions = false;
  m.dropout = false;
  const ModelConfig model{"small", m};
  const auto system = io::load_system("dgx-h100");
  SimulationSetup origin = default_setup(model, system);
  origin.job = c.job;
  origin.layout = c.layout;
  const SimulationSetup back = written_back(model, system, file);
  const std::int64_t per_step = c.job.micro_batch * c.layout.dp;
  if (c.job.global_batch % per_step != 0) return;
  ScheduleParams p;
  p.devices = c.layout.pp;
  p.microbatches = c.job.global_batch / per_step;
  const std::string schedule = c.layout.pp > 1 ? c.layout.schedule : "1f1b";
  const auto& info = find_schedule(schedule);
  if (info.default_chunks > 0 && c.layout.chunks > 0) p.chunks = c.layout.chunks;
  const auto table = info.generate(resolve(info, p));
  try {
    require_runnable(model, origin.job, origin.layout);
  } catch (const ParamError&) {
    return;  // a layout the small model cannot take: the value round trip above covers it
  }
  const auto a = simulate_table(table, origin, info.name);
  const auto b = simulate_table(table, back, info.name);
  EXPECT_EQ(a.metrics.runtime_s, b.metrics.runtime_s) << describe(c, written);
  EXPECT_EQ(a.metrics.peak_memory_bytes, b.metrics.peak_memory_bytes) << describe(c, written);
}

TEST(JobFileRoundTrip, WrittenJobsSimulateAsTheirJobAndLayout) {
  for (const auto& c : titan_grid()) {
    if (c.layout.ep > 1) continue;  // dense: the experts' options have their own test above
    const auto written = io::torchtitan_job_toml(c.job, c.layout, c.gpus, "");
    expect_simulates_as_written(c, written,
                                io::parse_torchtitan_job(written, "written.toml", c.gpus));
  }
  for (const auto& c : megatron_grid()) {
    if (c.layout.ep > 1) continue;
    const auto written = io::megatron_arguments(c.job, c.layout, c.gpus, "");
    expect_simulates_as_written(c, written,
                                io::parse_megatron_args(written, "written.args", c.gpus));
  }
}

TEST(JobFileRoundTrip, WritersRefuseWhatTheToolCannotRun) {
  const auto titan = [](const Job& j, const Layout& l) {
    try {
      (void)io::torchtitan_job_toml(j, l, l.tp * l.pp * l.cp * l.dp, "");
    } catch (const ParamError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const auto megatron = [](const Job& j, const Layout& l) {
    try {
      (void)io::megatron_arguments(j, l, l.tp * l.pp * l.cp * l.dp, "");
    } catch (const ParamError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  Job j = base_job();
  j.tp_overlap = Overlap::Never;
  j.stack.flash_attention = true;    // torchtitan's SDPA (its writer refuses the math path)
  j.stack.fused_loss = false;        // and its eager loss
  j.stack.fp8_saved_inputs = false;  // and torchao's Float8Linear
  auto ulysses = layout(1, 1, 4, 2);
  ulysses.fsdp.enabled = true;
  ulysses.cp_method = CpMethod::AllToAll;
  EXPECT_NE(titan(j, ulysses).find("cp_method a2a (Ulysses)"), std::string::npos);
  auto zb = layout(1, 4, 1, 2);
  zb.schedule = "zb-h1";
  EXPECT_NE(megatron(j, zb).find("schedule zb-h1: Megatron-LM runs 1F1B and interleaved 1F1B"),
            std::string::npos);
  zb.fsdp.enabled = true;
  EXPECT_NE(titan(j, zb).find("schedule zb-h1"), std::string::npos) << titan(j, zb);
  Job selective = j;
  selective.recompute = Recompute::Selective;
  EXPECT_NE(titan(selective, layout(1, 1, 1, 1)).find("recompute selective"), std::string::npos);
  Job full_norm = j;  // --recompute-modules goes with selective granularity, not full
  full_norm.recompute = Recompute::Full;
  full_norm.moe.recompute_norm = true;
  EXPECT_NE(megatron(full_norm, layout(1, 1, 1, 1)).find("moe_recompute_norm with full"),
            std::string::npos);
  Job full_mlp = j;
  full_mlp.recompute = Recompute::Full;
  full_mlp.dense_mlp_recompute = true;
  EXPECT_NE(megatron(full_mlp, layout(1, 1, 1, 1)).find("recomputes the MLPs already"),
            std::string::npos);
  Job full_mla = j;
  full_mla.recompute = Recompute::Full;
  full_mla.mla_recompute_up_proj = true;
  EXPECT_NE(megatron(full_mla, layout(1, 1, 1, 1)).find("recomputes the up-projections already"),
            std::string::npos);
  EXPECT_NE(titan(full_mla, layout(1, 1, 1, 1)).find("mla_recompute_up_proj"), std::string::npos);
  Job te_weights = j;  // FP8 weights alone are Transformer Engine's
  te_weights.precision = Precision::FP8;
  te_weights.fp8_params = true;
  EXPECT_NE(titan(te_weights, layout(1, 1, 1, 1)).find("fp8_params"), std::string::npos);
  Job op = j;
  op.recompute = Recompute::SelectiveOp;
  EXPECT_NE(megatron(op, layout(1, 1, 1, 1)).find("recompute selective-op"), std::string::npos);
  Job fp16 = j;
  fp16.precision = Precision::FP16;
  EXPECT_NE(titan(fp16, layout(1, 1, 1, 1)).find("precision fp16"), std::string::npos);
  Job hybrid = j;  // HybridEP is Megatron-Core's backend; torchtitan has standard and deepep
  hybrid.moe.dispatcher = MoeDispatcher::HybridEp;
  auto experts = layout(1, 1, 1, 4);
  experts.fsdp.enabled = true;
  experts.ep = 4;
  EXPECT_NE(titan(hybrid, experts).find("moe_dispatcher hybridep"), std::string::npos)
      << titan(hybrid, experts);
  // The GPU count the degrees multiply to, and a batch the file states.
  EXPECT_THROW((void)io::megatron_arguments(j, layout(2, 1, 1, 2), 8, ""), ParamError);
  Job open = j;
  open.global_batch = 0;
  EXPECT_NE(megatron(open, layout(1, 1, 1, 1)).find("set global_batch"), std::string::npos);
  // Interleaved with 4 chunks needs torchtitan's layers per stage, which needs the model.
  auto four = layout(1, 4, 1, 2);
  four.fsdp.enabled = true;
  four.schedule = "interleaved";
  four.chunks = 4;
  EXPECT_NE(titan(j, four).find("chunks 4"), std::string::npos);
  // The stack each writer's framework runs, and nothing its file cannot say.
  Job math = j;
  math.stack.flash_attention = false;
  EXPECT_NE(titan(math, layout(1, 1, 1, 1)).find("flash_attention false"), std::string::npos);
  Job cudnn = j;
  cudnn.stack.attention_kernel = AttentionKernel::Cudnn;
  EXPECT_NE(titan(cudnn, layout(1, 1, 1, 1)).find("attention_kernel cudnn"), std::string::npos);
  Job te_fp8 = j;  // Transformer Engine's FP8, its inputs saved in FP8: not torchao's
  te_fp8.precision = Precision::FP8;
  te_fp8.stack.fp8_saved_inputs = true;
  EXPECT_NE(titan(te_fp8, layout(1, 1, 1, 1)).find("fp8_saved_inputs"), std::string::npos);
  const auto args = [](const Job& job) {
    return io::megatron_arguments(job, layout(1, 1, 1, 1), 1, "");
  };
  EXPECT_NE(args(cudnn).find("--attention-backend fused"), std::string::npos);
  Job cast = j;
  cast.stack.autocast = true;
  EXPECT_NE(titan(cast, layout(1, 1, 1, 1)).find("autocast"), std::string::npos);
  EXPECT_NE(megatron(cast, layout(1, 1, 1, 1)).find("autocast"), std::string::npos);
  Job triton = j;
  triton.stack.attention_kernel = AttentionKernel::Triton;
  EXPECT_NE(megatron(triton, layout(1, 1, 1, 1)).find("attention_kernel triton"),
            std::string::npos);
  Job flash2 = j;
  flash2.stack.attention_kernel = AttentionKernel::Flash2;
  EXPECT_NE(args(flash2).find("--attention-backend flash"), std::string::npos);
  EXPECT_NE(args(j).find("--attention-backend auto"), std::string::npos);
}

}  // namespace
}  // namespace pipetab
