// Activation bytes of a transformer layer (Korthikanti et al. 2022). Internal to model/.
#pragma once

#include "dims.hpp"

namespace pipetab::detail {

struct LayerActivation {
  double total = 0.0;      ///< bytes one layer holds for one microbatch, per device
  double attention = 0.0;  ///< of which the attention core (freed by the input gradient)
};

LayerActivation layer_activation_bytes(const TransformerConfig& m, const Dims& d);

}  // namespace pipetab::detail
