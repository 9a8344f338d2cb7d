#include "pipetab/cost/gemm.hpp"

#include <cmath>

namespace pipetab::cost {

double gemm_efficiency(const GemmModel& g, const GemmShape& s) {
  double efficiency = g.max_efficiency;
  if (g.sms > 0 && s.m > 0 && s.n > 0 && s.batch > 0) {
    const double tile_m = g.tile_m, tile_n = g.tile_n, sms = g.sms;
    const double tiles = std::ceil(s.m / tile_m) * std::ceil(s.n / tile_n) * s.batch;
    const double waves = std::ceil(tiles / sms);
    efficiency *= s.m * s.n * s.batch / (waves * sms * tile_m * tile_n);
  }
  if (g.k_overhead > 0 && s.k > 0) efficiency *= s.k / (s.k + g.k_overhead);
  return efficiency;
}

}  // namespace pipetab::cost
