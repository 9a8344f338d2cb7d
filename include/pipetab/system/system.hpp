// The system model (docs/design.md §5 `system/`): devices, nodes, links and the routes between
// devices that the simulator's network uses.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "pipetab/attention_kernel.hpp"
#include "pipetab/precision.hpp"

namespace pipetab {

/// What a node's links are, as NCCL's tuning model tells them apart (src/graph/tuning.cc, its
/// hwLat rows): NVLink (through NVSwitch or bridges) or PCIe. Between nodes it is always the
/// network.
enum class LinkMedium : std::uint8_t { NvLink, Pcie };

/// A link class: latency α (seconds) and bandwidth β (bytes per second, per direction).
struct LinkSpec {
  double latency_s = 0.0;
  double bandwidth = std::numeric_limits<double>::infinity();
  /// Of the bandwidth, what a collective's ring achieves (NCCL's bus bandwidth / β). Used for
  /// the tensor-parallel collectives inside a stage's passes.
  double collective_efficiency = 1.0;
  /// Pipeline point-to-point transfers (NCCL send/receive): a per-message latency, and of the
  /// bandwidth what one send/receive between a pair of GPUs reaches (NCCL copies with a few
  /// SMs, 128-byte payloads, and p2p's share of channels, so it stays below the link's peak;
  /// nccl-tests sendrecv_perf). A transfer alone takes p2p_latency_s + bytes / (bandwidth ×
  /// p2p_efficiency); under contention it gets its max-min share, never more than that rate.
  /// Unset latency: latency_s.
  std::optional<double> p2p_latency_s{};
  double p2p_efficiency = 1.0;
  /// NCCL's all-to-all over this link (the Direct algorithm: grouped sends to every peer, as
  /// Megatron-Core's alltoall dispatcher and Ulysses run it): of the bandwidth what it reaches,
  /// and what a whole exchange takes beyond its bytes (the intercept of its time against its
  /// size: NCCL serves each peer's connection in chunks, so an all-to-all pays far more than one
  /// hop's latency). nccl-tests' alltoall_perf on HGX H100 (data/nccl-tests/*-alltoall-xxrjun.csv,
  /// experiments/nccl-alltoall). Unset: collective_efficiency and latency_s.
  std::optional<double> alltoall_efficiency{};
  std::optional<double> alltoall_latency_s{};
  /// DeepEP's and HybridEP's dispatch and combine kernels over this link: of the bandwidth, what
  /// they reach, counted as their own benchmarks count (each token once per node it goes to, the
  /// sender's included; parallel/collective.cpp). Unset: collective_efficiency, which their
  /// published figures reach; for a cluster that measures less (docs/simulation.md).
  std::optional<double> deepep_efficiency{};
  /// Within a node: the hardware NCCL runs over. Set, the node's ring and tree collectives take
  /// NCCL's own latency model and its protocols (LL, LL128, Simple) by message size
  /// (parallel/collective.hpp); unset (the paper's synthetic systems), a collective is the plain
  /// α-β ring. Read only on the `intra` link class.
  std::optional<LinkMedium> medium{};
  /// Within a node: of the bandwidth, what NCCL's NVLink SHARP all-reduce (NVLS: the NVSwitch
  /// reduces, each rank sends and receives (p−1)/p of the buffer once) reaches; 0 where the
  /// switch has no SHARP (before NVSwitch 3, Hopper) or NCCL does not use it.
  double nvls_efficiency = 0.0;
  /// Across nodes: of a node's NICs, how many one ring or tree collective's channels spread its
  /// traffic over. NCCL builds a bounded number of channels, and a 72-GPU NVLink domain has more
  /// NICs than they reach (GB200 NVL72: 9, fitted on a 20-rack all-reduce; docs/simulation.md
  /// "Collectives as NCCL runs them"). Priced as each GPU's NIC carrying a 1/collective_nics
  /// share. 0: every GPU's NIC of the node. Read only on the `inter` link class.
  double collective_nics = 0.0;
  friend bool operator==(const LinkSpec&, const LinkSpec&) = default;

