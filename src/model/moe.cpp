// The operators of a mixture-of-experts MLP (reference modern-runs.md §C.3), as Megatron-Core
// runs them (megatron/core/transformer/moe/: router.py, token_dispatcher.py, experts.py
// TEGroupedMLP, shared_experts.py): the router, the permutation of each token's rows to its
// experts, the dispatch all-to-all over the expert-parallel group, the grouped expert GEMMs,
// the combine all-to-all back, the unpermutation weighted by the router's probabilities, and
// the shared experts beside them.
//
// Sizes per rank. Each rank routes its own tokens: its sequence share, 1/tp of it under tensor
// (and sequence) parallelism. Every EP rank routes as many, so a balanced rank receives
// tokens·top_k rows; the busiest one receives `load` times that (MoeConfig::load: the imbalance
// when dropless, the capacity factor's padded rows when tokens are dropped), and its time bounds
// the layer's. With expert tensor parallelism the ETP ranks all-gather their received rows, and
// each runs every row through its 1/etp of each local expert's width.
#include <string_view>
#include <utility>

#include "builder.hpp"
#include <fmt/format.h>

namespace pipetab::detail {
namespace {

struct MoeSizes {
  double tokens = 0;           // tokens the rank routes
  double experts = 0;          // routed experts E
  double rows = 0;             // rows the busiest rank receives: load · tokens · top_k
  double gathered = 0;         // rows its experts run: rows · etp
  double local = 0;            // experts per rank E / ep
  double rows_per_expert = 0;  // gathered / local
  double width = 0;            // expert_ffn_hidden / etp
  double up = 0;               // fc1's output width: two halves when gated
  double shared = 0;           // the shared experts' width per TP rank
  double shared_up = 0;
  double dispatch_e = 0;  // bytes per element of the forward dispatch
  bool sort = false;      // the all-to-all dispatcher sorts received rows by expert
  bool overlap = false;   // the shared experts hide the dispatch and the combine
};

MoeSizes moe_sizes(const Workload& run, const Dims& d, const LayerSizes& z) {
  const TransformerConfig& m = run.model;
  const MoeConfig& moe = *m.moe;
  MoeSizes s;
  const double etp = static_cast<double>(run.layout.etp);
  const double k = static_cast<double>(moe.top_k);
  s.tokens = z.x / d.h;  // sequence-parallel share (a MoE layer with TP > 1 requires SP)
  s.experts = static_cast<double>(moe.experts);
  s.rows = run.job.moe.load() * s.tokens * k;
  s.gathered = s.rows * etp;
  s.local = s.experts / static_cast<double>(run.layout.ep);
  s.rows_per_expert = s.gathered / s.local;
  s.width = static_cast<double>(moe.expert_ffn_hidden) / etp;
  s.up = (m.gated_mlp ? 2 : 1) * s.width;
  s.shared = static_cast<double>(moe.shared_ffn()) / d.t;
  s.shared_up = (m.gated_mlp ? 2 : 1) * s.shared;
  // FP8 dispatch: one byte per value and an fp32 scale per 128 (DeepSeek-V3 §3.3.1's 1×128
  // activation tiles).
  s.dispatch_e = run.job.moe.fp8_dispatch ? 1.0 + 4.0 / 128.0 : d.e;
  s.sort = run.job.moe.dispatcher == MoeDispatcher::AllToAll && s.local > 1 && run.layout.ep > 1;
  s.overlap = run.job.moe.shared_expert_overlap && moe.shared_experts > 0;
  return s;
}

// The activation's bytes per element of fc2's input width, forward and backward, as the dense
// MLP's (operators.cpp): fused SwiGLU 3e / 5e, GeLU 2e / 3e, eager SwiGLU 5e / 9e.
double activation_bytes(const Workload& run, const Dims& d, bool backward) {
  const TransformerConfig& m = run.model;
  const bool eager_glu = m.gated_mlp && !run.job.stack.fused_elementwise;
  if (backward) return (eager_glu ? 9 : m.gated_mlp ? 5 : 3) * d.e;
  return (eager_glu ? 5 : m.gated_mlp ? 3 : 2) * d.e;
}
std::int32_t activation_kernels(const Workload& run, bool backward) {
  const TransformerConfig& m = run.model;
  if (!(m.gated_mlp && !run.job.stack.fused_elementwise)) return 1;
  return backward ? 5 : 2;
}

// Router: logits [tokens × E], the score function, top-k and the auxiliary loss's statistics:
// the logits written and read in 16 bits, the probabilities in fp32 written and read (Megatron's
// fused router kernels; an estimate of their traffic). Six kernels each way with
// --moe-router-fusion: the fused top-k with its score function, and the auxiliary loss (its
// scores, the routing map's sum, the loss, two updates of its tracker; backward the loss's,
// the scores', two scalings and the merge), Megatron-Core's default aux_loss balancing
// (router.py, moe_utils.py @b0cc270; TE router.py's one kernel per fused op).
double router_bytes(const Dims& d, const MoeSizes& s) {
  return (d.e + 8) * s.tokens * s.experts;
}
constexpr std::int32_t kRouterKernels = 6;

// Kernels of Transformer Engine's fused permutation (moe_permute_fusion, triton/permutation.py
// @TE v2.12): the row-id map in three, the permute in one; the unpermute one. Eager: one each.
std::int32_t permute_kernels(const Workload& run) {
  return run.job.stack.fused_elementwise ? 4 : 1;
}

// What the host issues for a dispatch, as framework calls: NCCL's all-to-all of the tokens and of
// their probabilities (Megatron-Core token_dispatcher.py, MoEAlltoAllTokenDispatcher); DeepEP's
// layout, count exchange and dispatch kernels and the probabilities' cast (its received indices
// made multi-hot after it: indices_to_multihot below); HybridEP's metadata preprocessing,
// dispatch and the probabilities' cast, its routing map already multi-hot (Megatron-Core
// fused_a2a.py HybridEPDispatch @6cd6ea5). HybridEP's staging copy out of its registered buffer
// (about 13 µs a dispatch in Megatron-Bridge 7ded17dae's profile) is not priced.
std::int32_t dispatch_kernels(const Workload& run) {
  switch (run.job.moe.dispatcher) {
    case MoeDispatcher::DeepEp:
      return 4;
    case MoeDispatcher::HybridEp:
      return 4;
    case MoeDispatcher::AllToAll:
      break;
  }
  return 2;
}

// DeepEP returns each received token's expert indices and probabilities ([tokens, top-k], -1
// where the expert is another rank's). Megatron-Core makes them a multi-hot map before the
// permutation (_DeepepManager._indices_to_multihot, from dispatch_postprocess in
// routed_experts_compute; token_dispatcher.py @1e05700, M7's revision, and @d728871) unless the
// stack fuses it (Stack::fused_multihot). PyTorch sizes three of its outputs on the host, each
// after a copy the host waits for: the indices under the mask (nonzero), repeat_interleave by a
// tensor of counts, the probabilities under the mask. The first wait is also for the dispatch,
// whose output the indices are. Fourteen kernels, by stretch between the waits: the two
// zero-filled maps, the mask and nonzero's count; the gather, arange, the counts' sum and
// repeat_interleave's cumulative sum; its fill, the map's index_put and the second count; the
// gather, the probabilities' index_put and the cast to bool. Bytes: the maps (int64 and fp32,
// [rows × local]) and about five passes over the [rows × top-k] int64 indices, split evenly; the
// received tokens counted as `rows`, their most. Fused (fused_indices_to_multihot, one Triton
// kernel): the indices and probabilities read once, a bool and an fp32 map written.
void indices_to_multihot(Builder& f, const Workload& run, const MoeSizes& s) {
  const double k = static_cast<double>(run.model.moe->top_k);
  if (run.job.stack.fused_multihot) {
    f.memory("moe.multihot", s.rows * (5.0 * s.local + 12.0 * k));
    return;
  }
  const double bytes = s.rows * (12.0 * s.local + 5.0 * 8.0 * k) / 4.0;
  const std::pair<std::string_view, std::int32_t> stretches[] = {{"moe.multihot.maps", 4},
                                                                 {"moe.multihot.indices", 4},
                                                                 {"moe.multihot.rows", 3},
                                                                 {"moe.multihot.probs", 3}};
  for (std::size_t i = 0; i < std::size(stretches); ++i) {
    f.memory(stretches[i].first, bytes, stretches[i].second);
    f.ops().back().host_sync = i > 0;  // each stretch but the first after a wait
  }
}

// gpt-oss's experts as Megatron-Core runs them @b0cc270 and @d728871 (the pins of
// Megatron-Bridge 26.02 and 26.04; experts.py TEGroupedMLP, fused_bias_geglu.py), per element of
// the rows' width, in the probabilities' 16 bits (the router's logits' dtype without
// --moe-router-dtype, which gpt-oss's recipe leaves unset):
//   fc2's bias (_apply_bias): per local expert b·p (written) and t + b·p (two read, one
//   written), then a concatenation (read, written): 6 elements, 2 calls an expert and one more.
//   Backward, autograd's: per expert b's and p's gradients, each a product (read, written) and a
//   sum (read), and the bias's gradient added to its main gradient (Megatron-Core's
//   backward hook); the rows' gradients concatenated (read, written): 8 elements, 5 calls an
//   expert and two more. The local biases are a few thousand elements each, not counted.
//   The clamp (weighted_bias_quick_geglu_impl): each half of fc1's output clamped (read,
//   written), the two concatenated (read, written): 8 elements of fc2's input width per row,
//   three calls, then torch.tensor(linear_offset, device=...), a copy the host waits for
//   (PyTorch's memcpy_and_sync: cudaMemcpyAsync, then cudaStreamSynchronize; sgl-project/sglang
//   #35106). Backward, the clamps' masks (gradient and input read, written) and the halves'
//   gradients joined (read, written): 10 elements, three calls.
// A stack replaying CUDA graphs runs neither: its MoE layers need Megatron-Core's sync-free
// experts, Transformer Engine's op fuser (use_transformer_engine_op_fuser, which Megatron-Bridge
// 26.08's gpt-oss graph recipes set), with the bias in the grouped GEMMs scaled by the
// probabilities (scale_bias) and the clamp inside the fused activation (experts.py @cd4afff, the
// pin of Megatron-Bridge 26.08, lines 473-536). Later Megatron-Core (@883533e, August 2026) also
// packs the eager bias into one pass; the pins above are what the runs used.
constexpr double kBiasBytes = 6, kBiasBackwardBytes = 8, kClampBytes = 8, kClampBackwardBytes = 10;
std::int32_t bias_kernels(const MoeSizes& s, bool backward) {
  const auto local = static_cast<std::int32_t>(s.local);
  return backward ? 5 * local + 2 : 2 * local + 1;
}

// The clamp before the experts' activation and its host synchronisation (above), forward or
// recomputed: the op after it waits.
void clamp(Builder& f, const Workload& run, const Dims& d, const MoeSizes& s,
           std::string_view name) {
  if (eager_clamp(run)) f.memory(name, kClampBytes * d.e * s.gathered * s.width, 4);
}
void activation(Builder& f, const Workload& run, const Dims& d, const MoeSizes& s,
                std::string_view name) {
  f.memory(name, activation_bytes(run, d, false) * s.gathered * s.width,
           activation_kernels(run, false));
  if (eager_clamp(run)) f.ops().back().host_sync = true;
}

// Permutation: each token's hidden state read once and written once per chosen expert, with
// the routing map (Transformer Engine's fused moe_permute; unpermute reads the rows and the
// probabilities and writes the token).
double permute_bytes(const Workload& run, const Dims& d, const MoeSizes& s) {
  const TransformerConfig& m = run.model;
  return d.e * s.tokens * d.h * (1.0 + static_cast<double>(m.moe->top_k));
}

void shared_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z,
                    const MoeSizes& s) {
  if (s.shared <= 0) return;
  const bool sp = run.layout.sequence_parallel;
  if (sp)
    f.collective("shared_expert.all_gather", CollectiveKind::AllGather, d.e * z.full, Overlap::All,
                 PassId::Forward, "shared_expert.fc1");
  f.linear("shared_expert.fc1", "shared_expert.fc1.quantize", z.T, s.shared_up, d.h, true);
  f.memory("shared_expert.activation", activation_bytes(run, d, false) * z.T * s.shared,
           activation_kernels(run, false));
  f.linear("shared_expert.fc2", "shared_expert.fc2.quantize", z.T, d.h, s.shared, true);
  f.collective(sp ? "shared_expert.reduce_scatter" : "shared_expert.all_reduce",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::All, PassId::Forward, "shared_expert.fc2");
}

void shared_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z,
                       const MoeSizes& s) {
  if (s.shared <= 0) return;
  const bool sp = run.layout.sequence_parallel;
  if (sp)
    i.collective("shared_expert.reduce_scatter.backward", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::All, PassId::InputGrad, "shared_expert.fc2.input_grad");
  i.linear("shared_expert.fc2.input_grad", "shared_expert.fc2.quantize_grad", z.T, s.shared, d.h,
           false);
  i.memory("shared_expert.activation.backward", activation_bytes(run, d, true) * z.T * s.shared,
           activation_kernels(run, true));
  i.linear("shared_expert.fc1.input_grad", "shared_expert.fc1.quantize_grad", z.T, d.h, s.shared_up,
           false);
  i.collective(sp ? "shared_expert.all_gather.backward" : "shared_expert.all_reduce.backward",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::Backward, PassId::WeightGrad, "shared_expert.fc1.weight_grad");
}

}  // namespace

