#include "pipetab/system/system.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace pipetab {

double AttentionCurve::at(double seq_len, bool backward_pass) const {
  const std::vector<double>& e = backward_pass ? backward : forward;
  if (seq.size() < 2 || !(seq_len > seq.front())) return e.front();
  if (seq_len >= seq.back()) return e.back();
  // Between two measured lengths: linear in log2(seq), as the lengths were measured in doublings.
  const auto hi =
      static_cast<std::size_t>(std::upper_bound(seq.begin(), seq.end(), seq_len) - seq.begin());
  const std::size_t lo = hi - 1;
  const double t = std::log2(seq_len / seq[lo]) / std::log2(seq[hi] / seq[lo]);
  return e[lo] + t * (e[hi] - e[lo]);
}

// Link layout. Switched: per device, [up to the node switch, down from it, NIC out, NIC in].
// Chain: per device d < S-1, [d → d+1, d+1 → d].
namespace {
constexpr std::int32_t kSwitchedLinksPerDevice = 4;
}

std::int64_t gpus_per_node(const SystemConfig& system, std::int64_t job_gpus) {
  const std::int64_t node = std::max<std::int64_t>(1, system.devices_per_node);
  const std::int64_t host = std::clamp<std::int64_t>(system.host_size(), 1, node);
  if (host == node || job_gpus <= 0) return node;
  const std::int64_t hosts = (job_gpus + host - 1) / host;
  const std::int64_t hosts_per_node = node / host;
  const std::int64_t nodes = (hosts + hosts_per_node - 1) / hosts_per_node;
  return (hosts + nodes - 1) / nodes * host;
}

Network::Network(const SystemConfig& system, std::int32_t devices, std::int32_t gpus_per_device)
    : system_(system),
      devices_(devices),
      gpus_per_device_(std::max(1, gpus_per_device)),
      node_gpus_(gpus_per_node(system, static_cast<std::int64_t>(devices) * gpus_per_device_)) {
  if (system.topology == Topology::Switched) {
    links_.reserve(static_cast<std::size_t>(devices) * kSwitchedLinksPerDevice);
    for (std::int32_t d = 0; d < devices; ++d) {
      links_.push_back({system.intra.bandwidth});
      links_.push_back({system.intra.bandwidth});
      links_.push_back({system.inter.bandwidth});
      links_.push_back({system.inter.bandwidth});
    }
  } else {
    for (std::int32_t d = 0; d + 1 < devices; ++d) {
      links_.push_back({system.intra.bandwidth});
      links_.push_back({system.intra.bandwidth});
    }
  }
  if (system.host.modelled()) {
    // Host links after the others (no other link's index moves): a pair per link, out then in.
    const std::int32_t shared = std::max(1, system.host.gpus_per_link);
    const std::int32_t g = gpus_per_device_;
    devices_per_host_link_ = g >= shared ? 1 : (shared + g - 1) / g;
    // One modelled GPU's copies: alone on a link of its siblings (bandwidth / shared each), or
    // beside the other devices' GPUs on the link (bandwidth / g each, the devices sharing it).
    const double bandwidth = system.host.bandwidth / std::min(shared, g);
    host_base_ = static_cast<std::int32_t>(links_.size());
    const std::int32_t count = (devices + devices_per_host_link_ - 1) / devices_per_host_link_;
    for (std::int32_t k = 0; k < 2 * count; ++k)
      links_.push_back({bandwidth});
  }
}

std::string Network::link_name(std::size_t link) const {
  if (host_base_ >= 0 && link >= static_cast<std::size_t>(host_base_)) {
    const std::size_t k = (link - static_cast<std::size_t>(host_base_)) / 2;
    const std::size_t first = k * static_cast<std::size_t>(devices_per_host_link_);
    const std::size_t last = std::min(first + static_cast<std::size_t>(devices_per_host_link_),
                                      static_cast<std::size_t>(devices_)) -
                             1;
    const auto who =
        first == last ? fmt::format("dev{}", first) : fmt::format("dev{}-{}", first, last);
    return fmt::format("{} host {}", who,
                       link % 2 == static_cast<std::size_t>(host_base_) % 2 ? "out" : "in");
  }
  if (system_.topology == Topology::Switched) {
    constexpr auto per_device = static_cast<std::size_t>(kSwitchedLinksPerDevice);
    static constexpr const char* kPorts[per_device] = {"up", "down", "nic out", "nic in"};
    return fmt::format("dev{} {}", link / per_device, kPorts[link % per_device]);
  }
  const std::size_t d = link / 2;  // link 2d: d -> d+1, link 2d+1: d+1 -> d
  return link % 2 == 0 ? fmt::format("dev{} -> dev{}", d, d + 1)
                       : fmt::format("dev{} -> dev{}", d + 1, d);
}

std::int64_t Network::node_of(std::int32_t device) const {
  if (system_.topology != Topology::Switched) return 0;
  return static_cast<std::int64_t>(device) * gpus_per_device_ / node_gpus_;
}

double Network::append_route(std::int32_t from, std::int32_t to,
                             std::vector<std::int32_t>& links) const {
  if (system_.topology == Topology::Switched) {
    if (node_of(from) == node_of(to)) {
      links.push_back(port_up(from));
      links.push_back(port_down(to));
      return system_.intra.latency_s;
    }
    append_nic(from, to, links);
    return system_.inter.latency_s;
  }
  const std::int32_t step = to > from ? 1 : -1;
  for (std::int32_t d = from; d != to; d += step) {
    links.push_back(step > 0 ? 2 * d : 2 * (d - 1) + 1);
  }
  return system_.intra.latency_s * std::abs(to - from);
}

const LinkSpec& Network::route_class(std::int32_t from, std::int32_t to) const {
  if (system_.topology == Topology::Switched && node_of(from) != node_of(to)) return system_.inter;
  return system_.intra;
}

std::int32_t Network::port_up(std::int32_t device) const {
  return device * kSwitchedLinksPerDevice + 0;
}
std::int32_t Network::port_down(std::int32_t device) const {
  return device * kSwitchedLinksPerDevice + 1;
}
std::int32_t Network::nic_out(std::int32_t device) const {
  return device * kSwitchedLinksPerDevice + 2;
}
std::int32_t Network::nic_in(std::int32_t device) const {
  return device * kSwitchedLinksPerDevice + 3;
}
void Network::append_nic(std::int32_t from, std::int32_t to,
                         std::vector<std::int32_t>& links) const {
  links.push_back(nic_out(from));
  links.push_back(nic_in(to));
  if (system_.host.carries_nic && host_base_ >= 0) {
    links.push_back(host_out(from));
    links.push_back(host_in(to));
  }
}

std::int32_t Network::host_out(std::int32_t device) const {
  return host_base_ < 0 ? -1 : host_base_ + 2 * (device / devices_per_host_link_);
}
std::int32_t Network::host_in(std::int32_t device) const {
  return host_base_ < 0 ? -1 : host_out(device) + 1;
}

}  // namespace pipetab