  double p2p_latency() const noexcept { return p2p_latency_s.value_or(latency_s); }
  double alltoall_latency() const noexcept { return alltoall_latency_s.value_or(latency_s); }
  /// What an all-to-all reaches of the bandwidth.
  double alltoall_share() const noexcept {
    return alltoall_efficiency.value_or(collective_efficiency);
  }
  /// What DeepEP's kernels reach of the bandwidth.
  double deepep_share() const noexcept { return deepep_efficiency.value_or(collective_efficiency); }
  /// Bytes per second one point-to-point transfer reaches alone.
  double p2p_bandwidth() const noexcept { return bandwidth * p2p_efficiency; }
  /// This link class with its bandwidth and latencies multiplied (infinite bandwidth stays
  /// infinite): the sensitivity study's axes, and --bandwidth-scale / --latency-scale.
  LinkSpec scaled(double bandwidth_scale, double latency_scale) const {
    LinkSpec link = *this;
    link.bandwidth *= bandwidth_scale;
    link.latency_s *= latency_scale;
    if (link.p2p_latency_s) *link.p2p_latency_s *= latency_scale;
    if (link.alltoall_latency_s) *link.alltoall_latency_s *= latency_scale;
    return link;
  }
};

/// An output tile of a GEMM kernel: tile_m × tile_n result elements per multiprocessor.
struct GemmTile {
  std::int32_t m = 256, n = 128;
  friend bool operator==(const GemmTile&, const GemmTile&) = default;
};

/// How fast a device runs matrix multiplies of a given shape (cost/gemm.hpp): a well-shaped
/// large GEMM reaches `max_efficiency` of the peak; the output is cut into tiles, one per
/// streaming multiprocessor at a time, so a GEMM whose tiles do not fill whole waves of `sms`
/// tiles leaves multiprocessors idle (tile and wave quantization, NVIDIA's "Matrix
/// Multiplication Background" guide). The library picks, per shape, the tile of `tiles` that
/// wastes least; with split_k_min > 0, a GEMM whose tiles fill less than one wave splits its K
/// loop over the idle multiprocessors, each slice at least split_k_min deep (cuBLAS's and
/// CUTLASS's split-K). Each tile (or slice) pays a fixed prologue and epilogue worth `k_overhead`
/// steps of its K loop. sms = 0: no shape dependence.
struct GemmModel {
  std::int32_t sms = 0;
  std::vector<GemmTile> tiles = std::vector<GemmTile>(1);  // one default tile (not a braced
  // list: GCC 12 warns -Wmaybe-uninitialized on it once a device holds two models)
  std::int32_t split_k_min = 0;
  double max_efficiency = 1.0;
  double k_overhead = 0.0;
  friend bool operator==(const GemmModel&, const GemmModel&) = default;
};

/// A fused attention kernel's throughput on a device: achieved over peak FLOP/s (FLOPs as the
/// kernel executes them: the causal half), forward and backward, by the sequence length its calls
/// see. Points at ascending sequence lengths, interpolated in log2(seq) and flat beyond the ends;
/// one point (seq empty) is flat everywhere. Empty: the device gives no figure for the kernel.
struct AttentionCurve {
  std::vector<double> seq;
  std::vector<double> forward, backward;
  friend bool operator==(const AttentionCurve&, const AttentionCurve&) = default;

