// Collectives inside a stage (tensor parallelism), costed analytically on a link class.
#pragma once

#include "pipetab/model/operators.hpp"
#include "pipetab/system/system.hpp"

namespace pipetab::cost {

/// Seconds of a ring collective over `ranks` ranks on `link`, of a buffer of `bytes` (all
/// ranks' parts together): an all-reduce is 2(p−1) steps, a reduce-scatter or an all-gather p−1
/// steps, each α plus bytes/p (an all-to-all, p−1 messages of bytes/p² each) at the link's
/// collective bandwidth (β · collective_efficiency; Thakur, Rabenseifner and Gropp 2005; NCCL's bus
/// bandwidth, nccl-tests PERFORMANCE.md). 0 for one rank.
double collective_seconds(CollectiveKind kind, double bytes, double ranks, const LinkSpec& link);

}  // namespace pipetab::cost
