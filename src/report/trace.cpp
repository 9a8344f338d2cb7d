#include "pipetab/report/trace.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <unistd.h>
#if PIPETAB_GZIP
#include <zlib.h>
#endif

#include "pipetab/error.hpp"
#include "pipetab/io/table_file.hpp"

namespace pipetab {
namespace {

// Where the trace's bytes go: a string (chrome_trace), a file, or a gzip stream into a file.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(std::string_view bytes) = 0;
};

class StringSink final : public Sink {
 public:
  explicit StringSink(std::string& out) : out_(out) {}
  void write(std::string_view bytes) override { out_ += bytes; }

 private:
  std::string& out_;
};

class FileSink final : public Sink {
 public:
  FileSink(std::FILE* file, const std::string& path) : file_(file), path_(path) {}
  void write(std::string_view bytes) override {
    if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
      throw Error(fmt::format("{}: write error: {}", path_, std::strerror(errno)));
    }
  }

 private:
  std::FILE* file_;
  const std::string& path_;
};

#if PIPETAB_GZIP
// gzip (RFC 1952) through zlib's deflate: windowBits 15 + 16 asks for the gzip wrapper, whose
// header zlib writes with mtime 0 and no name, so the same trace compresses to the same bytes.
class GzipSink final : public Sink {
 public:
  GzipSink(std::FILE* file, const std::string& path) : file_(file), path_(path) {
    if (deflateInit2(&stream_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
        Z_OK) {
      throw Error(fmt::format("{}: cannot start gzip compression", path_));
    }
  }
  ~GzipSink() override { deflateEnd(&stream_); }
  GzipSink(const GzipSink&) = delete;
  GzipSink& operator=(const GzipSink&) = delete;
  void write(std::string_view bytes) override { deflate_all(bytes, Z_NO_FLUSH); }
  void finish() { deflate_all({}, Z_FINISH); }

 private:
  void deflate_all(std::string_view bytes, int flush) {
    // zlib takes a non-const pointer but does not write through next_in.
    stream_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
    stream_.avail_in = static_cast<uInt>(bytes.size());
    int status = Z_OK;
    do {
      stream_.next_out = out_;
      stream_.avail_out = sizeof out_;
      status = deflate(&stream_, flush);
      if (status == Z_STREAM_ERROR) throw Error(fmt::format("{}: gzip compression failed", path_));
      const auto produced = sizeof out_ - stream_.avail_out;
      if (std::fwrite(out_, 1, produced, file_) != produced) {
        throw Error(fmt::format("{}: write error: {}", path_, std::strerror(errno)));
      }
    } while (stream_.avail_out == 0 || (flush == Z_FINISH && status != Z_STREAM_END));
  }

  z_stream stream_{};
  Bytef out_[1 << 16];
  std::FILE* file_;
  const std::string& path_;
};
#endif

// The trace's clock: ticks of 1/1024 µs (0.98 ns). Every time goes through this one rounding;
// durations are differences of ticks. A tick count is written as its exact decimal (n/1024 has
// at most ten decimals), which a JSON reader parses back exactly, so that sums of timestamps
// and durations are exact in doubles too (trace.hpp).
constexpr double kTicksPerSecond = 1e6 * 1024;
std::int64_t ticks(double seconds) {
  return seconds > 0.0 ? std::llround(seconds * kTicksPerSecond) : 0;
}

// A tick count printed as microseconds.
struct Micros {
  std::int64_t ticks;
};

// A short label of a compute op: "F3", "B0", "F3&B1".
std::string op_label(const Op& op) {
  std::string label;
  for (const Pass& p : op.passes()) {
    if (!label.empty()) label += '&';
    label += fmt::format("{}{}", kind_letter(p.kind), p.microbatch);
  }
  return label;
}

// `text` as a JSON string's contents: names come from system files (link names) and may hold
// quotes or control characters.
std::string json_escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += fmt::format("\\u{:04x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace
}  // namespace pipetab

template <>
struct fmt::formatter<pipetab::Micros> : fmt::formatter<std::string_view> {
  auto format(pipetab::Micros m, format_context& ctx) const {
    // 1/1024 = 0.0009765625: the fraction's ten decimals are (ticks mod 1024) × 9765625.
    const auto whole = m.ticks / 1024;
    auto fraction = (m.ticks % 1024) * 9765625;
    if (fraction == 0) return fmt::format_to(ctx.out(), "{}", whole);
    int digits = 10;
    while (fraction % 10 == 0) {
      fraction /= 10;
      --digits;
    }
    return fmt::format_to(ctx.out(), "{}.{:0{}}", whole, fraction, digits);
  }
};

namespace pipetab {
namespace {

// Events, comma-separated, through a 1 MiB buffer into the sink.
class TraceWriter {
 public:
  explicit TraceWriter(Sink& sink) : sink_(sink) { buffer_.reserve(kFlush + 4096); }
  void raw(std::string_view text) {
    buffer_ += text;
    bytes_ += text.size();
    if (buffer_.size() >= kFlush) flush();
  }
  template <class... Args>
  void event(fmt::format_string<Args...> format, Args&&... args) {
    const auto before = buffer_.size();
    buffer_ += events_ == 0 ? "\n" : ",\n";
    fmt::format_to(std::back_inserter(buffer_), format, std::forward<Args>(args)...);
    bytes_ += buffer_.size() - before;
    ++events_;
    if (buffer_.size() >= kFlush) flush();
  }
  void flush() {
    sink_.write(buffer_);
    buffer_.clear();
  }
  std::uint64_t bytes() const { return bytes_; }
  std::int64_t events() const { return events_; }