  bool given() const noexcept { return !forward.empty(); }
  /// The efficiency at `seq_len` tokens (forward or backward); given() must hold.
  double at(double seq_len, bool backward_pass) const;
  /// One flat point.
  static AttentionCurve flat(double forward, double backward) {
    return {{}, {forward}, {backward}};
  }
};

/// One accelerator.
struct DeviceSpec {
  std::string name;
  /// Dense peak FLOP/s per precision (Precision order); 0 where the device has none.
  std::array<double, kPrecisions> peak_flops{};
  /// Of the datasheet's boost clock, what the tensor cores hold under a training load: below 1
  /// when a power cap throttles them (Grand Teton's 500 W H100s). Scales the peaks the GEMMs and
  /// attention run against, not memory traffic, nor the peak utilisation is reported against.
  double clock_scale = 1.0;
  double memory_bytes = 0.0;
  /// What the CUDA context holds on the device, outside PyTorch's caching allocator: the
  /// driver's context and the modules a training process loads into it (PyTorch's, NCCL's,
  /// cuBLAS's kernels under CUDA's lazy loading). The NCCL buffers a layout needs are the
  /// system's (SystemConfig::nccl, model/outside_allocator.hpp). 0: not modelled.
  double context_bytes = 0.0;
  /// Share of memory_bytes kept back from a run instead of the modelled context and NCCL
  /// buffers (--memory-reserve, [device] memory_reserve): a flat share where the user knows
  /// better than the model, or for systems whose NCCL the preset does not describe. Unset: the
  /// modelled memory outside the allocator (usable_memory_bytes in model/outside_allocator.hpp).
  std::optional<double> memory_reserve;
  double memory_bandwidth = 0.0;   ///< HBM bytes/s; 0 = not given (flat model only)
  double memory_efficiency = 1.0;  ///< achieved fraction of memory_bandwidth when streaming
  /// The fraction the experts' grouped GEMMs reach where their operands' traffic bounds them (few
  /// rows per expert against its weight): measured on torch._grouped_mm, closer to the peak than
  /// element-wise kernels stream. 0 = memory_efficiency. Other GEMMs keep memory_efficiency,
  /// which the dense GEMM model was fitted with.
  double gemm_memory_efficiency = 0.0;
  double gemm_streaming() const noexcept {
    return gemm_memory_efficiency > 0.0 ? gemm_memory_efficiency : memory_efficiency;
  }
  double kernel_overhead_s = 0.0;  ///< added to every kernel launch
  /// Host time per pipeline step (one op of the table) that no kernel carries: the runtime's
  /// schedule loop, building and posting the step's sends and receives, and the launch gap
  /// after a synchronisation, when the host cannot run ahead of the GPU. A preset constant
  /// with its source; 0 = none.
  double step_overhead_s = 0.0;
  /// The host's time to issue one kernel through the framework (Python, PyTorch's dispatcher,
  /// the launch): a pass whose kernels run faster than the host issues them runs at the host's
  /// pace (kernels × host_launch_s). 0 = the host always runs ahead.
  double host_launch_s = 0.0;
  /// How much slower compute runs while a communication kernel runs beside it on the same GPU
  /// (NCCL's kernels take SMs and memory bandwidth): 0.1 = a pass takes 10% longer for the time
  /// it overlaps a transfer or collective of its device. 0 = no interference.
  double comm_slowdown = 0.0;
  /// Of its rate, what DeepEP's (or HybridEP's) all-to-all reaches in a step that runs it beside
  /// another pass's compute (Megatron-Core's combined 1F1B, DualPipe's F&B pairs): its kernels
  /// share the SMs and memory with that compute and wait for peers that compute too. NCCL's
  /// all-to-all keeps its rate: no measurement of it beside compute. 1 = as fast as alone.
  double overlapped_deepep_efficiency = 1.0;
  /// The FLOP-proportional model: when set, every matrix-multiply FLOP runs at
  /// peak × flat_efficiency, and memory-bound operators and launches cost nothing.
  std::optional<double> flat_efficiency;
  GemmModel gemm;
  /// FP8 tensor-core GEMMs (an FP8 model's layer linears), against the FP8 peak: the same tiles
  /// and multiprocessors, their own max_efficiency and k_overhead ([device.gemm_fp8]; the BF16
  /// model's when not given).
  GemmModel gemm_fp8;
  /// MXFP8 GEMMs (block-scaled: 1×32 blocks, E8M0 scales), against the FP8 peak, where the
  /// device's tensor cores run them (Blackwell, compute capability 10.x): the same tiles, their
  /// own max_efficiency and k_overhead ([device.gemm_mxfp8]). Empty: the device has none, and a
  /// job with the mxfp8 recipe is refused.
  std::optional<GemmModel> gemm_mxfp8;
  /// NVFP4 GEMMs (E2M1 with an E4M3 scale per 16 elements), against the FP4 peak, where the
  /// device's tensor cores run them (Blackwell): the same tiles, their own max_efficiency and
  /// k_overhead ([device.gemm_nvfp4]). Empty: a job with the nvfp4 recipe is refused.
  std::optional<GemmModel> gemm_nvfp4;
  /// CUDA compute capability (8.0 A100, 9.0 H100/H200/H800); 0: not given. Stacks choose their
  /// attention kernel by it (model/stack.hpp: Transformer Engine prefers cuDNN from 9.0 on).
  double compute_capability = 0.0;
  /// Each fused attention kernel's throughput on this device (AttentionKernel order); a kernel
  /// the device gives no figure for cannot run on it.
  std::array<AttentionCurve, kAttentionKernels> attention{};
  /// cuDNN's fused attention in FP8 (Transformer Engine's fp8_dpa: Q, K, V and the backward's
  /// dO in E4M3) against the same kernel in BF16 on this device: the ratio of their throughputs,
  /// forward and backward, by sequence length ([device.attention.cudnn_fp8] forward_speedup and
  /// backward_speedup). Empty: the device gives no figure, and a job with fp8_attention is
  /// refused.
  AttentionCurve cudnn_fp8_speedup;
  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;

