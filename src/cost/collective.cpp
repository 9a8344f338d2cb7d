#include "pipetab/cost/collective.hpp"

namespace pipetab::cost {

double collective_seconds(CollectiveKind kind, double bytes, double ranks, const LinkSpec& link) {
  if (ranks <= 1.0 || bytes <= 0.0) return 0.0;
  const double steps = (kind == CollectiveKind::AllReduce ? 2.0 : 1.0) * (ranks - 1.0);
  const double bandwidth = link.bandwidth * link.collective_efficiency;
  return steps * (link.latency_s + bytes / ranks / bandwidth);
}

}  // namespace pipetab::cost