void moe_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z) {
  const MoeSizes s = moe_sizes(run, d, z);
  {
    const Builder::Capture graph(f, GraphModule::MoeRouter);
    f.gemm("router", s.tokens, s.experts, d.h);
    f.memory("router.topk", router_bytes(d, s), kRouterKernels);
  }
  // Per-layer CUDA graphs' moe_preprocess: the alltoall dispatcher's dispatch_preprocess permutes
  // the rows and counts them before its all-to-all (token_dispatcher.py @d728871); the flex
  // dispatcher (DeepEP, HybridEP) permutes after its dispatch, outside the graph.
  const bool preprocess = run.job.moe.dispatcher == MoeDispatcher::AllToAll;
  const std::size_t permute = f.ops().size();
  f.memory("moe.permute", permute_bytes(run, d, s), permute_kernels(run));
  // The alltoall dispatcher's preprocessing (Megatron-Core token_dispatcher.py,
  // MoEAlltoAllTokenDispatcher.preprocess @60e0396): each rank's token count per expert, int64,
  // all-gathered (gather_from_sequence_parallel_region over the TP × EP ranks, priced over the
  // EP ranks) for the all-to-all's splits, which wait for it; around it six small kernels (the
  // counts' sums, a contiguous copy) and the four copies of the splits to the host (@b0cc270,
  // lines 511-560 and 862-895): eleven calls. DeepEP exchanges its counts inside its dispatch
  // kernel (notify_dispatch).
  if (run.job.moe.dispatcher == MoeDispatcher::AllToAll)
    if (Operator* counts = f.token_counts("moe.token_counts",
                                          8.0 * s.experts * static_cast<double>(run.layout.ep)))
      counts->kernels = 11;
  // HybridEP's routing map, one byte per token and expert, all-gathered over the EP ranks with
  // NCCL before every dispatch so that each rank plans what it sends and receives
  // (Executor::allgather_routing_map, csrc/hybrid_ep/executor/executor.cu on deepseek-ai/DeepEP's
  // hybrid-ep branch @94a9f8f; its custom all-gather has been off by default since DeepEP #682).
  // The backward reuses the forward's handle, so it is the forward's alone. It runs inside the
  // dispatch call, on its stream (fused_a2a.py HybridEPDispatch → dispatch_with_permute).
  if (run.job.moe.dispatcher == MoeDispatcher::HybridEp)
    if (Operator* gather =
            f.token_counts("moe.routing_map_all_gather",
                           s.tokens * s.experts * static_cast<double>(run.layout.ep)))
      gather->opens_next_exchange = true;
  if (preprocess)
    for (std::size_t k = permute; k < f.ops().size(); ++k)
      f.ops()[k].graph_module = graph_bit(GraphModule::MoePreprocess);
  // Megatron-Core's --moe-shared-expert-overlap: the shared experts' fc1 under the dispatch, fc2
  // under the combine. Before the dispatch the host waits for the device, once per layer's
  // forward with every dispatcher (dropless): the alltoall dispatcher's d2h_event.synchronize()
  // at cuda_sync_point before_ep_alltoall (token_dispatcher.py @b0cc270, lines 564 and 663),
  // DeepEP's busy-wait on its received counts (csrc/deep_ep.cpp, moe_recv_counter), HybridEP's
  // cudaStreamSynchronize for the permuted rows' count (executor.cu, non_blocking false). The
  // backward reuses the counts: no wait.
  Operator* dispatch =
      f.expert_exchange("moe.dispatch", CollectiveGroup::Expert, CollectiveKind::AllToAll,
                        s.rows * d.h * s.dispatch_e, s.overlap ? "shared_expert.fc1" : "");
  if (dispatch != nullptr) {
    dispatch->kernels = dispatch_kernels(run);
    dispatch->host_sync = true;
  }
  f.expert_exchange("moe.etp_all_gather", CollectiveGroup::ExpertTensor, CollectiveKind::AllGather,
                    s.gathered * d.h * d.e, "");
  if (dispatch != nullptr && run.job.moe.dispatcher == MoeDispatcher::DeepEp)
    indices_to_multihot(f, run, s);
  // The alltoall dispatcher's regrouping by local expert: TE's fused sort_chunks_by_index, its
  // map and its sort (two kernels); back, a copy of the transposed splits more (three).
  const bool fused = run.job.stack.fused_elementwise;
  if (s.sort) f.memory("moe.sort_chunks", 2 * d.e * s.gathered * d.h, fused ? 2 : 1);
  // With FP8 dispatch the rows arrive quantised: no cast before the first grouped GEMM. Without
  // a dispatch (EP 1) the host still waits before it: TE's GroupedLinear takes its splits as host
  // integers (m_splits), copied from the device.
  const std::size_t fc1 = f.ops().size();
  f.grouped_linear("experts.fc1", run.job.moe.fp8_dispatch ? "" : "experts.fc1.quantize",
                   s.rows_per_expert, s.up, d.h, true, s.local);
  if (dispatch == nullptr && fused && s.local > 1) f.ops()[fc1].host_sync = true;
  clamp(f, run, d, s, "experts.activation.clamp");
  activation(f, run, d, s, "experts.activation");
  f.grouped_linear("experts.fc2", "experts.fc2.quantize", s.rows_per_expert, d.h, s.width, true,
                   s.local);
  if (eager_bias(run))
    f.memory("experts.fc2.bias", kBiasBytes * d.e * s.gathered * d.h, bias_kernels(s, false));
  if (s.sort) f.memory("moe.unsort_chunks", 2 * d.e * s.gathered * d.h, fused ? 3 : 1);
  f.expert_exchange("moe.etp_reduce_scatter", CollectiveGroup::ExpertTensor,
                    CollectiveKind::ReduceScatter, s.gathered * d.h * d.e, "");
  f.expert_exchange("moe.combine", CollectiveGroup::Expert, CollectiveKind::AllToAll,
                    s.rows * d.h * d.e, s.overlap ? "shared_expert.fc2" : "");
  f.memory("moe.unpermute", permute_bytes(run, d, s));
  shared_forward(f, run, d, z, s);
}