  /// Dense peak in `p` (0 if the device has none).
  double peak(Precision p) const noexcept { return peak_flops[static_cast<std::size_t>(p)]; }
  const AttentionCurve& attention_of(AttentionKernel k) const noexcept {
    return attention[static_cast<std::size_t>(k)];
  }
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

/// The host memory GPUs offload activations to, and the link a copy crosses: PCIe through a
/// switch shared by a pair of GPUs on x86 servers (DGX A100/H100/B200), NVLink-C2C to a Grace CPU
/// shared by its two GPUs on GB200/GB300 trays. Copies are cudaMemcpyAsync between device memory
/// and pinned host memory, run by the copy engines (no SMs taken).
struct HostSpec {
  /// Host memory per host (SystemConfig::host_size() GPUs); 0: not modelled, and a job that
  /// offloads is refused on this system.
  double memory_bytes = 0.0;
  /// Bytes per second one host link carries in each direction, as pinned copies achieve it
  /// (device-to-host and host-to-device run over separate directions of the link).
  double bandwidth = 0.0;
  /// GPUs behind one host link (its bandwidth is shared among their copies).
  std::int32_t gpus_per_link = 1;
  double latency_s = 0.0;  ///< per copy (the driver's and the copy engine's start)
  /// The GPU's traffic to other nodes crosses its host link too: GPUDirect RDMA moves it between
  /// GPU memory and the NIC through the GPU's own PCIe port, the port its copies cross where one
  /// GPU stands behind each link (x86 DGX nodes, a NIC beside each GPU: DGX H100 User Guide
  /// §1.2.3, Table 6). So offload copies and inter-node sends share it (PipeOffload §4.4). Only
  /// with gpus_per_link = 1: a link shared by GPUs is their switch's uplink to the CPU, which
  /// GPU-to-NIC traffic does not cross.
  bool carries_nic = false;
  /// Compute on the device runs 1 + h2d_slowdown times longer while a copy from host memory to
  /// it runs (the copy engine's writes contend with the SMs for the memory system): 0.0879 for
  /// a BF16 GEMM beside a 1 GiB pinned copy on an H200, 0.0031 the other way, which is left out
  /// (data/gpu/h200-sxm-hostlink.csv). 0: not modelled.
  double h2d_slowdown = 0.0;
  friend bool operator==(const HostSpec&, const HostSpec&) = default;

  bool modelled() const noexcept { return memory_bytes > 0.0 && bandwidth > 0.0; }
};

/// What NCCL builds on this system, as its logs print it after a communicator's init
/// (NCCL_DEBUG=INFO: "N coll channels, N nvls channels, N p2p channels, N p2p channels per
/// peer"): the channels whose buffers a communicator holds on each GPU, outside PyTorch's
/// caching allocator (model/outside_allocator.hpp sizes them). NCCL derives these counts from
/// the topology it detects, so a preset takes them from published logs of its system. All 0: the
/// preset does not describe its NCCL, and runs on it keep a flat --memory-reserve instead.
struct NcclSpec {
  /// A collective's ring channels over a communicator inside one node (NVLink or PCIe).
  std::int32_t channels = 0;
  /// A collective's ring channels over a communicator that spans nodes.
  std::int32_t inter_channels = 0;
  /// NVLink SHARP channels (NCCL's NVLS algorithm; 0: the node has no multicast switch).
  std::int32_t nvls_channels = 0;
  /// Send/receive channels to each peer on the same node (all-to-all, pipeline sends).
  std::int32_t p2p_channels_per_peer = 0;
  /// Send/receive channels of a communicator that spans nodes: they size the network's shared
  /// send/receive buffers.
  std::int32_t inter_p2p_channels = 0;
  friend bool operator==(const NcclSpec&, const NcclSpec&) = default;

  bool modelled() const noexcept { return channels > 0; }
};

/// A modelled cluster.
struct SystemConfig {
  std::string name;
  std::string source;       ///< where the numbers come from, for reports
  std::string description;  ///< one line of what it is (`pipetab list systems`)
  DeviceSpec device;
  std::int32_t devices_per_node = 8;
  /// Nodes in the cluster; 0 = as many as a run needs.
  std::int64_t nodes = 0;
  Topology topology = Topology::Switched;
  /// GPUs per host (a server, or an NVL72 compute tray of 4 GPUs and 2 Grace CPUs) where one
  /// node's switch joins several hosts: a node is then a scale-up domain (a rack of 18 trays
  /// whose NVLink switches join its 72 GPUs). 0: one host per node (a DGX).
  std::int32_t devices_per_host = 0;
  LinkSpec intra;  ///< within a node (Chain: every hop)
  LinkSpec inter;  ///< between nodes
  HostSpec host;   ///< what activation offload copies to ([host]; not modelled by default)
  NcclSpec nccl;   ///< NCCL's channels on this system ([nccl]; not modelled by default)

