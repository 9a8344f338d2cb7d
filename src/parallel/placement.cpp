#include "pipetab/parallel/placement.hpp"

#include <algorithm>
#include <limits>

namespace pipetab {

std::int64_t node_size(const SystemConfig& system, const Layout& layout) {
  if (system.topology != Topology::Switched) return std::numeric_limits<std::int64_t>::max() / 4;
  return gpus_per_node(system, layout.tp * layout.cp * layout.dp * layout.pp);
}

GroupShape group_shape(const Layout& l, CollectiveGroup kind) {
  const std::int64_t gradient = l.dp * l.cp;
  const std::int64_t shard = fsdp_shard_size(l);
  const std::int64_t edp = std::max<std::int64_t>(1, expert_data_parallel(l));
  switch (kind) {
    case CollectiveGroup::Tensor:
      return {l.tp, 1};
    case CollectiveGroup::Context:
      return {l.cp, l.tp};
    case CollectiveGroup::Expert:
      return {l.ep, l.etp};
    case CollectiveGroup::ExpertTensor:
      return {l.etp, 1};
    case CollectiveGroup::Gradient:
      return {gradient, l.tp};
    case CollectiveGroup::FsdpShard:
      return {shard, l.tp};
    case CollectiveGroup::HsdpReplicas:
      return {std::max<std::int64_t>(1, gradient / shard), l.tp * shard};
    case CollectiveGroup::ExpertData:
      return {edp, l.ep * l.etp};
    case CollectiveGroup::ExpertShard: {
      // HSDP's replicas are the outermost ranks, for the experts as for the rest: each replica
      // shards the experts over its EDP / R ranks (where R divides EDP; the lowering refuses an R
      // that does not).
      const std::int64_t replicas = l.fsdp.shard > 0 ? gradient / shard : 1;
      const std::int64_t ranks = replicas > 1 && edp % replicas == 0 ? edp / replicas : edp;
      return {ranks, l.ep * l.etp};
    }
  }
  return {};
}

Group group_of(const Layout& layout, CollectiveGroup kind, std::int64_t device,
               std::int64_t gpus_per_node) {
  const GroupShape shape = group_shape(layout, kind);
  const std::int64_t g = std::max<std::int64_t>(1, gpus_per_node);
  const std::int64_t base = device * layout.tp * layout.cp * layout.dp;
  // The members k·stride from the base that are on the base's node: k·stride < the node's end.
  const std::int64_t room = (base / g + 1) * g - base;  // ranks from the base to its node's end
  const std::int64_t same = std::min(shape.ranks, (room + shape.stride - 1) / shape.stride);
  return {shape.ranks, std::max<std::int64_t>(1, same)};
}

}  // namespace pipetab