 private:
  static constexpr std::size_t kFlush = std::size_t{1} << 20;
  Sink& sink_;
  std::string buffer_;
  std::uint64_t bytes_ = 0;
  std::int64_t events_ = 0;
};

void write_trace(TraceWriter& w, const ScheduleTable& table, const Simulation& sim) {
  const auto& g = sim.graph;
  const auto& r = sim.result;
  const auto& links = sim.network.links();
  const std::int32_t network_pid = g.devices;
  const auto start_ticks = [&](std::size_t i) { return ticks(r.start[i]); };
  const auto end_ticks = [&](std::size_t i) {
    return std::max(ticks(r.end[i]), ticks(r.start[i]));
  };
  // Where a flow binds to a compute slice: its middle, strictly inside it (unless it lasts a
  // few nanoseconds), so that neither neighbour on the track can claim the arrow.
  const auto middle_ticks = [&](std::size_t i) {
    return start_ticks(i) + (end_ticks(i) - start_ticks(i)) / 2;
  };

  w.raw("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  for (std::int32_t d = 0; d < g.devices; ++d) {
    w.event(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"device {}"}}}})", d, d);
    w.event(R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})", d,
            d);
    w.event(R"({{"ph":"M","name":"thread_name","pid":{},"tid":0,"args":{{"name":"compute"}}}})", d);
    w.event(R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":0,"args":{{"sort_index":0}}}})",
            d);
    // chrome://tracing draws a device's async send slices under this thread.
    w.event(R"({{"ph":"M","name":"thread_name","pid":{},"tid":1,"args":{{"name":"sends"}}}})", d);
    w.event(R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":1,"args":{{"sort_index":1}}}})",
            d);
  }
  w.event(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"network"}}}})",
          network_pid);
  w.event(R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})",
          network_pid, network_pid);
  // A named thread per link that carried data (chrome://tracing's rows; Perfetto names the
  // async tracks by the slices' name, which is the link's name too).
  std::vector<bool> used(links.size(), false);
  for (const auto link : g.route)
    used[static_cast<std::size_t>(link)] = true;
  for (std::size_t l = 0; l < links.size(); ++l) {
    if (!used[l]) continue;
    w.event(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}})",
            network_pid, l, json_escaped(sim.network.link_name(l)));
    w.event(
        R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
        network_pid, l, l);
  }

  for (std::int64_t n = 0; n < g.compute_nodes; ++n) {
    const auto i = static_cast<std::size_t>(n);
    const auto s = start_ticks(i), e = end_ticks(i);
    if (!g.is_table_op(n)) {
      w.event(
          R"({{"ph":"X","name":"optimizer step","cat":"optimizer","pid":{},"tid":0,"ts":{},"dur":{}}})",
          g.device[i], Micros{s}, Micros{e - s});
      continue;
    }
    const Op& op = table.ops[i];
    // Its waits for its inner exchanges are exposed communication inside it, not slowed compute.
    const double waited = i < r.waited.size() ? r.waited[i] : 0.0;
    // Its waits for copies from host memory (offload inside the passes) are its own stall.
    const double host = i < r.waited_host.size() ? r.waited_host[i] : 0.0;
    w.event(
        R"({{"ph":"X","name":"{}","cat":"{}","pid":{},"tid":0,"ts":{},"dur":{},"args":{{"op":"{}","tp_comm_s":{},"host_overhead_s":{},"comm_slowed_s":{}}}}})",
        op_label(op), kind_letter(op.first().kind), g.device[i], Micros{s}, Micros{e - s},
        json_escaped(to_string(op)), g.tp_comm_s[i] + waited - host,
        i < g.overhead_s.size() ? g.overhead_s[i] : 0.0,
        std::max(0.0, r.end[i] - r.start[i] - g.duration[i] - waited));
  }

  // Transfers: on the sender's send track (named by what it carries and where to), on every
  // link of the route, and (pipeline transfers) as a flow arrow from the producing op to the
  // consuming op.
  for (std::int64_t n = g.compute_nodes; n < g.nodes(); ++n) {
    const auto i = static_cast<std::size_t>(n);
    const auto t = static_cast<std::size_t>(n - g.compute_nodes);
    const char* kind = to_string(g.kind[t]);
    const auto to = g.receiver[t];
    const auto s = start_ticks(i), e = end_ticks(i);
    w.event(
        R"({{"ph":"b","name":"{} to dev {}","cat":"{}","id":{},"pid":{},"tid":1,"ts":{},"args":{{"stage":{},"bytes":{}}}}})",
        kind, to, kind, n, g.device[i], Micros{s}, g.stage[t], g.bytes[t]);
    w.event(R"({{"ph":"e","name":"{} to dev {}","cat":"{}","id":{},"pid":{},"tid":1,"ts":{}}})",
            kind, to, kind, n, g.device[i], Micros{e});
    for (auto k = g.route_begin[t]; k < g.route_begin[t + 1]; ++k) {
      const auto link = g.route[static_cast<std::size_t>(k)];
      const auto name = json_escaped(sim.network.link_name(static_cast<std::size_t>(link)));
      w.event(
          R"({{"ph":"b","name":"{}","cat":"link","id2":{{"local":"{}.{}"}},"pid":{},"tid":{},"ts":{},"args":{{"transfer":"{} {}->{}","bytes":{}}}}})",
          name, n, link, network_pid, link, Micros{s}, kind, g.device[i], to, g.bytes[t]);
      w.event(
          R"({{"ph":"e","name":"{}","cat":"link","id2":{{"local":"{}.{}"}},"pid":{},"tid":{},"ts":{}}})",
          name, n, link, network_pid, link, Micros{e});
    }
  }
  for (std::int64_t n = 0; n < g.compute_nodes; ++n) {
    const auto i = static_cast<std::size_t>(n);
    for (auto k = g.succ_begin[i]; k < g.succ_begin[i + 1]; ++k) {
      const auto transfer = g.succ[static_cast<std::size_t>(k)];
      if (!g.is_transfer(transfer)) continue;
      const auto t = static_cast<std::size_t>(transfer - g.compute_nodes);
      if (!is_pipeline(g.kind[t])) continue;
      const auto consumer = static_cast<std::size_t>(
          g.succ[static_cast<std::size_t>(g.succ_begin[static_cast<std::size_t>(transfer)])]);
      w.event(R"({{"ph":"s","name":"{}","cat":"flow","id":{},"pid":{},"tid":0,"ts":{}}})",
              to_string(g.kind[t]), transfer, g.device[i], Micros{middle_ticks(i)});
      w.event(R"({{"ph":"f","bp":"e","name":"{}","cat":"flow","id":{},"pid":{},"tid":0,"ts":{}}})",
              to_string(g.kind[t]), transfer, g.device[consumer], Micros{middle_ticks(consumer)});
    }
  }
  for (std::size_t d = 0; d < r.memory.size(); ++d) {
    for (const auto& point : r.memory[d]) {
      w.event(R"({{"ph":"C","name":"memory","pid":{},"ts":{},"args":{{"GB":{}}}}})", d,
              Micros{ticks(point.time_s)}, point.bytes / 1e9);
    }
  }
  w.raw("\n]}\n");
  w.flush();
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

