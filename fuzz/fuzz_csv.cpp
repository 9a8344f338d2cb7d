// libFuzzer target: the PyTorch CSV reader, and what a valid table must then survive; the GPU
// probe's CSV reader.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pipetab/error.hpp"
#include "pipetab/io/gemm_probe.hpp"
#include "pipetab/io/pytorch_csv.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/table/comm_order.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)pipetab::io::parse_gemm_probe(text, "probe.csv");
  } catch (const pipetab::Error&) {
  }
  try {
    const auto table = pipetab::io::read_pytorch_csv(text, "fuzz.csv");
    const auto report = pipetab::validate(table);
    if (!report.ok()) {
      // Invalid tables are reported at their cells' file positions.
      const pipetab::io::TableFile file{
          "fuzz.csv", std::string(text), table, pipetab::io::TableFormat::Csv, {}};
      for (const auto& issue : report.issues)
        (void)pipetab::io::issue_location(file, issue);
      return 0;
    }
    (void)pipetab::idealized_timing(table, pipetab::Costs{});
    (void)pipetab::activation_peaks(table);
    // A valid table round-trips: written and read back, it is the same schedule.
    const auto written = pipetab::io::write_pytorch_csv(table);
    if (!pipetab::io::read_pytorch_csv(written, "again.csv").same_schedule(table)) std::abort();
    // PyTorch's lowering of a valid table gives a communication order that checks (its
    // transfers between a pair match in order, and it runs while messages fit NCCL's buffer),
    // and its compute+comms file reads back to the same ops and order.
    if (table.comms.empty()) {
      auto lowered = table;
      lowered.comms = pipetab::pytorch_send_recv(table);
      if (pipetab::check_comm_order(lowered)) std::abort();
      if (pipetab::check_p2p(lowered, lowered.comms, {}, false)) std::abort();
      const auto comms =
          pipetab::io::read_pytorch_csv(pipetab::io::write_pytorch_comms_csv(table), "comms.csv");
      if (comms.ops != table.ops || comms.comms != lowered.comms) std::abort();
    }
  } catch (const pipetab::Error&) {
    // Bad input is reported, never a crash.
  }
  return 0;
}
