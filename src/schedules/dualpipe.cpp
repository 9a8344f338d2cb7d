// DualPipe and DualPipeV (DeepSeek-V3 technical report §3.2.1, arXiv 2412.19437; repository
// deepseek-ai/DualPipe, dualpipe/dualpipe.py and dualpipe/dualpipev.py, `step()`; PyTorch's
// ScheduleDualPipeV in torch/distributed/pipelining/schedules.py; reference schedules.md §9,
// pytorch-interop.md §2).
//
// Both run the same eight steps on every rank, written in terms of the rank's two local chunks:
// chunk 0 holds the stage where the rank is early in its pipeline, chunk 1 the late one. With
// R ranks in the "half" pipeline, rank r in it and n microbatches per chunk:
//   1. 2(R-r-1) × F0
//   2. (r+1) × (F0, F1)
//   3. (R-r-1) × (I1, W, F1)                     zero-bubble: the W of that I runs at once
//   4. (n-2R+r+1) × (F0&B1, F1&B0)               overlapped pairs; on the turning rank (r = R-1)
//                                                the first F0&B1 runs as F0 then B1, "to further
//                                                reduce bubble size" (dualpipe.py)
//   5. (R-r-1) × (B1, F1&B0)
//   6. (r+1) × (B1, B0)                          from iteration ⌊(r+1)/2⌋ on, backwards defer
//                                                their W (I instead of B): odd r switches before
//                                                B1, even r between B1 and B0
//   7. (R-r-1) × (W, I0)
//   8. (r+1) × W
// "W" pops the oldest deferred weight pass (dualpipe's WeightGradStore is a FIFO). The backward
// half of an overlapped pair is always a full backward B. Microbatches of a chunk run in
// increasing order, forwards and backwards alike (per-phase chunk counters in dualpipe.py).
//
// DualPipe: PP ranks, two pipelines over two model replicas, like Chimera. Pipeline 0 (the
// report's forward direction) runs stage s on rank s, pipeline 1 (reverse direction) runs stage
// s on rank PP-1-s; rank r thus holds stages r and PP-1-r. The eight steps use the half rank
// h = min(r, PP-1-r), R = PP/2 and n = N/2 (each pipeline carries half the microbatches). Ranks
// in the first half are early in pipeline 0, those in the second half in pipeline 1.
// Microbatch numbering (ours): pipeline 0 carries microbatches 0 .. N/2-1, pipeline 1 carries
// N/2 .. N-1, each in increasing order (dualpipe.py feeds N/2 chunks from each end).
//
// DualPipeV: DualPipe "cut in half" — one model of 2R stages on R ranks in the V-shape (rank r
// holds stages r and 2R-1-r, zigzag_placement), one pipeline, all N microbatches enter at rank 0
// (where the loss is also computed). The eight steps use r itself, R ranks and n = N. (The
// stored copy of dualpipev.py could not be read; this follows PyTorch's ScheduleDualPipeV, a port
// of it, and reproduces PyTorch's artifact dualpipev_4rank_10mb.csv and reference §16 exactly.)
#include <algorithm>

#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

/// Where one local chunk of a rank runs: its global stage and the microbatch its counter 0
/// stands for (microbatch = first + counter).
struct Chunk {
  int stage = 0;
  std::int32_t first_microbatch = 0;
};

/// Emits one rank's eight steps. The deferred-W FIFO receives at most 2R-1 entries per rank
/// (steps 3, 6 and 7); its storage is reserved once and reused across ranks, so no op allocates.
class DualRank {
 public:
  DualRank(TableBuilder& table, std::vector<Pass>& deferred) : table_(table), deferred_(deferred) {}

