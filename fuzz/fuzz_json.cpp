// libFuzzer target: the pipetab JSON table reader, and what a valid table must then survive.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pipetab/error.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/io/table_json.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto table = pipetab::io::read_table_json(text, "fuzz.json");
    const auto report = pipetab::validate(table);
    if (!report.ok()) {
      // Invalid tables are reported at their cells' file positions.
      const pipetab::io::TableFile file{
          "fuzz.json", std::string(text), table, pipetab::io::TableFormat::Json, {}};
      for (const auto& issue : report.issues)
        (void)pipetab::io::issue_location(file, issue);
      return 0;
    }
    (void)pipetab::idealized_timing(table, pipetab::Costs{});
    (void)pipetab::activation_peaks(table);
    const auto written = pipetab::io::write_table_json(table);
    const auto back = pipetab::io::read_table_json(written, "again.json");
    if (!back.same_schedule(table) || pipetab::io::write_table_json(back) != written) std::abort();
  } catch (const pipetab::Error&) {
  }
  return 0;
}
