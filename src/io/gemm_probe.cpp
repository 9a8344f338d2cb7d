#include "pipetab/io/gemm_probe.hpp"

#include <charconv>
#include <cmath>

#include "text.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/numeric.hpp"

namespace pipetab::io {

const char* to_string(GemmLayout layout) {
  switch (layout) {
    case GemmLayout::Forward:
      return "forward";
    case GemmLayout::InputGrad:
      return "input_grad";
    case GemmLayout::WeightGrad:
      return "weight_grad";
  }
  return "forward";
}

namespace {

struct Field {
  std::string_view text;
  int column = 1;  // 1-based
};

std::vector<Field> split(std::string_view line) {
  std::vector<Field> fields;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    const std::size_t end = comma == std::string_view::npos ? line.size() : comma;
    fields.push_back({line.substr(start, end - start), static_cast<int>(start) + 1});
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

class ProbeLineReader {
 public:
  ProbeLineReader(const std::string& file, int line) : file_(file), line_(line) {}

  [[noreturn]] void fail(const Field& f, std::string_view name, const std::string& what) const {
    throw ParseError(file_, line_, f.column,
                     fmt::format("{} {}: {}", name, detail::quoted(f.text), what));
  }

  double dimension(const Field& f, std::string_view name) const {
    std::int64_t v = 0;
    const auto* end = f.text.data() + f.text.size();
    const auto [p, ec] = std::from_chars(f.text.data(), end, v);
    if (ec != std::errc{} || p != end || v <= 0 || v > (std::int64_t{1} << 40))
      fail(f, name, "expected a positive integer");
    return static_cast<double>(v);
  }

  double seconds(const Field& f) const {
    double v = 0.0;
    const auto* end = f.text.data() + f.text.size();
    const auto [p, ec] = parse_double(f.text.data(), end, v);
    if (ec != std::errc{} || p != end || !std::isfinite(v) || v <= 0.0)
      fail(f, "seconds", "expected a positive number of seconds");
    // 4e-320 (a subnormal) calibrated "successfully" with no effect: no GEMM runs in less than
    // a nanosecond, so such a time is a unit or export error.
    if (v < kMinMeasuredSeconds)
      fail(f, "seconds",
           fmt::format("expected a measured time of at least {:g} s (a nanosecond)",
                       kMinMeasuredSeconds));
    return v;
  }

 private:
  const std::string& file_;
  int line_;
};

}  // namespace

GemmProbe parse_gemm_probe(std::string_view text, const std::string& file) {
  GemmProbe probe;
  probe.file = file;
  // A UTF-8 byte-order mark (spreadsheet exports write one), as the other CSV readers accept.
  text.remove_prefix(detail::byte_order_mark(text));
  int line_number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t newline = text.find('\n', start);
    std::string_view line = text.substr(
        start, newline == std::string_view::npos ? std::string_view::npos : newline - start);
    start = newline == std::string_view::npos ? text.size() : newline + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (line.starts_with("#")) {
      constexpr std::string_view kDevice = "# device,";
      if (line.starts_with(kDevice)) {
        const auto rest = line.substr(kDevice.size());
        probe.device = std::string(rest.substr(0, rest.find(',')));
      }
      continue;
    }
    const auto fields = split(line);
    const ProbeLineReader r(file, line_number);
    if (fields[0].text == "memory" || fields[0].text == "launch") continue;
    if (fields[0].text != "gemm") {
      r.fail(fields[0], "kind", "expected gemm, memory or launch (or a '#' comment)");
    }
    if (fields.size() != 6 && fields.size() != 7) {
      throw ParseError(file, line_number, 1,
                       fmt::format("a gemm row has 6 or 7 fields (gemm,layout,m,n,k,seconds"
                                   "[,tflops]), not {}",
                                   fields.size()));
    }
    GemmSample s;
    s.line = line_number;
    bool known = false;
    for (const auto layout : kGemmLayouts) {
      if (fields[1].text == to_string(layout)) {
        s.layout = layout;
        known = true;
      }
    }
    if (!known) r.fail(fields[1], "layout", "expected forward, input_grad or weight_grad");
    s.shape.m = r.dimension(fields[2], "m");
    s.shape.n = r.dimension(fields[3], "n");
    s.shape.k = r.dimension(fields[4], "k");
    s.seconds = r.seconds(fields[5]);
    probe.gemms.push_back(s);
  }
  return probe;
}

GemmProbe read_gemm_probe(const std::string& path) {
  auto probe = parse_gemm_probe(read_file(path), path);
  if (probe.gemms.empty()) {
    throw Error(
        fmt::format("{}: no gemm rows (expected the output of bench/gpu/device_probe)", path));
  }
  return probe;
}

}  // namespace pipetab::io
