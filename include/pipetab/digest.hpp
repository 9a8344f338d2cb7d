// A 64-bit content digest (FNV-1a) for telling whether inputs or output rows changed since a
// sweep wrote them. Not a cryptographic hash: it guards against edits and stale inputs, not
// against an adversary forging a collision.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace pipetab {

/// FNV-1a, 64-bit (Fowler, Noll, Vo; parameters from the IETF draft
/// draft-eastlake-fnv: offset basis 14695981039346656037, prime 1099511628211). Byte-wise,
/// so a digest fed in pieces equals the digest of the pieces concatenated.
class Digest {
 public:
  Digest& add(std::string_view bytes) {
    for (const char c : bytes) {
      state_ ^= static_cast<unsigned char>(c);
      state_ *= 1099511628211ULL;
    }
    return *this;
  }
  /// Adds `bytes` with its length first, so that ("ab","c") and ("a","bc") differ.
  Digest& field(std::string_view bytes) {
    add(fmt::format("{}:", bytes.size()));
    return add(bytes);
  }
  std::uint64_t value() const { return state_; }
  /// 16 lowercase hex digits.
  std::string hex() const { return fmt::format("{:016x}", state_); }

 private:
  std::uint64_t state_ = 14695981039346656037ULL;
};

}  // namespace pipetab
