// What a study's rows depend on: the study file and every file or preset it names, each with a
// digest of its contents. A resumed sweep compares these with the ones recorded when its rows
// were written, so that rows computed from inputs that have since changed are never kept.
#pragma once

#include <string>
#include <vector>

#include "pipetab/study/study.hpp"

namespace pipetab {

/// One input of a study: what it is ("study", "table", "system", "model"), where it comes from
/// (a path, or "preset NAME" for a built-in), and the digest of its contents.
struct StudyInput {
  std::string role;
  std::string source;
  std::string digest;  ///< Digest::hex() of the contents
  friend bool operator==(const StudyInput&, const StudyInput&) = default;
};

/// The study file (when it was read from one) and each table, system and model it names, in
/// that order, each listed once. Reads the files; throws Error if one cannot be read.
std::vector<StudyInput> study_inputs(const Study& study);

}  // namespace pipetab
