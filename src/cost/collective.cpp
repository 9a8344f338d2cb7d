#include "pipetab/cost/collective.hpp"

namespace pipetab::cost {

double collective_seconds(CollectiveKind kind, double bytes, double ranks, const LinkSpec& link) {
  if (ranks <= 1.0 || bytes <= 0.0) return 0.0;
  const double steps = (kind == CollectiveKind::AllReduce ? 2.0 : 1.0) * (ranks - 1.0);
  const double bandwidth = link.bandwidth * link.collective_efficiency;
  // An all-to-all sends each of the other ranks 1/p of its own part (bytes/p): p−1 messages of
  // bytes/p² each.
  const double per_step = kind == CollectiveKind::AllToAll ? bytes / ranks / ranks : bytes / ranks;
  return steps * (link.latency_s + per_step / bandwidth);
}

}  // namespace pipetab::cost
