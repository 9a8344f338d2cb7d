// libFuzzer target: the model and system TOML readers.
#include <cstdint>
#include <string_view>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto model = pipetab::io::parse_model(text, "fuzz.toml");
    // What the reader accepts, the workload model can cut into stages or rejects cleanly.
    const std::int32_t units[] = {1, 2, 1};
    (void)pipetab::stage_work(model, units, 3);
  } catch (const pipetab::Error&) {
  }
  try {
    const auto system = pipetab::io::parse_system(text, "fuzz.toml");
    (void)pipetab::Network(system, 3);
  } catch (const pipetab::Error&) {
  }
  return 0;
}
