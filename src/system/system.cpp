#include "pipetab/system/system.hpp"

#include <cstdlib>

#include <fmt/format.h>

namespace pipetab {

// Link layout. Switched: per device, [up to the node switch, down from it, NIC out, NIC in].
// Chain: per device d < S-1, [d → d+1, d+1 → d].
namespace {
constexpr std::int32_t kSwitchedLinksPerDevice = 4;
}

Network::Network(const SystemConfig& system, std::int32_t devices)
    : system_(system), devices_(devices) {
  if (system.topology == Topology::Switched) {
    links_.reserve(static_cast<std::size_t>(devices) * kSwitchedLinksPerDevice);
    for (std::int32_t d = 0; d < devices; ++d) {
      links_.push_back({fmt::format("dev{} up", d), system.intra.bandwidth});
      links_.push_back({fmt::format("dev{} down", d), system.intra.bandwidth});
      links_.push_back({fmt::format("dev{} nic out", d), system.inter.bandwidth});
      links_.push_back({fmt::format("dev{} nic in", d), system.inter.bandwidth});
    }
  } else {
    for (std::int32_t d = 0; d + 1 < devices; ++d) {
      links_.push_back({fmt::format("dev{} -> dev{}", d, d + 1), system.intra.bandwidth});
      links_.push_back({fmt::format("dev{} -> dev{}", d + 1, d), system.intra.bandwidth});
    }
  }
}

double Network::append_route(std::int32_t from, std::int32_t to,
                             std::vector<std::int32_t>& links) const {
  if (system_.topology == Topology::Switched) {
    const std::int32_t g = system_.devices_per_node;
    if (from / g == to / g) {
      links.push_back(from * kSwitchedLinksPerDevice + 0);
      links.push_back(to * kSwitchedLinksPerDevice + 1);
      return system_.intra.latency_s;
    }
    links.push_back(nic_out(from));
    links.push_back(nic_in(to));
    return system_.inter.latency_s;
  }
  const std::int32_t step = to > from ? 1 : -1;
  for (std::int32_t d = from; d != to; d += step) {
    links.push_back(step > 0 ? 2 * d : 2 * (d - 1) + 1);
  }
  return system_.intra.latency_s * std::abs(to - from);
}

std::int32_t Network::nic_out(std::int32_t device) const {
  return device * kSwitchedLinksPerDevice + 2;
}
std::int32_t Network::nic_in(std::int32_t device) const {
  return device * kSwitchedLinksPerDevice + 3;
}

}  // namespace pipetab