  /// GPUs per host: devices_per_host, or the node's where a host is the node.
  std::int32_t host_size() const noexcept {
    return devices_per_host > 0 ? devices_per_host : devices_per_node;
  }
};

/// The GPUs of each node a job of `job_gpus` GPUs runs on (Switched). Where a node is one host,
/// the job fills whole nodes in rank order: devices_per_node. Where a node's switch spans hosts
/// (an NVL72 rack), the scheduler hands out whole hosts, spread evenly over the fewest nodes
/// that hold them (Slurm's topology/block plugin, with which NVL72 clusters are scheduled: a job
/// asks for segments of equal size inside one block, `--segment`): 256 GPUs on racks of 72 run
/// as 4 × 64, so an expert-parallel group of 64 stays on NVLink, as the recipes that run them
/// assume (reference blackwell-runs.md: EP 64 with NVLINK_DOMAIN_SIZE 72).
std::int64_t gpus_per_node(const SystemConfig& system, std::int64_t job_gpus);

/// One link of the network, one direction (its name: Network::link_name).
struct NetworkLink {
  double bandwidth = 0.0;
};

/// The links of a system running `devices` pipeline devices, and the routes between them. A
/// pipeline device is one tensor-parallel rank of a stage (its group's other ranks move their
/// own equal shares in parallel over their own links). With `gpus_per_device` GPUs between
/// consecutive pipeline devices (tensor × data parallel, in Megatron-LM's rank order: tensor
/// fastest, then data, then pipeline), device d sits on node d·gpus_per_device / G, where G =
/// gpus_per_node(system, devices · gpus_per_device).
class Network {
 public:
  Network(const SystemConfig& system, std::int32_t devices, std::int32_t gpus_per_device = 1);

  const std::vector<NetworkLink>& links() const noexcept { return links_; }
  /// A link's name for traces and reports, e.g. "dev3 nic out" (made when asked: plan builds a
  /// network for every layout it checks and names no link).
  std::string link_name(std::size_t link) const;
  std::int32_t devices() const noexcept { return devices_; }
  const SystemConfig& system() const noexcept { return system_; }
  /// The GPUs of each node the run occupies (gpus_per_node).
  std::int64_t node_gpus() const noexcept { return node_gpus_; }

  /// The node a pipeline device is on (Switched; a chain has none: 0).
  std::int64_t node_of(std::int32_t device) const;
  /// Appends the links of the route from one device to another to `links` and returns the
  /// route's latency: α of the link class (Switched), or α per hop (Chain).
  double append_route(std::int32_t from, std::int32_t to, std::vector<std::int32_t>& links) const;
  /// The link class a route between two devices runs over: inter between nodes, else intra.
  const LinkSpec& route_class(std::int32_t from, std::int32_t to) const;
  /// A device's links to and from its node's switch, and to and from the inter-node fabric
  /// (Switched only).
  std::int32_t port_up(std::int32_t device) const;
  std::int32_t port_down(std::int32_t device) const;
  std::int32_t nic_out(std::int32_t device) const;
  std::int32_t nic_in(std::int32_t device) const;
  /// Appends the links of traffic between nodes sent by `from` and received by `to` (one device
  /// for one side of a ring step): the sender's NIC out and the receiver's NIC in, and their
  /// host links in the same directions where those carry NIC traffic (HostSpec::carries_nic).
  void append_nic(std::int32_t from, std::int32_t to, std::vector<std::int32_t>& links) const;
  /// A device's link to its host memory and back (where the system models a host: -1 else),
  /// after every other link. A device stands for gpus_per_device GPUs: where they fill whole
  /// host links, its copies share its own link with its siblings' (HostSpec::bandwidth /
  /// gpus_per_link each); where a link is shared by several devices' GPUs (pure pipeline
  /// parallelism: consecutive stages behind one PCIe switch), those devices share one link.
  std::int32_t host_out(std::int32_t device) const;
  std::int32_t host_in(std::int32_t device) const;
  /// Pipeline devices whose copies share one host link (1 where each has its own).
  std::int32_t devices_per_host_link() const noexcept { return devices_per_host_link_; }
  /// The pipeline devices whose copies share `device`'s host link: devices_per_host_link, or
  /// fewer on the last link where the devices do not fill it.
  std::int32_t devices_on_host_link(std::int32_t device) const noexcept {
    const std::int32_t first = device / devices_per_host_link_ * devices_per_host_link_;
    return std::min(devices_per_host_link_, devices_ - first);
  }

 private:
  SystemConfig system_;
  std::int32_t devices_;
  std::int32_t gpus_per_device_;
  std::int64_t node_gpus_;
  std::vector<NetworkLink> links_;
  std::int32_t host_base_ = -1;  // the first host link (-1: none)
  std::int32_t devices_per_host_link_ = 1;
};

}  // namespace pipetab
