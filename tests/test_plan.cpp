// pipetab plan: the layout search, its memory checks, its pruning and its determinism.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "helpers.hpp"
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/bounds.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/study/plan.hpp"

namespace pipetab {
namespace {

PlanRequest request(const std::string& model, std::int64_t gpus, std::int64_t batch) {
  PlanRequest q;
  const test::ModelRun run = io::load_model(model);  // the model file's job and layout
  q.model = run.model;
  q.job = run.job;
  q.layout = run.layout;
  q.system = io::load_system("dgx-h100");
  q.gpus = gpus;
  q.global_batch = batch;
  q.lowering.runtime = Runtime::PyTorch;
  q.threads = 2;
  return q;
}

// A small model whose memory is computed by hand below: 4 GPT layers of hidden 64, 4 heads,
// sequence 16, vocabulary 128, untied output layer, no position table.
PlanRequest tiny(std::int64_t gpus, std::int64_t batch, double memory_bytes) {
  PlanRequest q;
  TransformerConfig m;
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.vocab = 128;
  m.learned_positions = false;
  m.tie_embeddings = false;
  q.model = {"tiny", m};
  q.job.seq_len = 16;
  q.system = io::load_system("dgx-h100");
  q.system.device.memory_bytes = memory_bytes;
  q.gpus = gpus;
  q.global_batch = batch;
  q.lowering.runtime = Runtime::PyTorch;
  q.space.schedules = {"1f1b"};
  q.space.micro_batch = {1};
  q.space.sequence_parallel = {false};
  q.space.fsdp = {false};              // the hand counts below are of replicated data parallelism
  q.system.device.memory_reserve = 0;  // the capacities below are the usable memory
  q.threads = 1;
  return q;
}

std::int64_t rejected(const PlanResult& r, const std::string& prefix) {
  std::int64_t n = 0;
  for (const auto& x : r.rejections) {
    if (x.reason.starts_with(prefix)) n += x.count;
  }
  return n;
}

// Parameters per device, by hand: a GPT layer holds 12h² + 4h (QKV 3h², projection h², MLP 8h²,
// two LayerNorms 4h; the workload model counts no linear biases, 9h per layer: Megatron's GPT has
// them, Llama not); the first stage adds the word embedding V·h, the last the untied output
// layer V·h and the final LayerNorm 2h. Bytes per parameter: 2 (bf16 weights) + 4
// (fp32 gradients) + 12 (fp32 master weights and Adam moments; / DP with the distributed
// optimizer).
constexpr double kLayer = 12.0 * 64 * 64 + 4 * 64;  // 49,408
constexpr double kEmbedding = 128.0 * 64;           // 8,192

TEST(Plan, WeightsAloneOverTheDeviceAreRejectedExactly) {
  // 2 GPUs, capacity 3 MB. TP 1 · PP 1 · DP 2 holds everything: (4·49,408 + 2·8,192 + 128)
  // params × 18 B = 3,854,592 B — over; with the distributed optimizer × (2 + 4 + 6) B =
  // 2,569,728 B — under. PP 2 and TP 2 halve it.
  auto q = tiny(2, 4, 3.0e6);
  q.space.recompute = {Recompute::Full};
  const auto r = plan(q);
  EXPECT_EQ(r.layouts, 4);  // (1,1,2) ×2 optimizers, (1,2,1), (2,1,1)
  EXPECT_EQ(rejected(r, "memory: weights"), 1);
  EXPECT_EQ(rejected(r, "memory: over"), 0);
  ASSERT_EQ(r.top.size(), 3U);
  const double all = 4 * kLayer + 2 * kEmbedding + 128;
  for (const auto& e : r.top) {
    const auto& l = e.layout;
    const auto& m = e.metrics;
    if (l.pipeline_parallel == 1 && l.tensor_parallel == 1) {
      EXPECT_TRUE(l.distributed_optimizer);
      EXPECT_DOUBLE_EQ(m.static_bytes[0], all * 12);
    } else if (l.pipeline_parallel == 2) {
      EXPECT_DOUBLE_EQ(m.static_bytes[0], (2 * kLayer + kEmbedding) * 18);
      EXPECT_DOUBLE_EQ(m.static_bytes[1], (2 * kLayer + kEmbedding + 128) * 18);
    } else {
      // TP 2: the matrices and the vocabulary split, the LayerNorms replicated.
      const double layer = 12.0 * 64 * 64 / 2 + 4 * 64;
      EXPECT_DOUBLE_EQ(m.static_bytes[0], (4 * layer + kEmbedding + 128) * 18);
    }
  }
}

TEST(Plan, ActivationsOverTheDeviceAreRejectedExactly) {
  // 1 GPU, capacity 4 MB, 1F1B on one stage: one microbatch in flight. Activations per layer
  // (Korthikanti et al. 2022, with dropout): 34·sbh + 5·a·s²·b = 34,816 + 5,120 without
  // recomputation, 34·sbh with selective, 2·sbh with full; plus the first stage's token ids
  // (8·s·b) and embedding-dropout mask (s·b·h), and the last stage's 4·s·b·(h + V).
  // Static: 3,854,592 B (above).
  auto q = tiny(1, 4, 4.0e6);
  const auto r = plan(q);
  EXPECT_EQ(r.layouts, 3);
  EXPECT_EQ(rejected(r, "memory: over the device with"), 2);  // none, selective
  ASSERT_EQ(r.top.size(), 1U);
  EXPECT_EQ(r.top[0].layout.recompute, Recompute::Full);
  const double sbh = 16.0 * 64;
  const double static_bytes = (4 * kLayer + 2 * kEmbedding + 128) * 18;
  const double edges = 8 * 16 + sbh + 4 * 16 * (64 + 128);
  EXPECT_DOUBLE_EQ(r.top[0].peak_memory_bytes, static_bytes + 4 * 2 * sbh + edges);
  EXPECT_DOUBLE_EQ(r.top[0].metrics.peak_memory_max(), r.top[0].peak_memory_bytes);
  // The two rejected ones, by the same arithmetic, are over 4 MB: 4,027,776 and 4,007,296 B.
  EXPECT_GT(static_bytes + 4 * (34 * sbh + 5 * 4 * 16 * 16) + edges, 4.0e6);
  EXPECT_GT(static_bytes + 4 * 34 * sbh + edges, 4.0e6);
}

// `q` planned with pruning ranks the same layouts at the same runtimes as without, and prunes.
void expect_pruning_keeps_the_top(PlanRequest q) {
  const auto pruned = plan(q);
  q.prune = false;
  const auto all = plan(q);
  EXPECT_EQ(all.pruned, 0);
  EXPECT_GT(pruned.pruned, 0);
  EXPECT_LT(pruned.simulated, all.simulated);
  ASSERT_EQ(pruned.top.size(), all.top.size());
  for (std::size_t i = 0; i < all.top.size(); ++i) {
    EXPECT_EQ(pruned.top[i].index, all.top[i].index) << i;
    EXPECT_EQ(pruned.top[i].metrics.runtime_s, all.top[i].metrics.runtime_s) << i;
  }
}

// Llama 3.1 8B's shape cut to 8 layers of `hidden` (heads of 128, as many KV heads, MLP 4h).
test::ModelRun small_llama(std::int64_t hidden) {
  test::ModelRun model = io::load_model("llama3.1-8b");
  auto& m = std::get<TransformerConfig>(model.model.spec);
  m.layers = 8;
  m.hidden = hidden;
  m.heads = hidden / 128;
  m.kv_heads = m.heads;
  m.ffn_hidden = 4 * hidden;
  return model;
}

// Every registered schedule's table at S = 4, M = 8 whose stages split 8 layers evenly (the
// schedules whose rules refuse S = 4, M = 8 left out).
std::vector<std::pair<std::string, std::optional<ScheduleTable>>> tables_of_eight_layers() {
  std::vector<std::pair<std::string, std::optional<ScheduleTable>>> out;
  for (const auto* info : all_schedules()) {
    ScheduleParams p;
    p.devices = 4;
    p.microbatches = 8;
    try {
      auto table = generate(*info, p);
      if (8 % table.stages == 0) out.emplace_back(std::string(info->name), std::move(table));
    } catch (const ParamError&) {
    }
  }
  return out;
}

// The pruning never discards a layout of the top: the pruned search ranks the same layouts at
// the same runtimes as the exhaustive one, on small instances across models, GPU counts,
// batches and runtimes.
TEST(Plan, PruningKeepsTheExhaustiveRanking) {
  struct Case {
    const char* model;
    std::int64_t gpus, batch;
    Runtime runtime;
  };
  for (const auto& c :
       {Case{"gpt3-1.3b", 8, 16, Runtime::PyTorch}, Case{"gpt3-1.3b", 16, 32, Runtime::Async},
        Case{"paper", 8, 32, Runtime::PyTorch}, Case{"gpt3-13b", 16, 16, Runtime::Megatron}}) {
    auto q = request(c.model, c.gpus, c.batch);
    q.lowering.runtime = c.runtime;
    q.space.micro_batch = {1, 2};
    q.top = 5;
    SCOPED_TRACE(c.model);
    expect_pruning_keeps_the_top(q);
  }
}

// The best-first search over the layouts with FSDP and CP in the space and the authors'
// schedulers (planned per layout, their memory checked only once lowered) finds the exhaustive
// search's top.
TEST(Plan, BestFirstKeepsTheExhaustiveRankingWithFsdpCpAndTheAuthors) {
  auto q = request("llama3.1-8b", 16, 16);
  q.lowering.runtime = Runtime::Auto;
  q.space.schedules = {"1f1b", "interleaved", "zb-v", "zb-authors", "zb-authors-v"};
  q.space.context_parallel = {1, 2};
  q.space.fsdp = {false, true};
  q.space.micro_batch = {1};
  q.top = 6;
  expect_pruning_keeps_the_top(q);
}

// lower_compute, which phase 1 orders the search by, is the whole graph's compute part: the
// same memory peaks, and a busiest-device time no simulation beats, for every registered
// schedule under DP, the distributed optimizer, FSDP and CP.
TEST(Plan, ComputePartBoundsTheWholeGraph) {
  test::ModelRun model = io::load_model("llama3.1-8b");
  std::get<TransformerConfig>(model.model.spec).layers = 8;
  model.job.seq_len = 4096;
  const SystemConfig system = io::load_system("dgx-h100");
  int checked = 0;
  for (const auto& [name, table] : tables_of_eight_layers()) {
    for (const int variant : {0, 1, 2, 3}) {
      test::ModelRun mv = model;
      mv.layout.cp = variant == 3 ? 2 : 1;
      mv.layout.dp = 2;
      mv.job.distributed_optimizer = variant == 1;
      mv.layout.fsdp.enabled = variant >= 2 && table->pipelines() == 1;
      const LoweringOptions o;
      const Network network(system, table->devices, gpus_per_device(mv.layout));
      SCOPED_TRACE(name + " variant " + std::to_string(variant));
      const ExecGraph whole = lower(*table, mv.model, mv.job, mv.layout, network, o);
      const ExecGraph part = lower_compute(*table, mv.model, mv.job, mv.layout, network, o);
      const GraphBounds g = graph_bounds(whole, network);
      const DeviceBounds d = device_bounds(part);
      ASSERT_EQ(d.peak_memory_bytes.size(), g.peak_memory_bytes.size());
      for (std::size_t i = 0; i < d.peak_memory_bytes.size(); ++i)
        EXPECT_EQ(d.peak_memory_bytes[i], g.peak_memory_bytes[i]);
      EXPECT_EQ(part.static_bytes, whole.static_bytes);
      EXPECT_GT(d.runtime_lower_bound_s(), 0.0);
      EXPECT_LE(d.runtime_lower_bound_s(), g.runtime_lower_bound_s * (1 + 1e-12));
      EXPECT_LE(device_bounds(whole).runtime_lower_bound_s(),
                g.runtime_lower_bound_s * (1 + 1e-12));
      // With the pipeline's fill and drain: still below the whole graph's bound.
      EXPECT_LE(device_bounds(part, *table).runtime_lower_bound_s(),
                g.runtime_lower_bound_s * (1 + 1e-12));
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

// compute_bounds, what phase 1 checks every layout by, is device_bounds of lower_compute's graph
// with the table, to the bit: straight from the stages' costs where it can (with and without the
// host's overheads, recomputation, FSDP, two pipelines), through the graph where an op runs steps
// (CP), offloads, or merges (--a2a-overlap needs interleaving: refused alike elsewhere).
TEST(Plan, ComputeBoundsAreTheComputeGraphsBounds) {
  test::ModelRun model = io::load_model("llama3.1-8b");
  std::get<TransformerConfig>(model.model.spec).layers = 8;
  model.job.seq_len = 4096;
  const SystemConfig system = io::load_system("dgx-h100");  // with a host, for offload
  int compared = 0, refused = 0;
  for (const auto& [name, table] : tables_of_eight_layers()) {
    for (const int variant : {0, 1, 2, 3, 4, 5, 6}) {
      test::ModelRun mv = model;
      mv.layout.dp = 2;
      mv.layout.cp = variant == 2 ? 2 : 1;
      mv.layout.fsdp.enabled = variant == 6 && table->pipelines() == 1;
      mv.job.recompute = variant == 1 ? Recompute::Full : Recompute::None;
      if (variant == 3) mv.job.offload_activations = 0.5;
      mv.job.a2a_overlap = variant == 4;
      LoweringOptions o;
      o.overheads = variant != 5;
      const Network network(system, table->devices, gpus_per_device(mv.layout));
      SCOPED_TRACE(name + " variant " + std::to_string(variant));
      std::optional<DeviceBounds> graph;
      std::string graph_error, direct_error;
      try {
        graph =
            device_bounds(lower_compute(*table, mv.model, mv.job, mv.layout, network, o), *table);
      } catch (const ParamError& e) {
        graph_error = e.what();
      }
      try {
        const DeviceBounds b = compute_bounds(*table, mv.model, mv.job, mv.layout, network, o);
        ASSERT_TRUE(graph.has_value()) << graph_error;
        EXPECT_EQ(b.busy_s, graph->busy_s);
        EXPECT_EQ(b.peak_memory_bytes, graph->peak_memory_bytes);
        EXPECT_EQ(b.compute_path_s, graph->compute_path_s);
        EXPECT_GT(b.runtime_lower_bound_s(), 0.0);
        ++compared;
      } catch (const ParamError& e) {
        EXPECT_EQ(e.what(), graph_error);
        ++refused;
      }
    }
  }
  EXPECT_GT(compared, 60);
  EXPECT_GT(refused, 0);
}

// A PyTorch order derived once per table (pytorch_runtime_order, what plan shares between the
// layouts of one table) lowers every table as deriving it each time does: the same graph, or the
// same error, with messages within NCCL's buffer and above it.
TEST(Plan, AnOrderDerivedOnceLowersAsDerivingItEachTime) {
  const SystemConfig system = io::load_system("dgx-h100");
  int compared = 0;
  for (const auto hidden : {256, 8192}) {
    const test::ModelRun model = small_llama(hidden);
    for (const auto& [name, table] : tables_of_eight_layers()) {
      if (table->pipelines() > 1) continue;
      LoweringOptions o;
      o.runtime = Runtime::PyTorch;
      const Network network(system, table->devices, gpus_per_device(model.layout));
      SCOPED_TRACE(name + " hidden " + std::to_string(hidden));
      const PyTorchOrder order = pytorch_runtime_order(*table);
      std::string error_each, error_once;
      std::optional<ExecGraph> each, once;
      try {
        each = lower(*table, model.model, model.job, model.layout, network, o);
      } catch (const ParamError& e) {
        error_each = e.what();
      }
      try {
        once = lower(*table, model.model, model.job, model.layout, network, o, order);
      } catch (const ParamError& e) {
        error_once = e.what();
      }
      EXPECT_EQ(error_each, error_once);
      ASSERT_EQ(each.has_value(), once.has_value());
      if (!each) continue;
      EXPECT_EQ(each->nodes(), once->nodes());
      EXPECT_EQ(each->duration, once->duration);
      EXPECT_EQ(each->succ, once->succ);
      EXPECT_EQ(each->start_succ, once->start_succ);
      ++compared;
    }
  }
  EXPECT_GT(compared, 20);
  // Which verdict applies follows the messages: a stand-in verdict for rendezvous sends is
  // reported with large messages only, one for eager sends with small ones only.
  ScheduleParams p;
  p.devices = 4;
  p.microbatches = 8;
  const ScheduleTable table = generate(find_schedule("1f1b"), p);
  for (const auto hidden : {256, 8192}) {
    const test::ModelRun model = small_llama(hidden);
    LoweringOptions o;
    o.runtime = Runtime::PyTorch;
    const Network network(system, table.devices, gpus_per_device(model.layout));
    for (const bool rendezvous : {false, true}) {
      PyTorchOrder order = pytorch_runtime_order(table);
      (rendezvous ? order.all_rendezvous : order.all_eager) = CommIssue{0, 0, "stand-in"};
      const std::string error = test::param_error(
          [&] { lower(table, model.model, model.job, model.layout, network, o, order); });
      EXPECT_EQ(error.starts_with("stand-in"), rendezvous == (hidden == 8192)) << hidden << error;
    }
  }
}

// Every simulated layout: the bound is below its runtime, and the memory checked before the
// simulation is the memory the simulation reports.
TEST(Plan, BoundsHoldForEverySimulatedLayout) {
  for (const auto runtime : {Runtime::Async, Runtime::PyTorch, Runtime::Megatron}) {
    auto q = request("gpt3-1.3b", 16, 32);
    q.lowering.runtime = runtime;
    q.prune = false;
    q.top = 100000;
    const auto r = plan(q);
    ASSERT_GT(r.top.size(), 100U);
    for (const auto& e : r.top) {
      EXPECT_LE(e.lower_bound_s, e.metrics.runtime_s * (1 + 1e-12)) << describe(e.layout);
      EXPECT_GT(e.lower_bound_s, 0.5 * e.metrics.runtime_s) << describe(e.layout);
      EXPECT_DOUBLE_EQ(e.peak_memory_bytes, e.metrics.peak_memory_max()) << describe(e.layout);
      EXPECT_LE(e.peak_memory_bytes, 0.95 * q.system.device.memory_bytes);
    }
  }
}

TEST(Plan, SameResultWhateverTheThreads) {
  auto q = request("gpt3-1.3b", 16, 64);
  q.top = 8;
  q.threads = 1;
  const auto one = plan(q);
  for (const unsigned threads : {2U, 3U, 8U}) {
    q.threads = threads;
    const auto r = plan(q);
    EXPECT_EQ(r.layouts, one.layouts);
    EXPECT_EQ(r.rejected, one.rejected);
    EXPECT_EQ(r.pruned, one.pruned);
    EXPECT_EQ(r.simulated, one.simulated);
    ASSERT_EQ(r.top.size(), one.top.size());
    for (std::size_t i = 0; i < r.top.size(); ++i) {
      EXPECT_EQ(r.top[i].index, one.top[i].index);
      EXPECT_EQ(r.top[i].metrics.runtime_s, one.top[i].metrics.runtime_s);
    }
    ASSERT_EQ(r.rejections.size(), one.rejections.size());
    for (std::size_t i = 0; i < r.rejections.size(); ++i) {
      EXPECT_EQ(r.rejections[i].reason, one.rejections[i].reason);
      EXPECT_EQ(r.rejections[i].count, one.rejections[i].count);
      EXPECT_EQ(r.rejections[i].example, one.rejections[i].example);
    }
  }
}

TEST(Plan, ShardsTogetherHoldTheWholePlansTop) {
  auto q = request("gpt3-1.3b", 16, 32);
  q.top = 5;
  const auto whole = plan(q);
  std::vector<PlanEntry> merged;
  std::int64_t layouts = 0;
  q.shards = 3;
  for (std::int64_t k = 1; k <= 3; ++k) {
    q.shard = k;
    const auto part = plan(q);
    layouts += part.layouts;
    merged.insert(merged.end(), part.top.begin(), part.top.end());
  }
  EXPECT_EQ(layouts, whole.layouts);
  std::sort(merged.begin(), merged.end(), [](const PlanEntry& a, const PlanEntry& b) {
    return a.metrics.runtime_s != b.metrics.runtime_s ? a.metrics.runtime_s < b.metrics.runtime_s
                                                      : a.index < b.index;
  });
  ASSERT_GE(merged.size(), whole.top.size());
  for (std::size_t i = 0; i < whole.top.size(); ++i)
    EXPECT_EQ(merged[i].index, whole.top[i].index);
}

TEST(Plan, EveryLayoutMultipliesToTheGpusAndTheBatch) {
  auto q = request("gpt3-1.3b", 32, 64);
  q.prune = false;
  q.top = 100000;
  const auto r = plan(q);
  for (const auto& e : r.top) {
    const auto& l = e.layout;
    EXPECT_EQ(l.tensor_parallel * l.pipeline_parallel * l.data_parallel, 32);
    EXPECT_EQ(l.micro_batch * l.microbatches * l.data_parallel, 64);
    EXPECT_LE(l.tensor_parallel, 8);  // inside a DGX H100 node
    EXPECT_TRUE(l.tensor_parallel > 1 || !l.sequence_parallel);
    EXPECT_TRUE(l.data_parallel > 1 || !l.distributed_optimizer);
    EXPECT_EQ(e.metrics.gpus, 32);
    // Tokens per iteration: the whole global batch.
    EXPECT_NEAR(*e.metrics.tokens_per_s * e.metrics.runtime_s, 64.0 * 2048, 1e-6 * 64 * 2048);
  }
}

// On an NVL72 rack NVLink spans 18 trays: tensor parallelism is searched past a tray's 4 GPUs and
// a DGX's 8, over the divisors of the GPUs the job takes of a rack (all 32 here), as far as the
// model's heads allow (GPT-3 1.3B's 16: TP 16, not 32), and every layout multiplies to the GPUs.
TEST(Plan, TensorParallelismSpansAnNvl72Rack) {
  auto q = request("gpt3-1.3b", 32, 64);
  q.system = io::load_system("gb200-nvl72");
  q.prune = false;
  q.top = 100000;
  q.space.schedules = {"1f1b"};
  q.space.micro_batch = {1};
  q.space.recompute = {Recompute::Full};
  const auto r = plan(q);
  std::set<std::int64_t> tps;
  for (const auto& e : r.top) {
    const auto& l = e.layout;
    EXPECT_EQ(l.tensor_parallel * l.pipeline_parallel * l.data_parallel, 32);
    EXPECT_EQ(32 % l.tensor_parallel, 0);
    tps.insert(l.tensor_parallel);
  }
  EXPECT_TRUE(tps.contains(16));
  EXPECT_FALSE(tps.contains(32));
}

TEST(Plan, AReferenceLayoutIsSimulatedAndRanked) {
  auto q = request("gpt3-1.3b", 16, 32);
  q.prune = false;
  q.top = 100000;
  const auto all = plan(q);
  ASSERT_GT(all.top.size(), 20U);
  // The 11th layout as the reference: the same runtime, ranked after every layout of the
  // exhaustive search that is strictly faster.
  const auto& eleventh = all.top[10];
  const auto faster = std::count_if(all.top.begin(), all.top.end(), [&](const PlanEntry& e) {
    return e.metrics.runtime_s < eleventh.metrics.runtime_s;
  });
  q.reference = eleventh.layout;
  q.top = 5;
  // Without pruning every layout is simulated: the rank is exact.
  auto r = plan(q);
  ASSERT_TRUE(r.reference.has_value()) << r.reference_error;
  EXPECT_EQ(r.reference->metrics.runtime_s, eleventh.metrics.runtime_s);
  EXPECT_TRUE(r.reference_rank_exact);
  EXPECT_EQ(r.reference_rank, 1 + faster);
  // Pruned: layouts whose bound is below its runtime may go unsimulated, so the rank is a lower
  // bound, said so.
  q.prune = true;
  r = plan(q);
  ASSERT_TRUE(r.reference.has_value());
  EXPECT_LE(r.reference_rank, 1 + faster);
  EXPECT_TRUE(!r.reference_rank_exact || r.reference_rank == 1 + faster);  // exact means exact
  // A reference that breaks a rule is reported, not ranked.
  q.reference->pipeline_parallel = 5;
  const auto bad = plan(q);
  EXPECT_FALSE(bad.reference.has_value());
  EXPECT_NE(bad.reference_error.find("pipeline: the layers split neither"), std::string::npos)
      << bad.reference_error;
}

TEST(Plan, RejectsRequestsWithNoLayout) {
  const auto message = [](const PlanRequest& q) {
    try {
      plan(q);
    } catch (const ParamError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  auto q = request("gpt3-1.3b", 4, 3);
  q.space.tensor_parallel = {1};
  q.space.pipeline_parallel = {1};
  EXPECT_NE(message(q).find("no layout of 4 GPUs for a global batch of 3"), std::string::npos);
  EXPECT_NE(message(q).find("the global batch does not divide over the data-parallel replicas"),
            std::string::npos);
  q = request("gpt3-1.3b", 5, 8);
  q.space.tensor_parallel = {2};
  EXPECT_NE(message(q).find("no layout of 5 GPUs"), std::string::npos);
  EXPECT_NE(message(q).find("TP · CP must divide the GPU count (e.g. TP 2 · CP 1 on 5 GPUs)"),
            std::string::npos)
      << message(q);
  // Each rule the values given break is named, with an example, not one generic sentence: CP 3
  // on 8 GPUs, EP 3 of a model's experts, FSDP with the distributed optimizer, the combined
  // 1F1B all-to-all overlap without chunks.
  q = request("gpt3-1.3b", 8, 8);
  q.space.context_parallel = {3};
  EXPECT_NE(message(q).find("TP · CP must divide the GPU count (e.g. TP 1 · CP 3 on 8 GPUs)"),
            std::string::npos)
      << message(q);
  q = request("qwen3-30b-a3b", 8, 8);
  q.space.expert_parallel = {3};
  EXPECT_NE(message(q).find("EP × ETP must divide TP × CP × DP"), std::string::npos) << message(q);
  q = request("gpt3-1.3b", 8, 8);
  q.space.fsdp = {true};
  q.space.distributed_optimizer = {true};
  EXPECT_NE(message(q).find("FSDP already shards what the distributed optimizer shards"),
            std::string::npos)
      << message(q);
  q = request("qwen3-30b-a3b", 8, 8);
  q.space.a2a_overlap = {true};
  q.space.expert_parallel = {1};
  q.space.schedules = {"interleaved"};
  EXPECT_NE(message(q).find("--a2a-overlap needs experts over EP above 1, model chunks"),
            std::string::npos)
      << message(q);
  q = request("gpt3-1.3b", 0, 8);
  EXPECT_EQ(message(q), "plan: --gpus 0 must be from 1 to 16777216");
  // 2^62 GPUs hung in a divisor loop up to the count; refused before any work now.
  q = request("gpt3-1.3b", std::int64_t{1} << 62, 8);
  EXPECT_EQ(message(q), "plan: --gpus 4611686018427387904 must be from 1 to 16777216");
  q = request("gpt3-1.3b", 8, 0);
  EXPECT_EQ(message(q), "plan: --global-batch 0 must be at least 1");
  q = request("gpt3-1.3b", 8, 8);
  q.model = {"costs", ExplicitWorkload{}};
  EXPECT_NE(message(q).find("needs a transformer"), std::string::npos);
  q = request("gpt3-1.3b", 8, 8);
  q.shard = 3;
  q.shards = 2;
  EXPECT_NE(message(q).find("shard 3/2"), std::string::npos);
}

}  // namespace
}  // namespace pipetab

namespace pipetab {
namespace {

// A mixture of experts: the plan tries expert parallelism (and the all-to-all overlap) and its
// pruned search keeps the exhaustive one's top (Qwen3-30B-A3B cut to 8 layers on 16 GPUs).
TEST(Plan, ExpertParallelLayoutsAreSearchedAndPruningKeepsTheTop) {
  auto q = request("qwen3-30b-a3b", 16, 32);
  std::get<TransformerConfig>(q.model.spec).layers = 8;
  q.lowering.runtime = Runtime::Auto;
  q.space.schedules = {"1f1b", "interleaved", "zb-h1", "dualpipev"};
  q.space.micro_batch = {1};
  q.space.recompute = {Recompute::None};
  q.top = 8;
  const auto r = plan(q);
  ASSERT_FALSE(r.top.empty());
  bool expert_parallel = false;
  for (const auto& e : r.top) {
    expert_parallel = expert_parallel || e.layout.expert_parallel > 1;
    // Every ranked layout obeys the folding rule: EP divides TP × CP × DP; the combined 1F1B
    // pairs only the steps of an interleaved schedule, or of one without pipelining, with
    // experts spread.
    const auto& l = e.layout;
    EXPECT_EQ(l.tensor_parallel * l.context_parallel * l.data_parallel % l.expert_parallel, 0);
    EXPECT_EQ(128 % l.expert_parallel, 0);
    if (l.a2a_overlap) {
      EXPECT_GT(l.expert_parallel, 1);
      if (l.pipeline_parallel > 1) {
        EXPECT_GE(l.chunks, 2);
      }
    }
  }
  EXPECT_TRUE(expert_parallel);
  expect_pruning_keeps_the_top(q);
  // Interleaved alone: the overlap's layouts are searched, and the best of them beats its twin
  // without it (the all-to-alls hide under the other pass's compute).
  q.space.schedules = {"interleaved"};
  q.space.expert_parallel = {8};
  q.top = 1000;
  const auto i = plan(q);
  const auto best = std::find_if(i.top.begin(), i.top.end(),
                                 [](const PlanEntry& e) { return e.layout.a2a_overlap; });
  ASSERT_NE(best, i.top.end());
  auto plain = best->layout;
  plain.a2a_overlap = false;
  const auto twin = std::find_if(i.top.begin(), i.top.end(),
                                 [&](const PlanEntry& e) { return e.layout == plain; });
  ASSERT_NE(twin, i.top.end());
  EXPECT_LT(best->metrics.runtime_s, twin->metrics.runtime_s);
  // Without pipelining (Megatron-Core's combined_1f1b_schedule_for_no_pipelining) alike, and
  // the overlap's layouts never recompute what it refuses (the MoE block).
  q.space.schedules = {"1f1b"};
  q.space.pipeline_parallel = {1};
  q.space.moe_recompute = {MoeRecompute::None, MoeRecompute::Mlp};
  const auto single = plan(q);
  const auto first = std::find_if(single.top.begin(), single.top.end(),
                                  [](const PlanEntry& e) { return e.layout.a2a_overlap; });
  ASSERT_NE(first, single.top.end());
  for (const auto& e : single.top) {
    if (e.layout.a2a_overlap) {
      EXPECT_NE(e.layout.moe_recompute, MoeRecompute::Mlp);
    }
  }
  plain = first->layout;
  plain.a2a_overlap = false;
  const auto single_twin = std::find_if(single.top.begin(), single.top.end(),
                                        [&](const PlanEntry& e) { return e.layout == plain; });
  ASSERT_NE(single_twin, single.top.end());
  EXPECT_LT(first->metrics.runtime_s, single_twin->metrics.runtime_s);
}

// ETP and MoE recomputation are searched where asked: each layout's experts fold into its ranks
// (EP × ETP divides TP × CP × DP, no ETP without EP), each simulated as its own layout says (the
// memory of recomputing the MLP below the plain one's), and pruning keeps the exhaustive top.
TEST(Plan, ExpertTensorParallelAndMoeRecomputationAreSearched) {
  auto q = request("qwen3-30b-a3b", 16, 32);
  std::get<TransformerConfig>(q.model.spec).layers = 8;
  q.lowering.runtime = Runtime::Auto;
  q.space.schedules = {"1f1b"};
  q.space.micro_batch = {1};
  q.space.recompute = {Recompute::None};
  q.space.sequence_parallel = {true};
  q.space.a2a_overlap = {false};
  q.space.expert_parallel = {1, 4};
  q.space.expert_tensor_parallel = {1, 2};
  q.space.moe_recompute = {MoeRecompute::None, MoeRecompute::Mlp};
  q.top = 100000;
  q.prune = false;
  const auto r = plan(q);
  ASSERT_FALSE(r.top.empty());
  bool etp = false, mlp = false;
  for (const auto& e : r.top) {
    const auto& l = e.layout;
    EXPECT_EQ(l.tensor_parallel * l.context_parallel * l.data_parallel %
                  (l.expert_parallel * l.expert_tensor_parallel),
              0);
    if (l.expert_tensor_parallel > 1) {
      EXPECT_GT(l.expert_parallel, 1);
    }
    etp = etp || l.expert_tensor_parallel > 1;
    mlp = mlp || l.moe_recompute == MoeRecompute::Mlp;
    const auto setup = layout_setup(q, l);
    EXPECT_EQ(setup.layout.etp, l.expert_tensor_parallel);
    EXPECT_EQ(setup.job.moe.recompute, l.moe_recompute);
    if (l.moe_recompute == MoeRecompute::Mlp) {
      auto plain = l;
      plain.moe_recompute = MoeRecompute::None;
      const auto twin = std::find_if(r.top.begin(), r.top.end(),
                                     [&](const PlanEntry& x) { return x.layout == plain; });
      ASSERT_NE(twin, r.top.end());
      EXPECT_LT(e.peak_memory_bytes, twin->peak_memory_bytes);
    }
  }
  EXPECT_TRUE(etp);
  EXPECT_TRUE(mlp);
  q.prune = true;
  q.top = 5;
  expect_pruning_keeps_the_top(q);
}

// A mixture of experts with TP needs sequence parallelism (Megatron-Core; require_trainable): with
// SP searched, every TP > 1 layout is planned with it and none is rejected for its lack; with SP
// off, every TP > 1 layout is rejected by that rule. Either way each TP > 1 layout is enumerated
// once (with SP, or without it), so both searches count the same layouts.
TEST(Plan, AMixtureOfExpertsPlansTensorParallelismWithSequenceParallelism) {
  auto q = request("qwen3-30b-a3b", 16, 32);
  std::get<TransformerConfig>(q.model.spec).layers = 8;
  q.space.schedules = {"1f1b"};
  q.space.micro_batch = {1};
  q.space.recompute = {Recompute::None};
  q.space.tensor_parallel = {1, 2, 4};
  q.top = 1000;
  const auto both = plan(q);
  EXPECT_EQ(rejected(both, "expert parallel"), 0);
  bool tensor_parallel = false;
  for (const auto& e : both.top) {
    tensor_parallel = tensor_parallel || e.layout.tensor_parallel > 1;
    EXPECT_EQ(e.layout.sequence_parallel, e.layout.tensor_parallel > 1);
  }
  EXPECT_TRUE(tensor_parallel);
  q.space.sequence_parallel = {false};
  const auto off = plan(q);
  EXPECT_GT(rejected(off, "expert parallel"), 0);
  for (const auto& e : off.top)
    EXPECT_EQ(e.layout.tensor_parallel, 1);
  EXPECT_EQ(both.layouts, off.layouts);
}

// Any option of the one definition is searchable (--search): every layout is enumerated once per
// combination of the searched values, each runs the values it names (read back through the
// option's own getter), the options reach the simulation (twins differing only in TP overlap
// differ in runtime), and pruning keeps the exhaustive top.
TEST(Plan, AnyOptionOfTheOneDefinitionIsSearched) {
  auto q = request("qwen3-30b-a3b", 16, 32);
  std::get<TransformerConfig>(q.model.spec).layers = 8;
  q.space.schedules = {"1f1b"};
  q.space.micro_batch = {1};
  q.space.recompute = {Recompute::None};
  q.space.sequence_parallel = {true};
  q.space.a2a_overlap = {false};
  q.space.expert_parallel = {4};
  q.top = 100000;
  q.prune = false;
  const auto base = plan(q);
  q.space.options = {{"moe_dispatcher", {"alltoall", "deepep"}}, {"tp_overlap", {"none", "all"}}};
  const auto r = plan(q);
  EXPECT_EQ(r.layouts, 4 * base.layouts);
  EXPECT_EQ(r.simulated, 4 * base.simulated);
  bool differs = false;
  for (const auto& e : r.top) {
    const auto& l = e.layout;
    ASSERT_EQ(l.options.size(), 2U);
    EXPECT_EQ(l.options[0].key, "moe_dispatcher");
    EXPECT_EQ(l.options[1].key, "tp_overlap");
    const auto setup = layout_setup(q, l);
    for (const auto& o : l.options)
      EXPECT_EQ(find_run_option(o.key)->get(setup), o.value) << describe(l);
    EXPECT_NE(describe(l).find(", tp_overlap " + l.options[1].value), std::string::npos);
    auto twin = l;
    twin.options[1].value = l.options[1].value == "none" ? "all" : "none";
    const auto other = std::find_if(r.top.begin(), r.top.end(),
                                    [&](const PlanEntry& x) { return x.layout == twin; });
    ASSERT_NE(other, r.top.end()) << describe(l);
    differs = differs || (l.tensor_parallel > 1 && other->metrics.runtime_s != e.metrics.runtime_s);
  }
  EXPECT_TRUE(differs);
  const auto json = layout_json(r.top.front().layout);
  EXPECT_EQ(json.at("options").at("tp_overlap"), r.top.front().layout.options[1].value);
  EXPECT_FALSE(layout_json(base.top.front().layout).contains("options"));
  q.prune = true;
  q.top = 5;
  expect_pruning_keeps_the_top(q);
}

// What --search refuses, each with its rule: plan's own axes and derived degrees, the options
// that decide the table or the stage split, an unknown key, a value its option does not take, a
// value or a key given twice.
TEST(Plan, SearchRefusesWhatItCannotSearch) {
  const auto refuses = [](PlanSpace::Option option, const std::string& words) {
    auto q = request("qwen3-30b-a3b", 16, 32);
    q.space.options = {std::move(option)};
    try {
      (void)plan(q);
      ADD_FAILURE() << "no error, expected: " << words;
    } catch (const ParamError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refuses({"recompute", {"full"}}, "give its values with --recompute");
  refuses({"tensor_parallel", {"2"}}, "give its values with --tp");
  refuses({"data_parallel", {"2"}}, "plan derives it");
  refuses({"global_batch", {"64"}}, "plan ranks the layouts of one job");
  refuses({"runtime", {"pytorch", "megatron"}}, "run plan once per --runtime");
  refuses({"pipeline_layout", {"Et|tt|tt|ttL"}}, "--pipeline-layout");
  refuses({"moe_dispatchr", {"deepep"}}, "did you mean 'moe_dispatcher'");
  refuses({"moe_dispatcher", {"alltoall", "nccl"}},
          "'nccl': expected one of alltoall, deepep, hybridep");
  refuses({"moe_dispatcher", {"deepep", "deepep"}}, "'deepep' is listed twice");
  refuses({"moe_dispatcher", {}}, "no values to try");
  auto q = request("qwen3-30b-a3b", 16, 32);
  q.space.options = {{"moe_dispatcher", {"deepep"}}, {"moe_dispatcher", {"alltoall"}}};
  EXPECT_THROW((void)plan(q), ParamError);
}

// `--search KEY=A,B` as plan's flag and Python's keyword give it.
TEST(Plan, SearchesContextParallelismWhereTheSequenceAllowsAndFsdpBothWays) {
  // Defaults: CP 1 and each power of two leaving every rank 2,048 tokens or more (splitting the
  // sequence into 2·CP chunks), up to the GPUs; FSDP off and on. A hybrid model (Mamba layers)
  // takes none.
  TransformerConfig dense;
  TransformerConfig hybrid;
  hybrid.hybrid_pattern = "M*";
  EXPECT_EQ(default_context_parallel(dense, 8192, 64), (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_EQ(default_context_parallel(dense, 4096, 1024), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(default_context_parallel(dense, 2048, 1024), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(default_context_parallel(dense, 131072, 16),
            (std::vector<std::int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(default_context_parallel(dense, 131072, 16384).back(), 64);
  EXPECT_EQ(default_context_parallel(dense, 6144, 64),
            (std::vector<std::int64_t>{1, 2}));  // 6144/4 < 2048
  EXPECT_EQ(default_context_parallel(hybrid, 131072, 16), (std::vector<std::int64_t>{1}));
  for (std::int64_t seq = 1; seq <= 1 << 17; seq = seq * 3 / 2 + 1) {
    for (const auto cp : default_context_parallel(dense, seq, 1 << 14)) {
      EXPECT_EQ(seq % (2 * cp) == 0 || cp == 1, true) << seq << " " << cp;
      EXPECT_TRUE(cp == 1 || seq / cp >= kMinTokensPerCpRank) << seq << " " << cp;
    }
  }
  EXPECT_EQ(PlanSpace{}.fsdp, (std::vector<bool>{false, true}));
  EXPECT_EQ(parse_plan_space(PlanSpaceText{}).fsdp, (std::vector<bool>{false, true}));
}

TEST(Plan, TablesPastTheSizeBoundAreRejectedBeforeTheyAreBuilt) {
  // 2 GPUs, PP 2, 2^18 sequences: micro batch 1 makes a table of 2^18 microbatches over 2 stages
  // (2^19 forward passes), over the 2^17 a plan builds; micro batch 4 makes 2^17, at the bound.
  auto q = tiny(2, std::int64_t{1} << 18, 80e9);
  q.space.pipeline_parallel = {2};
  q.space.micro_batch = {1, 4};
  q.space.recompute = {Recompute::None};
  q.space.distributed_optimizer = {false};
  const auto r = plan(q);
  EXPECT_EQ(rejected(r, "size: over 131072 forward passes per table"), 1);
  ASSERT_EQ(r.top.size(), 1U);
  EXPECT_EQ(r.top[0].layout.micro_batch, 4);
  EXPECT_EQ(r.top[0].layout.microbatches * r.top[0].layout.pipeline_parallel, kMaxPlanTablePasses);
}

TEST(Plan, RepeatedValuesArePlannedOnce) {
  // "--tp 2,2" once ranked the same layouts twice and counted them twice: a list with repeats
  // plans as the list without them, in every count and ranked layout.
  auto unique = tiny(8, 16, 80e9);
  unique.space.tensor_parallel = {1, 2};
  unique.space.micro_batch = {1, 2};
  unique.space.recompute = {Recompute::None, Recompute::Full};
  unique.space.schedules = {"1f1b", "gpipe"};
  auto repeated = unique;
  repeated.space.tensor_parallel = {1, 2, 2, 1};
  repeated.space.micro_batch = {1, 1, 2};
  repeated.space.recompute = {Recompute::None, Recompute::Full, Recompute::None};
  repeated.space.schedules = {"1f1b", "gpipe", "1f1b"};
  const auto a = plan(unique), b = plan(repeated);
  ASSERT_GT(a.layouts, 0);
  EXPECT_EQ(b.layouts, a.layouts);
  EXPECT_EQ(b.rejected, a.rejected);
  EXPECT_EQ(b.simulated, a.simulated);
  ASSERT_EQ(b.top.size(), a.top.size());
  for (std::size_t i = 0; i < a.top.size(); ++i) {
    EXPECT_EQ(describe(b.top[i].layout), describe(a.top[i].layout));
    EXPECT_EQ(b.top[i].metrics.runtime_s, a.top[i].metrics.runtime_s);
  }
}

TEST(Plan, SearchTextIsReadAsKeyAndValues) {
  PlanSpaceText text;
  text.search = {"moe_dispatcher=alltoall,deepep", "seq_len=4096"};
  const auto space = parse_plan_space(text);
  ASSERT_EQ(space.options.size(), 2U);
  EXPECT_EQ(space.options[0], (PlanSpace::Option{"moe_dispatcher", {"alltoall", "deepep"}}));
  EXPECT_EQ(space.options[1], (PlanSpace::Option{"seq_len", {"4096"}}));
  for (const std::string bad : {"moe_dispatcher", "=deepep", "moe_dispatcher="}) {
    text.search = {bad};
    EXPECT_THROW((void)parse_plan_space(text), Error) << bad;
  }
  // An empty value between commas reaches the option, which refuses it.
  text.search = {"moe_dispatcher=alltoall,,deepep"};
  auto q = request("qwen3-30b-a3b", 16, 32);
  q.space = parse_plan_space(text);
  EXPECT_THROW((void)plan(q), ParamError);
}

}  // namespace
}  // namespace pipetab
