// libFuzzer target: the results reader (CSV with a header row, or JSON Lines) that `plot` and
// `sweep --resume` use. Whatever it accepts has a source line per row, in increasing order, and
// distinct column names.
#include <cstdint>
#include <string_view>

#include "pipetab/error.hpp"
#include "pipetab/io/data_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto table = pipetab::io::parse_data_table(text, "fuzz.csv");
    if (table.lines.size() != table.rows.size()) __builtin_trap();
    for (std::size_t i = 1; i < table.lines.size(); ++i) {
      if (table.lines[i] <= table.lines[i - 1]) __builtin_trap();
    }
    for (const auto& row : table.rows)
      (void)row.cells(table.columns.size());
    for (std::size_t c = 0; c < table.columns.size(); ++c) {
      if (table.column(table.columns[c]) != static_cast<int>(c)) __builtin_trap();
    }
  } catch (const pipetab::Error&) {
  }
  return 0;
}
