// Rank placement (docs/design.md §10): which ranks of a layout share a node, in one function. The
// order is Megatron-Core's (parallel_state.py's RankGenerator, order "tp-cp-ep-dp-pp"), which
// Llama 3's 4D parallelism and torchtitan's device mesh follow too: tensor parallel fastest, then
// context, then data, then pipeline, so that rank = ((p·DP + d)·CP + c)·TP + t; the experts'
// ranks fold into the same TP × CP × DP ranks of a stage in the order ETP, EP, EDP (Megatron-
// Core's expert rank generator, "tp-ep-dp-pp" with ETP for TP; arXiv 2504.14960 §3). Every group
// a collective runs over — TP, CP, DP, FSDP's shard, HSDP's replicas, EP, ETP, EDP — is a set of
// ranks a fixed stride apart, and how many of them share the first one's node is what decides
// which links the collective crosses (parallel/collective.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "pipetab/names.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab {

/// The groups a collective of a run runs over.
enum class CollectiveGroup : std::uint8_t {
  Tensor,        ///< TP: TP consecutive ranks
  Context,       ///< CP: the same TP rank of each CP rank (TP apart)
  Expert,        ///< EP: a MoE layer's experts' ranks (ETP apart)
  ExpertTensor,  ///< ETP: the ranks one expert's matrices are split over (consecutive)
  Gradient,      ///< DP × CP: a stage's dense gradients (Megatron's data-parallel group with CP)
  FsdpShard,     ///< FSDP's shard group: DP × CP, or HSDP's shard
  HsdpReplicas,  ///< HSDP: the same shard rank of each replica (TP × shard apart)
  ExpertData,    ///< EDP = TP × CP × DP / (EP × ETP): the experts' gradients (EP × ETP apart)
  ExpertShard,   ///< FSDP's shard group of the routed experts: EDP, or with HSDP EDP / replicas
};

inline constexpr std::array<std::string_view, 9> kCollectiveGroupNames{
    "tensor",     "context",       "expert",      "expert-tensor", "gradient",
    "fsdp-shard", "hsdp-replicas", "expert-data", "expert-shard"};

constexpr std::string_view to_string(CollectiveGroup g) {
  return name_of(kCollectiveGroupNames, g);
}

/// A group of ranks as the links see it: its size, and how many of its ranks share the node of
/// the rank it is seen from (all of them when the group fits in that node).
struct Group {
  std::int64_t ranks = 1;
  std::int64_t per_node = 1;
  bool spans_nodes() const { return per_node < ranks; }
  friend bool operator==(const Group&, const Group&) = default;
};

/// GPUs of a job under `layout` that share a node's switch: gpus_per_node on a switched topology
/// (system.hpp: a whole node, or the job's even share of a multi-host NVLink domain); every
/// device on a chain (where nothing leaves "the node": links are point to point).
std::int64_t node_size(const SystemConfig& system, const Layout& layout);

/// The group `kind` of pipeline device `device`'s first rank (rank device × TP × CP × DP) under
/// `layout`, on nodes of `gpus_per_node` GPUs.
Group group_of(const Layout& layout, CollectiveGroup kind, std::int64_t device,
               std::int64_t gpus_per_node);

/// The ranks of `kind` and the stride between them (the placement's rule, for tests and docs).
struct GroupShape {
  std::int64_t ranks = 1, stride = 1;
};
GroupShape group_shape(const Layout& layout, CollectiveGroup kind);

}  // namespace pipetab
