// Reading a model's [transformer] keys from any TOML table: the model files and the measured-run
// files (study/measurements.cpp) share it. Internal to the library.
#pragma once

#include <string>

#include "toml_reader.hpp"

#include "pipetab/model/transformer.hpp"

namespace pipetab::io {

/// The TransformerConfig of table `t`, whose keys are reported as `prefix.key`. Unknown keys,
/// wrong types, out-of-range values and impossible shapes throw ParseError.
TransformerConfig read_transformer(const Reader& r, const toml::table& t,
                                   const std::string& prefix);

}  // namespace pipetab::io