std::string chrome_trace(const ScheduleTable& table, const Simulation& sim) {
  std::string out;
  StringSink sink(out);
  TraceWriter w(sink);
  write_trace(w, table, sim);
  return out;
}

TraceFileStats write_chrome_trace(const std::string& path, const ScheduleTable& table,
                                  const Simulation& sim) {
  // Written as every output is (io::OutputFile): a link's target, a device or FIFO in place.
  io::OutputFile output(path);
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file(std::fopen(output.write_path().c_str(), "wb"));
  if (!file) throw Error(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  TraceFileStats stats;
  stats.gzip = ends_with(path, ".gz") || ends_with(path, ".GZ");
  try {
    if (stats.gzip) {
#if PIPETAB_GZIP
      GzipSink sink(file.get(), path);
      TraceWriter w(sink);
      write_trace(w, table, sim);
      sink.finish();
      stats.json_bytes = w.bytes();
      stats.events = w.events();
#else
      throw Error(
          fmt::format("{}: this pipetab was built without zlib (PIPETAB_GZIP=OFF, as the "
                      "web build is): write the trace without .gz",
                      path));
#endif
    } else {
      FileSink sink(file.get(), path);
      TraceWriter w(sink);
      write_trace(w, table, sim);
      stats.json_bytes = w.bytes();
      stats.events = w.events();
    }
    if (std::fflush(file.get()) != 0) {
      throw Error(fmt::format("{}: write error: {}", path, std::strerror(errno)));
    }
    const long size = std::ftell(file.get());
    stats.file_bytes = size > 0 ? static_cast<std::uint64_t>(size) : 0;
    if (std::fclose(file.release()) != 0) {
      throw Error(fmt::format("{}: write error: {}", path, std::strerror(errno)));
    }
    output.commit();
  } catch (...) {
    file.reset();  // closed before `output` removes the temporary
    throw;
  }
  return stats;
}

std::string trace_size_warning(const std::string& path, const TraceFileStats& stats) {
  if (stats.json_bytes <= kTraceWarnBytes) return "";
  return fmt::format(
      "warning: {}: the trace is {:.0f} MB of JSON ({} events){}; chrome://tracing cannot load "
      "JSON over 268 MB, 2^28 - 16 characters (gzip or not), and the Perfetto UI may run out of "
      "browser memory: open it "
      "with Perfetto's trace_processor --httpd (perfetto.dev/docs/visualization/large-traces), "
      "or simulate fewer microbatches\n",
      path, static_cast<double>(stats.json_bytes) / 1e6, stats.events,
      stats.gzip
          ? fmt::format(", {:.0f} MB compressed", static_cast<double>(stats.file_bytes) / 1e6)
          : "");
}

}  // namespace pipetab
