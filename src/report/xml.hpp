// XML text escaping shared by the SVG writers of reports/ (plots and timelines).
#pragma once

#include <string>
#include <string_view>

namespace pipetab::report_detail {

/// `text` escaped for XML content and attributes, and always well-formed: bytes that are not
/// UTF-8 and control characters XML 1.0 forbids become U+FFFD (labels may come from user files).
std::string xml(std::string_view text);

}  // namespace pipetab::report_detail