  /// Appends the row of a rank with half-rank index r of R, n microbatches per chunk.
  void emit(int R, int r, std::int64_t n, Chunk early, Chunk late) {
    chunk_[0] = early;
    chunk_[1] = late;
    forwards_[0] = forwards_[1] = backwards_[0] = backwards_[1] = 0;
    deferred_.clear();
    head_ = 0;
    const bool turning = r == R - 1;  // dualpipe.py's "middle rank" / dualpipev.py's last rank

    repeat(2 * (R - r - 1), [&] { table_.push(Op::single(forward(0))); });
    repeat(r + 1, [&] {
      table_.push(Op::single(forward(0)));
      table_.push(Op::single(forward(1)));
    });
    repeat(R - r - 1, [&] {
      table_.push(Op::single(backward(1, PassKind::I)));
      pop_weight();
      table_.push(Op::single(forward(1)));
    });
    for (std::int64_t i = 0; i < n - 2 * R + r + 1; ++i) {
      if (i == 0 && turning) {
        table_.push(Op::single(forward(0)));
        table_.push(Op::single(backward(1, PassKind::B)));
      } else {
        pair(0, 1);
      }
      pair(1, 0);
    }
    repeat(R - r - 1, [&] {
      table_.push(Op::single(backward(1, PassKind::B)));
      pair(1, 0);
    });
    bool deferred = false;
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) deferred = true;
      table_.push(Op::single(backward(1, deferred ? PassKind::I : PassKind::B)));
      if (i == (r + 1) / 2 && r % 2 == 0) deferred = true;
      table_.push(Op::single(backward(0, deferred ? PassKind::I : PassKind::B)));
    }
    repeat(R - r - 1, [&] {
      pop_weight();
      table_.push(Op::single(backward(0, PassKind::I)));
    });
    repeat(r + 1, [&] { pop_weight(); });
    table_.end_row();
  }

 private:
  static void repeat(std::int64_t times, auto&& body) {
    for (std::int64_t i = 0; i < times; ++i)
      body();
  }

  Pass pass(int chunk, PassKind kind, int& counter) {
    const Chunk& c = chunk_[chunk];
    return Pass{c.first_microbatch + counter++, static_cast<std::uint16_t>(c.stage), kind};
  }
  Pass forward(int chunk) { return pass(chunk, PassKind::F, forwards_[chunk]); }
  // A backward of the chunk's next microbatch: B, or I with its W deferred to the FIFO.
  Pass backward(int chunk, PassKind kind) {
    const Pass p = pass(chunk, kind, backwards_[chunk]);
    if (kind == PassKind::I) deferred_.push_back(Pass{p.microbatch, p.stage, PassKind::W});
    return p;
  }
  void pair(int forward_chunk, int backward_chunk) {
    table_.push(Op::pair(forward(forward_chunk), backward(backward_chunk, PassKind::B)));
  }
  // dualpipe.py's _weight_chunk: the oldest deferred W (the FIFO is never empty here: every
  // pop follows the I it pops, see the step counts above).
  void pop_weight() { table_.push(Op::single(deferred_[head_++])); }

  TableBuilder& table_;
  std::vector<Pass>& deferred_;
  std::size_t head_ = 0;
  Chunk chunk_[2];
  int forwards_[2] = {0, 0};
  int backwards_[2] = {0, 0};
};

// Ops of one rank, at most: 2n forwards and 2n backwards of its two chunks, plus one W for each
// of the 2R-r-1 deferred backwards (pairs only merge two of these into one op).
std::int64_t ops_bound(std::int64_t ranks, std::int64_t R, std::int64_t n) {
  return ranks * (4 * n + 2 * R);
}

