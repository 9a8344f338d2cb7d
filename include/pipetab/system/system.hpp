// The system model (DESIGN.md §5 `system/`): devices, nodes, links and the routes between
// devices that the simulator's network uses.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace pipetab {

/// A link class: latency α (seconds) and bandwidth β (bytes per second, per direction).
struct LinkSpec {
  double latency_s = 0.0;
  double bandwidth = std::numeric_limits<double>::infinity();
  friend bool operator==(const LinkSpec&, const LinkSpec&) = default;
};

/// How devices are connected.
enum class Topology {
  /// Nodes of `devices_per_node` devices around a switch (each device has a port up and a port
  /// down, `intra`); each device also has a NIC (a link out and a link in, `inter`) into a
  /// non-blocking fabric between nodes.
  Switched,
  /// Devices in a line, neighbours joined by a link each way (`intra`); a transfer crosses
  /// every link between its ends.
  Chain,
};

/// A modelled cluster.
struct SystemConfig {
  std::string name;
  double peak_flops = 0.0;    ///< per device, dense, in the training dtype
  double efficiency = 1.0;    ///< achieved fraction of peak (model FLOP utilization)
  double memory_bytes = 0.0;  ///< per device
  std::int32_t devices_per_node = 8;
  Topology topology = Topology::Switched;
  LinkSpec intra;      ///< within a node (Chain: every hop)
  LinkSpec inter;      ///< between nodes
  std::string source;  ///< where the numbers come from, for reports

  /// Achieved FLOP/s per device.
  double flops() const noexcept { return peak_flops * efficiency; }
};

/// One link of the network, one direction.
struct NetworkLink {
  std::string name;  ///< e.g. "dev3 nic out", for traces and reports
  double bandwidth = 0.0;
};

/// The links of a system of `devices` devices, and the routes between them.
class Network {
 public:
  Network(const SystemConfig& system, std::int32_t devices);

  const std::vector<NetworkLink>& links() const noexcept { return links_; }
  std::int32_t devices() const noexcept { return devices_; }
  const SystemConfig& system() const noexcept { return system_; }

  /// Appends the links of the route from one device to another to `links` and returns the
  /// route's latency: α of the link class (Switched), or α per hop (Chain).
  double append_route(std::int32_t from, std::int32_t to, std::vector<std::int32_t>& links) const;
  /// A device's links to and from the inter-node fabric (Switched only).
  std::int32_t nic_out(std::int32_t device) const;
  std::int32_t nic_in(std::int32_t device) const;

 private:
  SystemConfig system_;
  std::int32_t devices_;
  std::vector<NetworkLink> links_;
};

}  // namespace pipetab
