#include "pipetab/report/block.hpp"

#include <fmt/format.h>

#include "pipetab/report/output.hpp"

namespace pipetab {

std::string render_building_block(const BuildingBlock& block, std::span<const double> table_peaks) {
  std::string out = fmt::format(
      "building block: one microbatch's passes, repeated every {} slots (a slot = one chunk pass "
      "at unit costs; offsets from the block's start)\n",
      block.period);
  for (int d = 0; d < block.devices; ++d) {
    out += fmt::format("  device {}:", d);
    for (const BlockPass& pass : block.device_passes(d))
      out += fmt::format("  {} s{} +{}", kind_letter(pass.kind), pass.stage, pass.offset);
    out += "\n";
  }
  out += "lifespan (slots from F start to W end), per stage:";
  for (std::size_t s = 0; s < block.lifespan.size(); ++s)
    out += fmt::format(" s{} {}", s, block.lifespan[s]);
  out += "\npeak activation per device (M_a): lifespan-implied sum ceil(lifespan/period)*share";
  for (double peak : block.implied_peak)
    out += " " + format_number(peak);
  out += "; repeated block";
  for (double peak : block.steady_peak)
    out += " " + format_number(peak);
  if (!table_peaks.empty()) {
    out += "; table";
    for (double peak : table_peaks)
      out += " " + format_number(peak);
  }
  return out + "\n";
}

}  // namespace pipetab
