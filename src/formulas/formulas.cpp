#include "pipetab/formulas/formulas.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pipetab {

std::optional<double> Formula::peak_activation_max() const {
  if (!peak_activation || peak_activation->empty()) return std::nullopt;
  return *std::max_element(peak_activation->begin(), peak_activation->end());
}

namespace {

// Every device of these schedules computes M·(F + B) (a device share per microbatch), so the
// global bubble ratio is idle / makespan with idle = makespan − M·(F + B).
void set_makespan(Formula& f, double makespan, double work_per_device) {
  f.makespan = makespan;
  f.bubble_ratio = 1.0 - work_per_device / makespan;
}

// GPipe (Huang et al., NeurIPS 2019): makespan (M + S − 1)(F + B), bubble (S − 1)/(M + S − 1)
// for any F, B (the last microbatch's forward leaves device S−1 at (M+S−1)F, and the backwards
// drain in (M+S−1)B); every device holds all M microbatches (reference schedules.md §2).
Formula gpipe(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double S = p.devices, M = p.microbatches;
  set_makespan(f, (M + S - 1) * (c.F + c.B), M * (c.F + c.B));
  f.peak_activation = std::vector<double>(static_cast<std::size_t>(p.devices), M);
  f.published_bubble_ratio = (S - 1) / (M + S - 1);
  f.source = "Huang et al., GPipe (NeurIPS 2019): bubble (K-1)/(M+K-1); peak M·M_a";
  return f;
}

// 1F1B (PipeDream-Flush / DAPPLE): same makespan and bubble as GPipe; device d holds at most
// min(S − d, M) microbatches (reference schedules.md §3(e); Narayanan et al., ICML 2021).
Formula one_f_one_b(const ResolvedParams& p, const Costs& c) {
  Formula f = gpipe(p, c);
  auto& peaks = *f.peak_activation;
  for (std::size_t d = 0; d < peaks.size(); ++d) {
    peaks[d] = std::min(static_cast<double>(p.devices) - static_cast<double>(d),
                        static_cast<double>(p.microbatches));
  }
  f.source = "Narayanan et al., PipeDream-Flush (ICML 2021); Fan et al., DAPPLE (PPoPP 2021)";
  return f;
}

// Interleaved 1F1B (Narayanan et al., SC'21 §2.2): the per-device bubble shrinks by v,
// makespan M(F + B) + (S − 1)(F + B)/v, bubble (S − 1)/(vM + S − 1). Peak on device d in
// chunks: its warm-up plus one, min(vM, 2(S − d − 1) + (v − 1)S + 1), or all vM when M = S
// (Megatron runs everything as warm-up then); divided by v for M_a. Device 0's value
// S(1 + (S − 1)/(vS)) is Megatron's "interleaved schedule memory penalty" (reference §4(e)).
Formula interleaved(const ResolvedParams& p, const Costs& c) {
  if (p.chunks == 1) {
    Formula f = one_f_one_b(p, c);
    f.note = "one chunk: Megatron runs the non-interleaved 1F1B schedule";
    return f;
  }
  Formula f;
  const double S = p.devices, M = p.microbatches, v = p.chunks;
  set_makespan(f, M * (c.F + c.B) + (S - 1) * (c.F + c.B) / v, M * (c.F + c.B));
  std::vector<double> peaks(static_cast<std::size_t>(p.devices));
  for (std::size_t d = 0; d < peaks.size(); ++d) {
    const double chunks =
        p.microbatches == p.devices
            ? v * M
            : std::min(v * M, 2 * (S - static_cast<double>(d) - 1) + (v - 1) * S + 1);
    peaks[d] = chunks / v;
  }
  f.peak_activation = std::move(peaks);
  f.published_bubble_ratio = (S - 1) / (v * M + S - 1);
  f.source = "Narayanan et al., Megatron-LM (SC'21) §2.2; memory penalty 1+(S-1)/(vS)";
  return f;
}

// Chimera (Li & Hoefler, SC'21), closed forms of the official orders with zero communication,
// with K = N/D units, per worker, makespan = N(F + B) + idle:
//   direct concatenation: idle = (D − 2)·max(F, B) + (K − 1)(D − 2)·|B − F|
//     (reference schedules.md §5(d));
//   forward doubling: idle = (D − 2)·[max(F, (F + B)/2, B − F)
//                                     + (K/2 − 1)·(max(0, F − B) + max(0, B − 2F))].
//     The reference gives (D − 2)(F + B)/2 + (K/2 − 1)(D − 2)·max(0, B − 2F), which is this form
//     for F ≤ B ≤ 3F only; we measured the general one over D 2..16, K up to 32, B/F 0.25..10. The
//     paper's bubble (D − 2)/(2N + D − 2) assumes
// equal F and B slots. Peaks: worker i holds D/2 + min(i, D−1−i) + 1 stage activations
// (paper: the range [D/2 + 1, D]·M_a); forward doubling adds D (range [3D/2 + 1, 2D]).
Formula chimera(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double D = p.devices, N = p.microbatches, K = N / D;
  const bool doubling = p.variant == "doubling";
  const double idle =
      doubling ? (D - 2) * (std::max({c.F, (c.F + c.B) / 2, c.B - c.F}) +
                            (K / 2 - 1) * (std::max(0.0, c.F - c.B) + std::max(0.0, c.B - 2 * c.F)))
               : (D - 2) * (std::max(c.F, c.B) + (K - 1) * std::fabs(c.B - c.F));
  set_makespan(f, N * (c.F + c.B) + idle, N * (c.F + c.B));
  std::vector<double> peaks(static_cast<std::size_t>(p.devices));
  for (int i = 0; i < p.devices; ++i) {
    peaks[static_cast<std::size_t>(i)] =
        (doubling ? 3 * D / 2 : D / 2) + std::min(i, p.devices - 1 - i) + 1;
  }
  f.peak_activation = std::move(peaks);
  f.published_bubble_ratio = (D - 2) / (2 * N + D - 2);
  f.source =
      "Li & Hoefler, Chimera (SC'21): bubble (D-2)/(2N+D-2), activations [(D/2+1)M_a, D·M_a]";
  return f;
}

// ZB-V (Qi et al., ICLR 2024 §6) in PyTorch's handcrafted order (schedules/zb_v.cpp). With the
// chunk costs f = F/2, i = I/2, w = W/2 and g = min(i, 2w), for S >= 2 and M >= 2S-1:
//   makespan = M(F + I + W) + max((S−1)(2i − g), (S−1)(2f − g) − min(w, f − i), (S−2)w + max(f, i))
// and M(F + I + W) for S = 1 (one device never waits). This is our fit to the tables, not a
// published form: the overhead does not depend on M once M >= 2S−1, and the expression equals the
// table exactly over S 1..16, M 2S−1..64 and 1000 cost triples (tests/test_v_shape.cpp); below
// 2S−1 (PyTorch's padding drops microbatches) it does not hold. At F = I = W it is
// 3M + (S−1)/2 in units of F (reference §7(d)). Peak on device d: min(S, M, (M + 1 + d)/2) M_a,
// S on every device once M >= 2S−1 (reference §7(e)); measured over S 1..16, M 1..64.
Formula zb_v(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double S = p.devices, M = p.microbatches;
  const double work = M * (c.F + c.I + c.W);
  if (p.devices == 1) {
    set_makespan(f, work, work);
  } else if (M >= 2 * S - 1) {
    const double cf = c.F / 2, ci = c.I / 2, cw = c.W / 2, g = std::min(ci, 2 * cw);
    const double overhead =
        std::max({(S - 1) * (2 * ci - g), (S - 1) * (2 * cf - g) - std::min(cw, cf - ci),
                  (S - 2) * cw + std::max(cf, ci)});
    set_makespan(f, work + overhead, work);
  } else {
    f.note = "makespan: no closed form for M < 2S-1 (PyTorch's padded order drops microbatches); ";
  }
  std::vector<double> peaks(static_cast<std::size_t>(p.devices));
  for (std::size_t d = 0; d < peaks.size(); ++d)
    peaks[d] = std::min({S, M, (M + 1 + static_cast<double>(d)) / 2});
  f.peak_activation = std::move(peaks);
  f.published_bubble_ratio = 0.0;
  f.source =
      "Qi et al., Zero Bubble PP (ICLR 2024) §6: zero bubble, S·M_a on every device; makespan "
      "fitted to the tables";
  f.note +=
      "published bubble 0 is Def-A (per-device span) under T_F = T_B = T_W and M >= 2S-1 (sail-sg "
      "README); peaks in M_a (one microbatch over L/S layers)";
  return f;
}

// V-Half and V-Min (Qi, Wan, Amar, Lin, NeurIPS 2024): the peak is ⌊(S+2)/2⌋ resp. ⌊(S+4)/3⌋ M_a
// (HF space "Activation Memory (by #micro-batch)"; reference §8). Per device, as the tables
// measure it over S 1..16, M 1..64 (tests/test_v_shape.cpp): once M >= 2·bound − 1 every device
// holds the bound, except device 0 of V-Min when S ≡ 2 (mod 3), which holds half a microbatch
// less; below that, the largest peak is min(M, bound) and no per-device form is claimed. The
// published bubble rates are B/2 and 2B/3 with B = (S−1)/(M+S−1), 1F1B's rate (sail-sg README).
Formula controllable_memory(const ResolvedParams& p, bool v_min) {
  Formula f;
  const double S = p.devices, M = p.microbatches;
  const int bound = v_min ? (p.devices + 4) / 3 : (p.devices + 2) / 2;
  if (p.microbatches >= 2 * bound - 1) {
    std::vector<double> peaks(static_cast<std::size_t>(p.devices), bound);
    if (v_min && p.devices % 3 == 2) peaks.front() -= 0.5;
    f.peak_activation = std::move(peaks);
  } else {
    f.note =
        fmt::format("peak: no per-device form for M < {} (the largest peak is min(M, {}) M_a); ",
                    2 * bound - 1, bound);
  }
  const double one_f_one_b = (S - 1) / (M + S - 1);
  f.published_bubble_ratio = v_min ? 2 * one_f_one_b / 3 : one_f_one_b / 2;
  f.source = v_min ? "Qi, Wan, Amar, Lin, NeurIPS 2024: V-Min, peak (S+4)//3 M_a, bubble ~2B/3"
                   : "Qi, Wan, Amar, Lin, NeurIPS 2024: V-Half, peak (S+2)//2 M_a, bubble ~B/2";
  f.note += fmt::format(
      "published bubble {} of 1F1B's (S-1)/(M+S-1) is approximate, Def-A (per-device span), under "
      "T_F = T_B = T_W; the order is built at unit costs, so other costs add bubbles; no makespan "
      "closed form; peaks in M_a (one microbatch over L/S layers)",
      v_min ? "2/3" : "1/2");
  return f;
}

Formula v_half(const ResolvedParams& p, const Costs&) {
  return controllable_memory(p, false);
}

Formula v_min(const ResolvedParams& p, const Costs&) {
  return controllable_memory(p, true);
}

using FormulaFn = Formula (*)(const ResolvedParams&, const Costs&);

struct Entry {
  std::string_view schedule;
  FormulaFn fn;          ///< null: no closed form
  std::string_view why;  ///< when fn is null
};

constexpr Entry kFormulas[] = {
    {"gpipe", gpipe, {}},
    {"1f1b", one_f_one_b, {}},
    {"interleaved", interleaved, {}},
    {"chimera", chimera, {}},
    {"chimera-asym", nullptr,
     "stages of unequal size make op times differ by stage; no closed form"},
    {"hanayo", nullptr,
     "its order is list-scheduled (our reading, docs/schedules.md); no closed form is known"},
    {"zb-v", zb_v, {}},
    {"v-half", v_half, {}},
    {"v-min", v_min, {}},
};

}  // namespace

Formula formula(const ResolvedParams& params, const Costs& costs) {
  for (const auto& entry : kFormulas) {
    if (entry.schedule != params.schedule) continue;
    if (entry.fn != nullptr) return entry.fn(params, costs);
    Formula f;
    f.note = std::string(entry.why);
    return f;
  }
  Formula f;
  f.note = fmt::format("no closed form is known for {}", params.schedule);
  return f;
}

}  // namespace pipetab
