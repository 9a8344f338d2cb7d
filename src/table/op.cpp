#include "pipetab/table/op.hpp"

#include <fmt/format.h>

namespace pipetab {

char kind_letter(PassKind kind) noexcept {
  switch (kind) {
    case PassKind::F:
      return 'F';
    case PassKind::B:
      return 'B';
    case PassKind::I:
      return 'I';
    case PassKind::W:
      return 'W';
    case PassKind::None:
      break;
  }
  return '?';
}

std::string to_string(const Pass& pass) {
  return fmt::format("{}{}{}", pass.stage, kind_letter(pass.kind), pass.microbatch);
}

std::string to_string(const Op& op) {
  if (!op.is_pair()) return to_string(op.first());
  return fmt::format("({};{})OVERLAP_F_B", to_string(op.first()), to_string(op.second()));
}

}  // namespace pipetab
