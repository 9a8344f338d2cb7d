// Interleaved 1F1B (Megatron-LM, Narayanan et al., SC'21), in Megatron's order (reference
// schedules.md §4, pytorch-interop.md §4.1; Megatron-LM `forward_backward_pipelining_with_
// interleaving`, `get_schedule_table` and `get_pp_rank_microbatches` at commit 00611e6e):
//  - device d holds v chunks, global stages d, d+S, ..., d+(v-1)S;
//  - the microbatches are walked in groups of g (--group-size, Megatron's
//    microbatch_group_size_per_vp_stage, default S; the last group takes what is left), each
//    group through chunks 0 .. v-1: the schedule table of vM virtual microbatches;
//  - warm-up w = min(vM, 2(S-d-1) + (v-1)g) forwards, then pairs "F(k+w), B(k)", then the
//    remaining backwards; forward k runs table entry k, backward k entry k's microbatch on the
//    mirrored chunk v-1-chunk;
//  - Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm; pipetab's --a2a-overlap,
//    ScheduleParams::combined_1f1b) warms up one more forward, w + 1, "to ensure the forward and
//    backward computations are independent in all 1f1b steps" (get_pp_rank_microbatches in
//    megatron/core/pipeline_parallel/schedules.py @d728871): without it the last device's step
//    would run a chunk's forward with its own backward.
// With g = S and M a multiple of S, virtual k is microbatch (k div vS)·S + (k mod S) on chunk
// (k mod vS) div S, the classic order. PyTorch's ScheduleInterleaved1F1B is this order with
// g = M div max(1, M div S), its microbatches per round. With one chunk Megatron runs the
// non-interleaved schedule, so -v 1 is 1F1B.
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {

std::vector<VirtualMicrobatch> interleaved_schedule_table(std::int64_t microbatches,
                                                          std::int64_t chunks, std::int64_t group) {
  std::vector<VirtualMicrobatch> table;
  table.reserve(static_cast<std::size_t>(microbatches * chunks));
  for (std::int64_t first = 0; first < microbatches; first += group) {
    const std::int64_t end = first + group >= microbatches ? microbatches : first + group;
    for (std::int64_t c = 0; c < chunks; ++c) {
      for (std::int64_t m = first; m < end; ++m)
        table.push_back({static_cast<std::int32_t>(m), static_cast<std::int32_t>(c)});
    }
  }
  return table;
}

ScheduleTable interleaved_table(const ResolvedParams& p, const InterleavedOrder& order) {
  const std::int64_t S = p.devices, M = p.microbatches, v = p.chunks;
  const std::int64_t passes = order.split_backward ? 3 : 2;
  require_size(p, v * S, passes * v * S * M);
  const auto stages = static_cast<int>(v * S);
  TableBuilder table(p.devices, stages, p.microbatches, looping_placement(p.devices, stages),
                     passes * v * S * M);
  const std::int64_t total = v * M;
  // The same on every device, so computed once instead of with divisions per op.
  const auto entries = interleaved_schedule_table(M, v, order.group);
  const auto stage = [&](std::int32_t chunk, std::int64_t d) {
    return static_cast<int>(chunk * S + d);
  };
  for (std::int64_t d = 0; d < S; ++d) {
    const std::int64_t warmup = std::min(
        total, order.warmup_factor * (S - d - 1) + (v - 1) * order.group + order.extra_warmup);
    const auto forward = [&](std::int64_t k) {
      const auto& e = entries[static_cast<std::size_t>(k)];
      table.push(PassKind::F, e.microbatch, stage(e.chunk, d));
    };
    std::int64_t next_weight = 0;  // the oldest I without its W
    const auto backward = [&](std::int64_t k) {
      const auto& e = entries[static_cast<std::size_t>(k)];
      const auto mirrored = static_cast<std::int32_t>(v - 1 - e.chunk);
      if (!order.split_backward) {
        table.push(PassKind::B, e.microbatch, stage(mirrored, d));
        return;
      }
      table.push(PassKind::I, e.microbatch, stage(mirrored, d));
      if (!order.weight_after_input && k < d) return;  // the first d backwards' W delayed
      const auto& w = entries[static_cast<std::size_t>(next_weight++)];
      table.push(PassKind::W, w.microbatch, stage(static_cast<std::int32_t>(v - 1 - w.chunk), d));
    };
    for (std::int64_t k = 0; k < warmup; ++k)
      forward(k);
    for (std::int64_t k = 0; k < total; ++k) {
      if (k + warmup < total) forward(k + warmup);
      backward(k);
    }
    while (order.split_backward && next_weight < total) {
      const auto& w = entries[static_cast<std::size_t>(next_weight++)];
      table.push(PassKind::W, w.microbatch, stage(static_cast<std::int32_t>(v - 1 - w.chunk), d));
    }
    table.end_row();
  }
  return std::move(table).finish();
}

namespace {

ScheduleTable generate_interleaved(const ResolvedParams& p) {
  if (p.chunks == 1) return one_f_one_b(p);
  const std::int64_t S = p.devices, M = p.microbatches, g = p.group_size;
  // Only a --group-size given explicitly can break the rules (the default is chosen to keep
  // them: registry.cpp default_group_size); the error names the one that works.
  std::string unused;
  const std::int64_t works = default_group_size(S, M, unused);
  require(g <= M, p,
          "group size g = {} exceeds M = {}: Megatron's interleaved schedule needs S <= g <= M "
          "(microbatch_group_size_per_vp_stage); --group-size {} works",
          g, M, works);
  require(g >= S || g == M, p,
          "group size g = {} is less than S = {}: Megatron's interleaved schedule needs S <= g <= "
          "M (microbatch_group_size_per_vp_stage); a smaller group is possible only as one group "
          "of all M < S microbatches (PyTorch's rule); --group-size {} works",
          g, S, works);
  require(M % g == 0 || M % g >= S, p,
          "M = {} with group size g = {}: M mod g = {} must be 0 or at least S = {} (Megatron's "
          "dependency-bubble rule); --group-size {} works",
          M, g, M % g, S, works);
  return interleaved_table(p, {.group = g,
                               .warmup_factor = 2,
                               .extra_warmup = p.combined_1f1b ? 1 : 0,
                               .split_backward = false});
}

}  // namespace

constexpr std::string_view kInterleavedAliases[] = {"Interleaved1F1B"};  // PyTorch's name

extern const ScheduleInfo kInterleaved{
    .name = "interleaved",
    .aliases = kInterleavedAliases,
    .title = "Interleaved 1F1B (Megatron-LM): v chunks per device, looping placement",
    .source = "Narayanan et al., SC'21; order of Megatron-LM schedules.py (group size)",
    .constraints =
        "for v >= 2, group size g (--group-size): S <= g <= M, and M mod g 0 or at least S "
        "(Megatron); g = M < S is one group (PyTorch). Default g = S (Megatron) where M is a "
        "multiple of S, else PyTorch's Interleaved1F1B g = M / max(1, M div S), else the "
        "smallest g the rules admit (a note says which). v = 1 is 1F1B",
    .default_chunks = 2,
    .takes_group_size = true,
    .takes_combined_1f1b = true,
    .generate = generate_interleaved,
};

}  // namespace pipetab::schedules