void moe_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z) {
  const MoeSizes s = moe_sizes(run, d, z);
  // The pre-MLP norm's output, discarded after the forward (MoeJob::recompute_norm), is made
  // again before the experts' backward needs it.
  if (run.job.moe.recompute_norm) i.norm("layernorm2.recompute", z.x, false);
  if (run.job.moe.recompute == MoeRecompute::Mlp) moe_forward(i, run, d, z);
  shared_input_grad(i, run, d, z, s);
  i.memory("moe.unpermute.backward", permute_bytes(run, d, s));
  // The combine's gradient goes the dispatch's way and the dispatch's the combine's, both in
  // 16 bits (DeepSeek-V3 §3.3: only the forward dispatch is FP8).
  i.expert_exchange("moe.combine.backward", CollectiveGroup::Expert, CollectiveKind::AllToAll,
                    s.rows * d.h * d.e, s.overlap ? "shared_expert.fc2.input_grad" : "");
  i.expert_exchange("moe.etp_reduce_scatter.backward", CollectiveGroup::ExpertTensor,
                    CollectiveKind::AllGather, s.gathered * d.h * d.e, "");
  if (s.sort) i.memory("moe.unsort_chunks.backward", 2 * d.e * s.gathered * d.h);
  if (eager_bias(run)) {
    i.memory("experts.fc2.bias.backward", kBiasBackwardBytes * d.e * s.gathered * d.h,
             bias_kernels(s, true));
  }
  // The recomputed activation runs when fc2's output gradient is ready, before fc2's backward
  // (Megatron-Core's CheckpointWithoutOutput: a hook on fc2's output).
  if (run.job.moe.recompute == MoeRecompute::MoeAct) {
    clamp(i, run, d, s, "experts.activation.clamp.recompute");
    activation(i, run, d, s, "experts.activation.recompute");
  }
  i.grouped_linear("experts.fc2.input_grad", "experts.fc2.quantize_grad", s.rows_per_expert,
                   s.width, d.h, false, s.local);
  i.memory("experts.activation.backward", activation_bytes(run, d, true) * s.gathered * s.width,
           activation_kernels(run, true));
  if (eager_clamp(run)) {
    i.memory("experts.activation.clamp.backward", kClampBackwardBytes * d.e * s.gathered * s.width,
             3);
  }
  i.grouped_linear("experts.fc1.input_grad", "experts.fc1.quantize_grad", s.rows_per_expert, d.h,
                   s.up, false, s.local);
  if (s.sort) i.memory("moe.sort_chunks.backward", 2 * d.e * s.gathered * d.h);
  i.expert_exchange("moe.etp_all_gather.backward", CollectiveGroup::ExpertTensor,
                    CollectiveKind::ReduceScatter, s.gathered * d.h * d.e, "");
  i.expert_exchange("moe.dispatch.backward", CollectiveGroup::Expert, CollectiveKind::AllToAll,
                    s.rows * d.h * d.e, s.overlap ? "shared_expert.fc1.input_grad" : "");
  i.memory("moe.permute.backward", permute_bytes(run, d, s));
  if (run.job.moe.dispatcher == MoeDispatcher::AllToAll)
    i.ops().back().graph_module = graph_bit(GraphModule::MoePreprocess);
  const Builder::Capture graph(i, GraphModule::MoeRouter);
  i.gemm("router.input_grad", s.tokens, d.h, s.experts);
  i.memory("router.topk.backward", router_bytes(d, s), kRouterKernels);
}

