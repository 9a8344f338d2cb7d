// Private to io/: the position of a value inside JSON text, by path, for error messages
// (nlohmann's DOM does not keep positions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipetab::io::detail {

/// One step of a path: an object key, or an array index (key empty).
struct JsonStep {
  std::string key;
  std::int64_t index = -1;
  int occurrence = 1;  ///< the n-th member with this key (to point at a duplicate)
};
using JsonPath = std::vector<JsonStep>;

/// "rows[2][5]", "placement[0]", "(top level)".
std::string to_string(const JsonPath& path);

/// Byte offset of the value at `path` (of the key itself for the last step when `at_key`) in
/// well-formed JSON `text`; the offset of the deepest value found if the path does not exist.
std::size_t locate(std::string_view text, const JsonPath& path, bool at_key = false);

}  // namespace pipetab::io::detail