ScheduleTable generate_dualpipe(const ResolvedParams& p) {
  const int PP = p.devices;
  const std::int64_t N = p.microbatches;
  // dualpipe.py step(): `assert num_ranks % 2 == 0` and
  // `assert num_chunks > 0 and num_chunks % 2 == 0 and num_chunks >= num_ranks * 2`.
  require(PP % 2 == 0, p,
          "PP = S = {} must be even (rank r pairs stage r of one replica with stage PP-1-r of the "
          "other; dualpipe.py asserts num_ranks % 2 == 0)",
          PP);
  require(N % 2 == 0, p,
          "N = M = {} must be even (half the microbatches enter each pipeline; dualpipe.py "
          "asserts num_chunks % 2 == 0)",
          N);
  require(N >= 2 * PP, p,
          "N = M = {} must be at least 2·PP = {} (each pipeline needs PP microbatches for the "
          "steady phase of overlapped pairs; dualpipe.py asserts num_chunks >= num_ranks * 2)",
          N, 2 * PP);
  const int R = PP / 2;
  const std::int64_t n = N / 2;
  require_size(p, PP, ops_bound(PP, R, n));

  std::vector<std::int32_t> placement(2 * static_cast<std::size_t>(PP));
  for (int s = 0; s < PP; ++s) {
    placement[static_cast<std::size_t>(s)] = s;
    placement[static_cast<std::size_t>(PP + s)] = PP - 1 - s;
  }
  std::vector<std::uint8_t> pipeline_of(static_cast<std::size_t>(N));
  for (std::int64_t m = 0; m < N; ++m)
    pipeline_of[static_cast<std::size_t>(m)] = m < n ? 0 : 1;
  TableBuilder table(PP, PP, p.microbatches, 2, std::move(placement), std::move(pipeline_of),
                     ops_bound(PP, R, n));

  const auto first = static_cast<std::int32_t>(n);  // first microbatch of pipeline 1
  std::vector<Pass> deferred;
  deferred.reserve(static_cast<std::size_t>(2 * R));
  DualRank rank(table, deferred);
  for (int r = 0; r < PP; ++r) {
    const Chunk down{r, 0}, up{PP - 1 - r, first};
    // dualpipe.py: "for the first half of the ranks phase 0 means forward direction, for the
    // second half phase 0 means reverse direction".
    if (r < R) {
      rank.emit(R, r, n, down, up);
    } else {
      rank.emit(R, PP - 1 - r, n, up, down);
    }
  }
  return std::move(table).finish();
}

ScheduleTable generate_dualpipev(const ResolvedParams& p) {
  const int R = p.devices;
  const std::int64_t N = p.microbatches;
  // dualpipev.py asserts num_chunks >= num_ranks * 2 (reference §9(c)); PyTorch's
  // ScheduleDualPipeV raises unless n_microbatches >= num_stages (= 2R). (Measured: the eight
  // steps still give a valid table at N = 2R - 1 and break below, where W pops outrun the
  // deferred I's; we keep the reference implementations' bound. The same holds for DualPipe at
  // N = 2PP - 2.)
  require(N >= 2 * std::int64_t{R}, p,
          "N = M = {} must be at least the number of stages 2·S = {} (dualpipev.py asserts "
          "num_chunks >= num_ranks * 2; PyTorch's ScheduleDualPipeV needs n_microbatches >= "
          "num_stages)",
          N, 2 * std::int64_t{R});
  require_size(p, 2 * std::int64_t{R}, ops_bound(R, R, N));
  const int stages = 2 * R;
  TableBuilder table(R, stages, p.microbatches, zigzag_placement(R, stages), ops_bound(R, R, N));
  std::vector<Pass> deferred;
  deferred.reserve(static_cast<std::size_t>(2 * R));
  DualRank rank(table, deferred);
  for (int r = 0; r < R; ++r)
    rank.emit(R, r, N, Chunk{r, 0}, Chunk{stages - 1 - r, 0});
  return std::move(table).finish();
}

}  // namespace

extern const ScheduleInfo kDualPipe{
    .name = "dualpipe",
    .title = "DualPipe (DeepSeek-V3): two pipelines from both ends, overlapped F&B pairs",
    .source = "DeepSeek-V3 report §3.2.1; order of deepseek-ai/DualPipe dualpipe.py step()",
    .constraints = "S (= PP) even; M (= N) even and at least 2S",
    .generate = generate_dualpipe,
};

extern const ScheduleInfo kDualPipeV{
    .name = "dualpipev",
    .title = "DualPipeV: DualPipe cut in half, V-shape of 2S stages, one pipeline",
    .source = "deepseek-ai/DualPipe dualpipev.py step(), as ported by PyTorch ScheduleDualPipeV",
    .constraints = "M (= N) at least 2S (the number of stages)",
    .generate = generate_dualpipev,
};

}  // namespace pipetab::schedules
