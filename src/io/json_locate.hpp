// Private to io/: parsing JSON for pipetab's readers (positions in errors, duplicate keys and
// deep nesting refused), and the position of a value inside JSON text, by path, for error
// messages (nlohmann's DOM does not keep positions).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pipetab::io::detail {

/// One step of a path: an object key, or an array index (key empty).
struct JsonStep {
  std::string key;
  std::int64_t index = -1;
  int occurrence = 1;  ///< the n-th member with this key (to point at a duplicate)
};
using JsonPath = std::vector<JsonStep>;

/// "an object", "an array", "a string", "a boolean", "null", "a number": for "expected X, got Y".
const char* json_type_name(const nlohmann::json& value);

/// "rows[2][5]", "placement[0]", "(top level)".
std::string to_string(const JsonPath& path);

/// Byte offset of the value at `path` (of the key itself for the last step when `at_key`) in
/// well-formed JSON `text`; the offset of the deepest value found if the path does not exist.
std::size_t locate(std::string_view text, const JsonPath& path, bool at_key = false);

/// How deep pipetab's JSON readers let arrays and objects nest. A table needs 4 levels and a
/// results row 1; 64 leaves room for any `source.params` a tool writes while keeping a reader
/// (and any recursive walk of the document) far from the stack's end: 150,000 nested arrays
/// overflowed it before this limit existed.
inline constexpr int max_json_depth = 64;

/// Byte offset of the first `[` or `{` in `text` that opens a level deeper than `max_depth`
/// (strings skipped), or std::string_view::npos when there is none. One linear pass, no
/// recursion, so it is safe on any input and runs before the parser sees the text.
std::size_t too_deep(std::string_view text, int max_depth = max_json_depth);

/// `text` parsed as JSON. Throws ParseError naming `file`, the line and the column: for text that
/// is not JSON ("invalid JSON: " and nlohmann's reason), for a key that appears twice in one
/// object (at the second: the DOM would keep only the last), and for nesting deeper than
/// max_json_depth (`depth_hint` says how deep the format needs to go, as "a pipetab table needs
/// 4"), which is checked before the parser sees the text.
nlohmann::json parse_json(std::string_view text, const std::string& file,
                          std::string_view depth_hint);

}  // namespace pipetab::io::detail
