// Chimera (Li & Hoefler, SC'21): two pipelines over two replicas of the model. The down
// pipeline runs stage s on device s, the up pipeline on device D-1-s, so device i holds stage
// i of one replica and stage D-1-i of the other. Order of the official training loops (branch
// ChimeraBk, main_with_runtime_{direct,forward_doubling}.py), reference schedules.md §5:
// with H = D/2, on device w, "own" is the pipeline in which w holds an early stage, a = H - w
// (w < H) or w - H + 1 (w >= H), b = H - a, and the basic unit of D microbatches is
//     a × F_own, b × (F_oth, F_own), a × (F_oth, B_oth), b × (B_own, B_oth), tail a × B_own.
// N > D by direct concatenation: unit k ≥ 1 opens with a × (B_own, F_own), taking the previous
// unit's tail; or by forward doubling (K = N/D even): every forward slot runs two microbatches,
//     a × (F_own, F_own) [unit ≥ 1: a × (B_own, F_own, F_own)], b × (F_oth, F_oth, F_own, F_own),
//     a × (F_oth, F_oth, B_oth), (b + H) × (B_own, B_oth), tail a × B_own.
// Microbatch numbering: unit k holds microbatches kD .. kD+D-1, the first H in the down
// pipeline, the next H in the up pipeline.
#include "common.hpp"

#include "pipetab/schedules/registry.hpp"

namespace pipetab::schedules {
namespace {

class ChimeraWorker {
 public:
  ChimeraWorker(TableBuilder& table, int D, int w) : table_(table), D_(D), w_(w) {}

  void forward(int pipeline) { push(PassKind::F, pipeline, forwards_[pipeline]++); }
  void backward(int pipeline) { push(PassKind::B, pipeline, backwards_[pipeline]++); }

 private:
  void push(PassKind kind, int pipeline, int local) {
    const int H = D_ / 2;
    const int microbatch = (local / H) * D_ + pipeline * H + local % H;
    table_.push(kind, microbatch, pipeline == 0 ? w_ : D_ - 1 - w_);
  }

  TableBuilder& table_;
  int D_, w_;
  int forwards_[2] = {0, 0};
  int backwards_[2] = {0, 0};
};

void repeat(int times, auto&& body) {
  for (int i = 0; i < times; ++i)
    body();
}

}  // namespace

ScheduleTable chimera_table(const ResolvedParams& p, std::vector<std::int32_t> stage_layers) {
  const int D = p.devices, N = p.microbatches;
  require(D % 2 == 0, p,
          "D = S = {} must be even (the down and up pipelines pair stage i with stage D-1-i)", D);
  require(N % D == 0, p, "N = M = {} must be a multiple of D = S = {} (units of D microbatches)", N,
          D);
  const bool doubling = p.variant == "doubling";
  require(
      !doubling || N % (2 * D) == 0, p,
      "forward doubling needs N = M = {} to be a multiple of 2D = {} (units are doubled in pairs)",
      N, 2 * D);
  require_size(p, D, std::int64_t{2} * D * N);

  std::vector<std::int32_t> placement(2 * static_cast<std::size_t>(D));
  for (int s = 0; s < D; ++s) {
    placement[static_cast<std::size_t>(s)] = s;
    placement[static_cast<std::size_t>(D + s)] = D - 1 - s;
  }
  std::vector<std::uint8_t> pipeline_of(static_cast<std::size_t>(N));
  for (int m = 0; m < N; ++m)
    pipeline_of[static_cast<std::size_t>(m)] = (m % D) < D / 2 ? 0 : 1;
  TableBuilder table(D, D, N, 2, std::move(placement), std::move(pipeline_of),
                     std::int64_t{2} * D * N);
  table.set_stage_layers(std::move(stage_layers));

  const int H = D / 2, K = N / D;
  for (int w = 0; w < D; ++w) {
    const int own = w < H ? 0 : 1, oth = 1 - own;
    const int a = w < H ? H - w : w - H + 1, b = H - a;
    ChimeraWorker x(table, D, w);
    if (!doubling) {
      for (int k = 0; k < K; ++k) {
        repeat(a, [&] {
          if (k > 0) x.backward(own);
          x.forward(own);
        });
        repeat(b, [&] {
          x.forward(oth);
          x.forward(own);
        });
        repeat(a, [&] {
          x.forward(oth);
          x.backward(oth);
        });
        repeat(b, [&] {
          x.backward(own);
          x.backward(oth);
        });
      }
    } else {
      for (int u = 0; u < K / 2; ++u) {
        repeat(a, [&] {
          if (u > 0) x.backward(own);
          x.forward(own);
          x.forward(own);
        });
        repeat(b, [&] {
          x.forward(oth);
          x.forward(oth);
          x.forward(own);
          x.forward(own);
        });
        repeat(a, [&] {
          x.forward(oth);
          x.forward(oth);
          x.backward(oth);
        });
        repeat(b + H, [&] {
          x.backward(own);
          x.backward(oth);
        });
      }
    }
    repeat(a, [&] { x.backward(own); });
    table.end_row();
  }
  return std::move(table).finish();
}

namespace {
ScheduleTable generate_chimera(const ResolvedParams& p) {
  return chimera_table(p, {});
}
}  // namespace

extern const ScheduleInfo kChimera{
    .name = "chimera",
    .title = "Chimera: two pipelines (down and up) over two model replicas",
    .source = "Li & Hoefler, SC'21; order of the official ChimeraBk training loops",
    .constraints = "S (= D) even; M (= N) a multiple of S, of 2S for --variant doubling",
    .variants = kChimeraVariants,
    .generate = generate_chimera,
};

}  // namespace pipetab::schedules
