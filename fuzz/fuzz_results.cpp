// libFuzzer target: the results reader (CSV with a header row, or JSON Lines) that `plot` and
// `sweep --resume` use, and the error bars' residuals read through it. Whatever it accepts has a
// source line per row, in increasing order, and distinct column names; every residual it accepts
// is a finite positive measurement and prediction, and an interval from such residuals brackets
// nothing but finite positive times.
#include <cstdint>
#include <string_view>

#include "pipetab/error.hpp"
#include "pipetab/io/data_table.hpp"
#include "pipetab/sim/error_bar.hpp"

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
  try {
    const auto residuals = pipetab::parse_residuals(text, "fuzz.csv");
    for (const auto& r : residuals) {
      if (!(r.measured_s > 0 && r.predicted_s > 0 && r.gpus > 0)) __builtin_trap();
    }
    if (!residuals.empty()) {
      const auto& r = residuals.front();
      const auto a = pipetab::runtime_interval(1.0, r.regime, r.system, residuals, r.gpus);
      if (a.interval && !(a.interval->low_s > 0 && a.interval->low_s <= a.interval->high_s &&
                          a.interval->high_s < 1e308)) {
        __builtin_trap();
      }
      (void)pipetab::check_intervals(residuals);
    }
  } catch (const pipetab::Error&) {
  }
  return 0;
}
