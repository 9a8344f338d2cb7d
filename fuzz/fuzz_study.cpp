// libFuzzer target: the study TOML reader, and the expansion of what it accepts. A study that
// parses must expand to its configurations without a crash, and each configuration's index must
// read back. Table files a study names are looked up relative to the working directory; the
// fuzzer runs with no such files, so those entries fail cleanly as a missing file.
#include <cstdint>
#include <string_view>

#include "pipetab/error.hpp"
#include "pipetab/study/study.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto study = pipetab::parse_study(text, "fuzz.toml");
    const pipetab::ConfigurationSpace space(study);
    // The first and last few configurations: the expansion's corners, without walking a grid
    // of up to 2^26 points per input.
    const std::size_t n = space.size();
    for (std::size_t i = 0; i < n && i < 4; ++i) {
      for (const std::size_t index : {i, n - 1 - i}) {
        if (space[index].index != static_cast<std::int64_t>(index)) __builtin_trap();
      }
    }
  } catch (const pipetab::Error&) {
  }
  return 0;
}
