// A hybrid model's Mamba-2 layer (docs/simulation.md, "Hybrid models"): its operators per pass,
// its parameters and the activations it keeps, per device. Megatron-Core's MambaLayer
// (megatron/core/ssm/mamba_layer.py) runs the pre-norm fused into the input projection (Transformer
// Engine's LayerNormColumnParallelLinear), the mixer (mamba_mixer.py: in_proj, the causal depthwise
// convolution, the SSD scan of mamba_ssm's mamba_chunk_scan_combined, the gated RMSNorm,
// out_proj) and the residual add. Tensor parallelism splits the mixer's heads and groups as
// attention's: in_proj column-parallel, out_proj row-parallel.
#include <cmath>

#include "builder.hpp"
#include "memory.hpp"

namespace pipetab::detail {
namespace {

// The mixer's widths per device, in elements per token.
struct MambaSizes {
  double inner;    // heads · head_dim / t: x, z and y
  double bc;       // 2 · groups · state / t: B and C
  double heads;    // heads / t: dt
  double groups;   // groups / t
  double conv;     // the convolution's channels: x, B and C
  double in_out;   // in_proj's output: z, x, B, C, dt
  double P, N, Q;  // head_dim, state, chunk
  double chunks;   // SSD chunks of the device's sequences: b · ⌈s / Q⌉
};

MambaSizes mamba_sizes(const Workload& run, const Dims& d) {
  const MambaConfig& m = *run.model.mamba;
  MambaSizes z{};
  z.inner = static_cast<double>(m.inner()) / d.t;
  z.bc = 2.0 * static_cast<double>(m.groups * m.state) / d.t;
  z.heads = static_cast<double>(m.heads) / d.t;
  z.groups = static_cast<double>(m.groups) / d.t;
  z.conv = z.inner + z.bc;
  z.in_out = 2 * z.inner + z.bc + z.heads;
  z.P = static_cast<double>(m.head_dim);
  z.N = static_cast<double>(m.state);
  z.Q = static_cast<double>(m.chunk);
  z.chunks = d.b * std::ceil(d.s / z.Q);
  return z;
}

// The SSD's chunked scan as matrix products (Dao and Gu 2024, §6: the "state-space dual" block
// decomposition), as mamba_ssm's Triton kernels run them (ssd_combined.py: _chunk_cumsum_fwd,
// _chunk_state_fwd, _state_passing_fwd, _bmm_chunk_fwd, _chunk_scan_fwd): per chunk of Q tokens,
// each head's state Bᵀ·x (N × P over Q), the states passed from chunk to chunk in fp32, each
// group's C·Bᵀ (Q × Q over N), and the output from the chunk itself, (C·Bᵀ ∘ decay)·x (Q × P over
// Q), and from the state before it, C·state (Q × P over N). Each is a batched product of tiles no
// larger than 128, priced by the GEMM model at their shapes.
void ssd_forward(Builder& f, const Dims& d, const MambaSizes& z) {
  const double T = d.tokens();
  const double per_head = z.chunks * z.heads;
  f.memory("mamba.ssd.cumsum", T * z.heads * (d.e + 8));  // dt read; dt and dA's cumsum, fp32
  f.gemm("mamba.ssd.chunk_state", z.N, z.P, z.Q, per_head);
  f.memory("mamba.ssd.state_passing", 2 * 4 * z.chunks * z.heads * z.N * z.P);
  f.gemm("mamba.ssd.bmm_chunk", z.Q, z.Q, z.N, z.chunks * z.groups);
  f.gemm("mamba.ssd.chunk_scan", z.Q, z.P, z.Q, per_head);
  f.gemm("mamba.ssd.chunk_scan.states", z.Q, z.P, z.N, per_head);
}

// Its backward (_mamba_chunk_scan_combined_bwd): the cumulative decay, C·Bᵀ and the states made
// again, then each forward product's two operand gradients, and the states' gradients passed
// back; dt's and A's gradients are reductions, counted with the cumsum.
void ssd_input_grad(Builder& i, const Dims& d, const MambaSizes& z) {
  const double T = d.tokens();
  const double per_head = z.chunks * z.heads, per_group = z.chunks * z.groups;
  i.memory("mamba.ssd.cumsum.recompute", T * z.heads * (d.e + 8));
  i.gemm("mamba.ssd.bmm_chunk.recompute", z.Q, z.Q, z.N, per_group);
  i.gemm("mamba.ssd.chunk_state.recompute", z.N, z.P, z.Q, per_head);
  i.memory("mamba.ssd.state_passing.recompute", 2 * 4 * z.chunks * z.heads * z.N * z.P);
  i.gemm("mamba.ssd.chunk_scan.dx", z.Q, z.P, z.Q, per_head);
  i.gemm("mamba.ssd.chunk_scan.dcb", z.Q, z.Q, z.P, per_head);
  i.gemm("mamba.ssd.chunk_scan.dstates", z.N, z.P, z.Q, per_head);
  i.gemm("mamba.ssd.chunk_scan.dc", z.Q, z.N, z.P, per_head);
  i.memory("mamba.ssd.state_passing.backward", 3 * 4 * z.chunks * z.heads * z.N * z.P);
  i.gemm("mamba.ssd.bmm_chunk.dc", z.Q, z.N, z.Q, per_group);
  i.gemm("mamba.ssd.bmm_chunk.db", z.Q, z.N, z.Q, per_group);
  i.gemm("mamba.ssd.chunk_state.db", z.Q, z.N, z.P, per_head);
  i.gemm("mamba.ssd.chunk_state.dx", z.Q, z.P, z.N, per_head);
  i.memory("mamba.ssd.ddt", T * z.heads * (2 * d.e + 12));
}

}  // namespace

void mamba_forward(Builder& f, const Workload& run, const Dims& d, const LayerSizes& z) {
  const Builder::Capture graph(f, GraphModule::Mamba);
  const MambaSizes s = mamba_sizes(run, d);
  const bool sp = run.layout.sequence_parallel;
  f.norm("mamba.norm", z.x, false);
  if (sp)
    f.collective("mamba.all_gather", CollectiveKind::AllGather, d.e * z.full, Overlap::All,
                 PassId::Forward, "mamba.in_proj");
  // TELayerNormColumnParallelLinear (mamba_layer_specs.py @d728871): the norm in in_proj's module.
  f.norm_linear("mamba.in_proj", "mamba.in_proj.quantize", z.T, s.in_out, d.h);
  // causal_conv1d with its SiLU: x, B and C read and written once.
  f.memory("mamba.conv1d", 2 * d.e * z.T * s.conv);
  ssd_forward(f, d, s);
  // The gated RMSNorm (Megatron-Core's RMSNormGated, norm(y · silu(z)) over each group): y and z
  // read, the output written.
  f.memory("mamba.gated_norm", 3 * d.e * z.T * s.inner);
  f.linear("mamba.out_proj", "mamba.out_proj.quantize", z.T, d.h, s.inner, true);
  f.collective(sp ? "mamba.reduce_scatter" : "mamba.all_reduce",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::All, PassId::Forward, "mamba.out_proj");
  f.memory("mamba.residual_add", dropout_add_bytes(run, d, z, false));
}

void mamba_input_grad(Builder& i, const Workload& run, const Dims& d, const LayerSizes& z) {
  const Builder::Capture graph(i, GraphModule::Mamba);
  const MambaSizes s = mamba_sizes(run, d);
  const bool sp = run.layout.sequence_parallel;
  i.memory("mamba.residual_add.backward", dropout_add_bytes(run, d, z, true));
  if (sp)
    i.collective("mamba.reduce_scatter.backward", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::All, PassId::InputGrad, "mamba.out_proj.input_grad");
  i.linear("mamba.out_proj.input_grad", "mamba.out_proj.quantize_grad", z.T, s.inner, d.h, false);
  // y, z and the output's gradient read; y's and z's gradients written.
  i.memory("mamba.gated_norm.backward", 5 * d.e * z.T * s.inner);
  ssd_input_grad(i, d, s);
  // causal_conv1d's backward: its input and the output's gradient read, the input's gradient
  // written (the taps' gradient reduced in the same kernel).
  i.memory("mamba.conv1d.backward", 3 * d.e * z.T * s.conv);
  i.linear("mamba.in_proj.input_grad", "mamba.in_proj.quantize_grad", z.T, d.h, s.in_out, false);
  i.collective(sp ? "mamba.all_gather.backward" : "mamba.all_reduce.backward",
               sp ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, d.e * z.full,
               Overlap::Backward, PassId::WeightGrad, "mamba.in_proj.weight_grad");
  i.norm("mamba.norm.backward", z.x, true);
}

void mamba_weight_grad(Builder& w, const Workload& run, const Dims& d, const LayerSizes& z) {
  const Builder::Capture graph(w, GraphModule::Mamba);
  const MambaSizes s = mamba_sizes(run, d);
  if (run.layout.sequence_parallel) {
    w.collective("mamba.all_gather.regather", CollectiveKind::AllGather, d.e * z.full,
                 Overlap::Backward, PassId::InputGrad, "mamba.in_proj.input_grad");
  }
  w.fp8_weight_grads(true);
  w.weight_gemm("mamba.in_proj.weight_grad", "mamba.in_proj.weight_grad.accumulate", d.h, s.in_out,
                z.T);
  w.weight_gemm("mamba.out_proj.weight_grad", "mamba.out_proj.weight_grad.accumulate", s.inner, d.h,
                z.T);
}

LayerParams mamba_block_params(const Workload& run) {
  const Dims d = dims(run);
  const MambaSizes s = mamba_sizes(run, d);
  const auto kernel = static_cast<double>(run.model.mamba->conv_kernel);
  const double linears = d.h * s.in_out + s.inner * d.h;
  // The convolution's taps and bias, A_log, D and dt's bias per head, the gated norm's weight;
  // the pre-norm replicated (2h, as the dense layer counts each of its norms).
  const double other = s.conv * (kernel + 1) + 3 * s.heads + s.inner;
  return {linears + other + 2 * d.h, 0.0, linears};
}

LayerActivation mamba_block_activation_bytes(const Workload& run) {
  const Dims d = dims(run);
  const double unsplit_t = run.layout.sequence_parallel ? d.t : 1.0;
  if (run.job.recompute == Recompute::Full) return {2 * d.sbh() / unsplit_t, 0.0};
  const MambaSizes s = mamba_sizes(run, d);
  const double T = d.tokens();
  const bool fp8 = fp8_saved_inputs(run);
  // The norm's input (the residual stream) and in_proj's normalised input (FP8 under Transformer
  // Engine's FP8 recipe), split only by sequence parallelism.
  const double unsplit = (2 + (fp8 ? 1 : 2)) * d.sbh();
  // in_proj's output (z, x, B and C before the convolution, dt: one tensor, views of it kept), the
  // convolution's output (x, B and C as the scan keeps them), dt and dA's cumulative sum in fp32,
  // the scan's output y (the gated norm keeps it), the norm's rstd per group, and out_proj's
  // input.
  const double out_proj_input = (fp8 ? 1.0 : d.e) * T * s.inner;
  const double split =
      d.e * T * (s.in_out + s.conv + s.inner) + 8 * T * s.heads + 4 * T * s.groups + out_proj_input;
  // The weight gradients need in_proj's and out_proj's inputs alone.
  const double in_proj_input = (fp8 ? 1.0 : 2.0) * d.sbh() / unsplit_t;
  return {unsplit / unsplit_t + split, 0.0, in_proj_input + out_proj_input};
}

}  // namespace pipetab::detail
