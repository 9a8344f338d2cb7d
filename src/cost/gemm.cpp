#include "pipetab/cost/gemm.hpp"

#include <algorithm>
#include <cmath>

namespace pipetab::cost {

namespace {

// The fraction of the multiprocessors' tile capacity doing useful work, for one tile shape.
double tile_utilisation(const GemmModel& g, const GemmTile& tile, const GemmShape& s) {
  const double sms = g.sms;
  const double tiles = std::ceil(s.m / tile.m) * std::ceil(s.n / tile.n) * s.batch;
  double split = 1.0;
  if (g.split_k_min > 0 && tiles < sms)
    split = std::max(1.0, std::min(std::floor(sms / tiles), std::floor(s.k / g.split_k_min)));
  const double waves = std::ceil(tiles * split / sms);
  const double slice = s.k / split;
  const double k_factor = g.k_overhead > 0 && s.k > 0 ? slice / (slice + g.k_overhead) : 1.0;
  return s.m * s.n * s.batch * split / (waves * sms * tile.m * tile.n) * k_factor;
}

}  // namespace

double gemm_efficiency(const GemmModel& g, const GemmShape& s) {
  if (g.sms <= 0 || !(s.m > 0 && s.n > 0 && s.batch > 0) || g.tiles.empty()) {
    const double k_factor = g.k_overhead > 0 && s.k > 0 ? s.k / (s.k + g.k_overhead) : 1.0;
    return g.max_efficiency * k_factor;
  }
  double best = 0.0;
  for (const auto& tile : g.tiles)
    best = std::max(best, tile_utilisation(g, tile, s));
  return g.max_efficiency * best;
}

}  // namespace pipetab::cost
