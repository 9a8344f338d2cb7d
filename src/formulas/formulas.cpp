#include "pipetab/formulas/formulas.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace pipetab {

std::optional<double> Formula::peak_activation_max() const {
  if (!peak_activation || peak_activation->empty()) return std::nullopt;
  return *std::max_element(peak_activation->begin(), peak_activation->end());
}

std::string_view to_string(PublishedBubble kind) {
  switch (kind) {
    case PublishedBubble::global:
      return "global";
    case PublishedBubble::span:
      return "span";
    case PublishedBubble::approximate_span:
      return "approximate span";
  }
  return "global";
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
  f.span_bubble_ratio = f.bubble_ratio;  // device 0 starts at 0 and runs the last backward
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

// Interleaved 1F1B (Narayanan et al., SC'21 §2.2), Megatron's order with group size g (default
// S): the per-device bubble shrinks by v, makespan M(F + B) + (S − 1)(F + B)/v, bubble
// (S − 1)/(vM + S − 1), for every g Megatron accepts (M ≥ S). One group of M < S microbatches
// (PyTorch's case) is bound by one microbatch's chain instead: (F + B)(vS + M − 1)/v, as looped
// BFS. Peak on device d in chunks: its warm-up plus one, min(vM, 2(S − d − 1) + (v − 1)g + 1),
// divided by v for M_a. Device 0's value at g = S, S(1 + (S − 1)/(vS)), is Megatron's
// "interleaved schedule memory penalty" (reference §4(e)). Checked over the whole test grid.
Formula interleaved(const ResolvedParams& p, const Costs& c) {
  if (p.chunks == 1) {
    Formula f = one_f_one_b(p, c);
    f.note = "one chunk: Megatron runs the non-interleaved 1F1B schedule";
    return f;
  }
  Formula f;
  const double S = p.devices, M = p.microbatches, v = p.chunks;
  const double g = p.group_size > 0 ? p.group_size : p.devices;  // 0: not resolved, Megatron's S
  set_makespan(f, (c.F + c.B) * (v * std::max(M, S) + std::min(M, S) - 1) / v, M * (c.F + c.B));
  f.span_bubble_ratio = f.bubble_ratio;  // device 0 starts at 0 and runs the last backward
  std::vector<double> peaks(static_cast<std::size_t>(p.devices));
  for (std::size_t d = 0; d < peaks.size(); ++d)
    peaks[d] = std::min(v * M, 2 * (S - static_cast<double>(d) - 1) + (v - 1) * g + 1) / v;
  f.peak_activation = std::move(peaks);
  if (M >= S) f.published_bubble_ratio = (S - 1) / (v * M + S - 1);
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

// Work of one device per microbatch with a split backward.
double split_work(const Costs& c) {
  return c.F + c.I + c.W;
}

// 1F1B with B split into I, W right after I (Qi et al., ICLR 2024, the 1F1B baseline of §2):
// the cool-down backwards chain through I alone, so makespan M(F+I+W) + (S−1)(F+I) for every
// M and every F, I, W (checked over the test grid); 1F1B's peaks min(S−d, M).
Formula one_f_one_b_split(const ResolvedParams& p, const Costs& c) {
  Formula f = one_f_one_b(p, c);
  const double S = p.devices, M = p.microbatches;
  set_makespan(f, M * split_work(c) + (S - 1) * (c.F + c.I), M * split_work(c));
  f.span_bubble_ratio = f.bubble_ratio;
  f.published_bubble_ratio.reset();
  f.source = "Qi et al., Zero Bubble PP (ICLR 2024): 1F1B with B = I + W; peaks as 1F1B";
  return f;
}

// ZB-H1 (Qi et al., ICLR 2024 §2.1; reference schedules.md §7): for M ≥ S, makespan
// M(F+I+W) + (S−1)·max(F+I−W, F, I): the W delayed on device d fill the cool-down, so the
// bubble shrinks from 1F1B's (S−1)(F+I+W) to the paper's (S−1)(F+I−W), but never below the
// forward skew (S−1)F nor the input-gradient chain (S−1)I (our derivation from the order,
// checked over the test grid). Every device holds min(S, M) microbatches.
Formula zb_h1(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double S = p.devices, M = p.microbatches;
  f.peak_activation = std::vector<double>(static_cast<std::size_t>(p.devices), std::min(S, M));
  f.source = "Qi et al., Zero Bubble PP (ICLR 2024) §2.1: bubble (S-1)(F+B-W) in their B = our I";
  if (M < S) {
    f.note = "no closed makespan for M < S (fill-drain)";
  } else {
    set_makespan(f, M * split_work(c) + (S - 1) * std::max({c.F, c.I, c.F + c.I - c.W}),
                 M * split_work(c));
    // The longest device span drops the forward skew: (S−1)·max(I, F+I−W) beyond the work.
    const double work = M * split_work(c);
    f.span_bubble_ratio = 1.0 - work / (work + (S - 1) * std::max(c.I, c.F + c.I - c.W));
  }
  // The paper's B/3 (reference §7 table) assumes F = I = W and a steady phase (M ≥ S).
  if (c.F == c.I && c.I == c.W && M >= S) f.published_bubble_ratio = (S - 1) / (3 * M + S - 1);
  return f;
}

// Interleaved zero bubble, PyTorch's ZB1P order (schedules/interleaved_zb.cpp), found by pipetab
// and checked over the whole test grid (no published form): for M ≥ S, makespan
// M(F + I + W) + (S − 1)·max(F, I, F + I − W)/v, ZB-H1's with the start-up skew cut by v (v = 1 is
// ZB-H1's order); the longest device span is (S − 1)·max(I, F + I − W)/v beyond the work. Peak on
// every device min(vM, S + (v − 1)g)/v M_a with g = M / max(1, M div S): device d's warm-up, one
// more forward, and the d inputs its delayed W still hold.
Formula interleaved_zb(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double S = p.devices, M = p.microbatches, v = p.chunks;
  const double g = static_cast<double>(p.microbatches / std::max(1, p.microbatches / p.devices));
  f.peak_activation = std::vector<double>(static_cast<std::size_t>(p.devices),
                                          std::min(v * M, S + (v - 1) * g) / v);
  f.source = "pipetab: ZB-H1's closed form (Qi et al., ICLR 2024 §2.1) with the skew cut by v";
  if (M < S) {
    f.note = "no closed makespan for M < S (one group, fill-drain)";
    return f;
  }
  const double work = M * split_work(c);
  set_makespan(f, work + (S - 1) * std::max({c.F, c.I, c.F + c.I - c.W}) / v, work);
  f.span_bubble_ratio = 1.0 - work / (work + (S - 1) * std::max(c.I, c.F + c.I - c.W) / v);
  return f;
}

// PipeOffload's GIS and GIS-H (Wan et al., ICML 2025 §3.1 and Table 1; schedules/gis.cpp), groups
// of g: device d holds g(v − 1) + S − d stage activations at its peak (its warm-up and one more),
// (g(v − 1) + S − d)/v M_a; GIS (g = S) adds (S − 1)(F + I)/v of bubble to the work, GIS-H (g =
// S/2, S even) (v − 1)·S/2·(F + I − W)/v more (Table 1, per-stage times F/v, I/v, W/v).
Formula gis_formula(const ResolvedParams& p, const Costs& c, std::int64_t group) {
  Formula f;
  const double S = p.devices, M = p.microbatches, v = p.chunks, g = static_cast<double>(group);
  f.source = "Wan et al., PipeOffload (ICML 2025) §3.1, Table 1";
  std::vector<double> peaks;
  for (std::int32_t d = 0; d < p.devices; ++d)
    peaks.push_back(std::min(v * M, g * (v - 1) + S - d) / v);
  f.peak_activation = std::move(peaks);
  if (M < S) {
    f.note = "no closed makespan for M < S";
    return f;
  }
  const double work = M * split_work(c);
  if (g == S) {
    set_makespan(f, work + (S - 1) * (c.F + c.I) / v, work);
  } else if (2 * g == S && c.F <= c.I && c.W <= c.F + c.I) {
    set_makespan(f, work + (S - 1) * (c.F + c.I) / v + (v - 1) * g * (c.F + c.I - c.W) / v, work);
  } else if (2 * g == S) {
    f.note = "GIS-H's closed makespan holds where F <= I and W <= F + I (checked over the grid)";
  } else {
    f.note = "no closed makespan for groups other than S and S/2 (the paper's GIS and GIS-H)";
  }
  return f;
}

Formula gis(const ResolvedParams& p, const Costs& c) {
  return gis_formula(p, c, p.group_size > 0 ? p.group_size : p.devices);
}

Formula gis_h(const ResolvedParams& p, const Costs& c) {
  return gis_formula(p, c, (p.devices + 1) / 2);
}

// ZB-H2 (Qi et al., ICLR 2024 §2.2): with F = I = W and M ≥ 2S−1, every device is busy without a
// gap from its first forward to its last W (zero span bubble, Def-A); the makespan keeps the
// start-up skew, 3M·F + (S−1)F. Peak 2S−1 microbatches on every device. Outside those
// conditions the heuristic's order has no closed form.
Formula zb_h2(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double S = p.devices, M = p.microbatches;
  f.source = "Qi et al., Zero Bubble PP (ICLR 2024) §2.2: zero bubble (Def-A), peak (2S-1) M_a";
  if (M < 2 * S - 1) {
    f.note = "closed forms need M >= 2S-1 (the warm-up of 2S-1 forwards)";
    return f;
  }
  f.published_bubble_ratio = 0.0;  // for F = I = W
  f.published_kind = PublishedBubble::span;
  f.peak_activation = std::vector<double>(static_cast<std::size_t>(p.devices), 2 * S - 1);
  if (c.F == c.I && c.I == c.W) {
    set_makespan(f, (3 * M + S - 1) * c.F, M * split_work(c));
    f.span_bubble_ratio = 0.0;
  } else {
    f.note = "makespan in closed form only for F = I = W (the order is built for equal costs)";
  }
  return f;
}

// DualPipe (DeepSeek-V3 §3.2.1; reference schedules.md §9(d)), zero communication, B the full
// backward, FB = Costs::pair() the cost of an overlapped F&B pair:
//   makespan = N(F + B) − (N − PP − 1)(F + B − FB) + (PP/2 − 1)(FB + B − 3W).
// The reference checked it at F = I = W for PP 4 and 8; we measured where it holds over PP 2..16,
// N 2PP..64 and a grid of costs (tests DualPipe*): for I = F, W ≤ F and FB ≥ F + W (= B, the
// longer half: a pair cannot beat it), and for PP = 2 at any costs. Elsewhere the table differs
// (e.g. PP=4, N=8, F=I=1, W=1.01, F&B=2.01: table 22.08, form 22.07): no makespan is claimed.
// Every device computes N(F + B) less F + B − FB per pair; rank r (half rank h = min(r, PP−1−r),
// H = PP/2, n = N/2) runs 2(n − 2H + h + 1) + (H − h − 1) pairs, one fewer on the turning ranks
// h = H − 1, whose first F0&B1 runs unpaired (dualpipe.py).
bool dualpipe_form_holds(int PP, const Costs& c) {
  const auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-12 * (a + b); };
  if (!near(c.B, c.I + c.W)) return false;  // the table's split backwards cost I + W
  return PP == 2 ||
         (near(c.I, c.F) && c.W <= c.F * (1 + 1e-12) && c.pair() >= (c.F + c.W) * (1 - 1e-12));
}

double dualpipe_makespan(double PP, double N, const Costs& c) {
  const double FB = c.pair();
  return N * (c.F + c.B) - (N - PP - 1) * (c.F + c.B - FB) + (PP / 2 - 1) * (FB + c.B - 3 * c.W);
}

// Pairs of all ranks of the eight steps with R ranks per half, n microbatches per chunk; `mirror`
// counts each half rank twice (DualPipe's two halves), once for DualPipeV.
double dualpipe_pairs(std::int64_t R, std::int64_t n, bool mirror) {
  double pairs = 0;
  for (std::int64_t h = 0; h < R; ++h)
    pairs += static_cast<double>(2 * (n - 2 * R + h + 1) + (R - h - 1) - (h == R - 1 ? 1 : 0));
  return mirror ? 2 * pairs : pairs;
}

// The README's bubble is a time, not a ratio, so it goes in the note, not in
// published_bubble_ratio. On the domain, and while a pair is no slower than its halves
// (F&B ≤ F + B), it equals the makespan less the busy time of the least idle device (tests
// DualPipeGrid); with F&B > F + B the table idles more.
std::string dualpipe_domain_note(double readme_bubble) {
  return fmt::format(
      "README bubble (PP/2-1)(F&B+B-3W) = {:g} time units (a time, not a ratio; B = full "
      "backward; = makespan - least device busy time when F&B <= F+B). Makespan closed form "
      "N(F+B)-(N-PP-1)(F+B-F&B)+(PP/2-1)(F&B+B-3W), exact for I = F, W <= F, F&B >= F+W (and "
      "for PP = 2 at any costs); unset outside that domain",
      readme_bubble);
}

Formula dualpipe(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double PP = p.devices, N = p.microbatches;
  if (dualpipe_form_holds(p.devices, c)) {
    const double makespan = dualpipe_makespan(PP, N, c);
    const double busy =
        PP * N * (c.F + c.B) -
        dualpipe_pairs(p.devices / 2, p.microbatches / 2, true) * (c.F + c.B - c.pair());
    f.makespan = makespan;
    f.bubble_ratio = 1.0 - busy / (PP * makespan);
  }
  // Every rank holds PP + 1 stage activations at its peak; a stage is one device share, so that
  // is PP + 1 M_a (README "activation per device: PP+1").
  f.peak_activation = std::vector<double>(static_cast<std::size_t>(p.devices), PP + 1);
  f.source =
      "DeepSeek-V3 §3.2.1 / deepseek-ai/DualPipe README: bubble (PP/2-1)(F&B+B-3W); activations "
      "PP+1 stage-acts per device = PP+1 M_a (a DualPipe stage is one device share)";
  f.note = dualpipe_domain_note((PP / 2 - 1) * (c.pair() + c.B - 3 * c.W));
  return f;
}

// DualPipeV is DualPipe cut in half (reference §9(a')): with per-stage costs it runs exactly as
// long as DualPipe(PP = 2S, 2N) (reference [S]); a V stage is half a device share, so in
// per-share costs makespan_V(S, N, c) = ½·makespan_DualPipe(2S, 2N, c), on the same domain
// (S = 1 ↔ PP = 2: any costs). Pairs of two half-share passes cost FB/2 each.
Formula dualpipev(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double R = p.devices, N = p.microbatches;
  if (dualpipe_form_holds(2 * p.devices, c)) {
    const double makespan = dualpipe_makespan(2 * R, 2 * N, c) / 2;
    const double busy = R * N * (c.F + c.B) - dualpipe_pairs(p.devices, p.microbatches, false) *
                                                  (c.F + c.B - c.pair()) / 2;
    f.makespan = makespan;
    f.bubble_ratio = 1.0 - busy / (R * makespan);
  }
  // 2S + 1 stage activations of half a device share each: (2S + 1)/2 M_a on every device.
  f.peak_activation = std::vector<double>(static_cast<std::size_t>(p.devices), (2 * R + 1) / 2);
  f.source =
      "deepseek-ai/DualPipe README (DualPipeV row, PP = 2S): bubble (PP/2-1)(F&B+B-3W) in "
      "per-stage costs; activations PP+1 = 2S+1 stage-acts of half a device share = (2S+1)/2 M_a";
  f.note = dualpipe_domain_note((R - 1) * (c.pair() + c.B - 3 * c.W) / 2) +
           " (DualPipeV: the forms of DualPipe with PP = 2S, 2N microbatches, halved)";
  return f;
}

// Looped BFS (Lamy-Poirier 2022; reference §10(d)): for M ≥ S interleaved's makespan
// M(F + B) + (S − 1)(F + B)/v; for M < S one microbatch's chain through all vS chunks and the
// remaining M − 1 behind it bound it, (vS + M − 1)(F + B)/v. One form for both:
// (F + B)(v·max(M, S) + min(M, S) − 1)/v (checked over the whole test grid, any F and B).
// Every forward precedes every backward, so each device holds all M microbatches of all v
// chunks at once: M M_a (GPipe-like).
Formula looped_bfs(const ResolvedParams& p, const Costs& c) {
  Formula f;
  const double S = p.devices, M = p.microbatches, v = p.chunks;
  set_makespan(f, (c.F + c.B) * (v * std::max(M, S) + std::min(M, S) - 1) / v, M * (c.F + c.B));
  f.peak_activation = std::vector<double>(static_cast<std::size_t>(p.devices), M);
  f.source =
      "Lamy-Poirier, Breadth-First PP (arXiv 2211.05953); PyTorch ScheduleLoopedBFS order: "
      "interleaved's bubble (S-1)/(vM+S-1) for M >= S (reference §10(d)); peak M M_a";
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
  if (M >= 2 * S - 1) {
    f.published_bubble_ratio = 0.0;
    f.published_kind = PublishedBubble::span;
    if (c.F == c.I && c.I == c.W) f.span_bubble_ratio = 0.0;
  }
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
  f.published_kind = PublishedBubble::approximate_span;
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
    {"1f1b-split", one_f_one_b_split, {}},
    {"zb-h1", zb_h1, {}},
    {"zb-h2", zb_h2, {}},
    {"dualpipe", dualpipe, {}},
    {"dualpipev", dualpipev, {}},
    {"looped-bfs", looped_bfs, {}},
    {"zb-v", zb_v, {}},
    {"v-half", v_half, {}},
    {"v-min", v_min, {}},
    {"interleaved-zb", interleaved_zb, {}},
    {"gis", gis, {}},
    {"gis-h", gis_h, {}},
    {"v-1f1b", nullptr,
     "its order is the authors' slot plan with a greedy warm-up (docs/schedules.md); no closed "
     "form is known"},
    {"po", nullptr,
     "PipeOffload's Table 1 bounds it (peak about GIS-H's (v+1)/(2v)·S M_a, 2/v with every stage "
     "offloaded; bubble below 1F1B's, docs/schedules.md); no closed form is known"},
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