void moe_weight_grad(Builder& w, const Workload& run, const Dims& d, const LayerSizes& z) {
  const MoeSizes s = moe_sizes(run, d, z);
  if (s.shared > 0 && run.layout.sequence_parallel) {
    w.collective("shared_expert.all_gather.regather", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::Backward, PassId::InputGrad, "shared_expert.fc1.input_grad");
  }
  // The router is not an FP8 linear (Megatron-Core's TopKRouter is a plain GEMM, in fp32 with
  // --moe-router-dtype fp32): its weight gradient stays 16-bit even after the attention's FP8
  // ones in the same pass.
  w.fp8_weight_grads(false);
  {
    const Builder::Capture graph(w, GraphModule::MoeRouter);
    w.weight_gemm("router.weight_grad", "router.weight_grad.accumulate", d.h, s.experts, s.tokens);
  }
  w.fp8_weight_grads(true);
  w.grouped_weight_gemm("experts.fc1.weight_grad", "experts.fc1.weight_grad.accumulate", d.h, s.up,
                        s.rows_per_expert, s.local);
  // fc1's biases: their gradients come out of the GEMMs' epilogue as parameters' gradients, which
  // Megatron-Core's backward hook adds to the main gradients one bias at a time.
  if (eager_bias(run)) {
    w.memory("experts.fc1.bias_grad.accumulate",
             s.local * s.up * (d.e + 2 * run.job.grad_bytes_per_param),
             static_cast<std::int32_t>(s.local));
  }
  w.grouped_weight_gemm("experts.fc2.weight_grad", "experts.fc2.weight_grad.accumulate", s.width,
                        d.h, s.rows_per_expert, s.local);
  if (s.shared > 0) {
    w.weight_gemm("shared_expert.fc1.weight_grad", "shared_expert.fc1.weight_grad.accumulate", d.h,
                  s.shared_up, z.T);
    w.weight_gemm("shared_expert.fc2.weight_grad", "shared_expert.fc2.weight_grad.accumulate",
                  s.shared, d.h, z.T);
  }
}

}  // namespace pipetab::detail
