#include "pipetab/io/table_json.hpp"

#include <array>
#include <cmath>

#include "json_locate.hpp"
#include "text.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/io/action.hpp"

namespace pipetab::io {
namespace {

using detail::JsonPath;
using detail::JsonStep;
using nlohmann::json;

constexpr std::string_view kFormat = "pipetab-table";
constexpr std::int64_t kVersion = 1;
constexpr std::int64_t kMaxStageLayers = 1000000;
constexpr std::array<std::string_view, 10> kKeys = {
    "format",       "version",      "source",    "devices",
    "stages",       "microbatches", "placement", "microbatch_pipeline",
    "stage_layers", "rows"};

JsonPath operator/(JsonPath path, std::string key) {
  path.push_back(JsonStep{std::move(key)});
  return path;
}
JsonPath operator/(JsonPath path, std::size_t index) {
  path.push_back(JsonStep{{}, static_cast<std::int64_t>(index)});
  return path;
}

class JsonTableReader {
 public:
  JsonTableReader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  ScheduleTable read(TableSource* source) {
    const json doc = parse();
    if (!doc.is_object())
      fail({}, fmt::format("expected a JSON object, got {}", detail::json_type_name(doc)));
    for (const auto& [key, value] : doc.items()) {
      bool known = false;
      for (const auto k : kKeys)
        known = known || k == key;
      if (!known) {
        fail(JsonPath{} / key,
             fmt::format("unknown key '{}' (expected: {})", key, fmt::join(kKeys, ", ")), true);
      }
    }
    const auto& format = require(doc, "format");
    if (!format.is_string() || format.get<std::string>() != kFormat) {
      fail(JsonPath{} / "format", fmt::format("expected \"{}\"", kFormat));
    }
    const auto version = integer(require(doc, "version"), JsonPath{} / "version", 0, INT32_MAX);
    if (version != kVersion) {
      fail(
          JsonPath{} / "version",
          fmt::format("unsupported version {} (this pipetab reads version {})", version, kVersion));
    }
    if (doc.contains("source")) read_source(doc["source"], source);

    ScheduleTable t;
    t.devices = static_cast<std::int32_t>(
        integer(require(doc, "devices"), JsonPath{} / "devices", 1, kMaxDevices));
    t.stages = static_cast<std::int32_t>(
        integer(require(doc, "stages"), JsonPath{} / "stages", 1, kMaxStages));
    t.microbatches = static_cast<std::int32_t>(
        integer(require(doc, "microbatches"), JsonPath{} / "microbatches", 1, kMaxMicrobatches));
    read_placement(doc, t);
    read_rows(doc, t);
    return t;
  }

 private:
  json parse() const { return detail::parse_json(text_, file_, "a pipetab table needs 4"); }

  [[noreturn]] void fail(const JsonPath& path, const std::string& message, bool at_key = false,
                         std::size_t offset = 0) const {
    const auto at = detail::locate(text_, path, at_key) + offset;
    const auto [line, column] = detail::line_column(text_, at);
    throw ParseError(
        file_, line, column,
        path.empty() ? message : fmt::format("{}: {}", detail::to_string(path), message));
  }

  const json& require(const json& object, const char* key) const {
    if (!object.contains(key)) fail({}, fmt::format("missing key '{}'", key));
    return object[key];
  }

  std::int64_t integer(const json& value, const JsonPath& path, std::int64_t lo,
                       std::int64_t hi) const {
    const auto out_of_range = [&] {
      fail(path, fmt::format("{} is out of range (expected {}..{})", value.dump(), lo, hi));
    };
    if (value.is_number_float()) {
      // Whole numbers beyond 64 bits arrive as floating point, and so does "2.0".
      const double v = value.get<double>();
      const bool whole = std::isfinite(v) && v == std::floor(v);
      if (whole && (v < static_cast<double>(lo) || v > static_cast<double>(hi))) out_of_range();
      fail(path, fmt::format("expected a whole number{}, got {}",
                             whole ? " written without a fraction or exponent" : "", value.dump()));
    }
    if (!value.is_number_integer())
      fail(path, fmt::format("expected a whole number, got {}", detail::json_type_name(value)));
    const bool huge = value.is_number_unsigned() &&
                      value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX);
    const auto v = huge ? INT64_MAX : value.get<std::int64_t>();
    if (v < lo || v > hi) out_of_range();
    return v;
  }

  const json& array(const json& value, const JsonPath& path, std::size_t size) const {
    if (!value.is_array())
      fail(path, fmt::format("expected an array, got {}", detail::json_type_name(value)));
    if (value.size() != size)
      fail(path, fmt::format("expected {} entries, got {}", size, value.size()));
    return value;
  }

  void read_source(const json& value, TableSource* source) const {
    const JsonPath path = JsonPath{} / "source";
    if (!value.is_object())
      fail(path, fmt::format("expected an object, got {}", detail::json_type_name(value)));
    for (const auto& [key, member] : value.items()) {
      if (key == "schedule") {
        if (!member.is_string()) fail(path / key, "expected a string");
        if (source) source->schedule = member.get<std::string>();
      } else if (key == "params") {
        if (!member.is_object()) fail(path / key, "expected an object");
        if (source) source->params = member;
      } else {
        fail(path / key, fmt::format("unknown key '{}' (expected: schedule, params)", key), true);
      }
    }
  }

  void read_placement(const json& doc, ScheduleTable& t) const {
    const JsonPath path = JsonPath{} / "placement";
    const auto& placement = require(doc, "placement");
    if (!placement.is_array() || placement.empty() || placement.size() > kMaxPipelines) {
      fail(path, fmt::format("expected an array of 1..{} pipelines, each an array of stage devices",
                             kMaxPipelines));
    }
    t.placement.pipelines = static_cast<std::int32_t>(placement.size());
    t.placement.stages = t.stages;
    t.placement.device.reserve(placement.size() * static_cast<std::size_t>(t.stages));
    for (std::size_t p = 0; p < placement.size(); ++p) {
      const auto& row = array(placement[p], path / p, static_cast<std::size_t>(t.stages));
      for (std::size_t s = 0; s < row.size(); ++s) {
        t.placement.device.push_back(
            static_cast<std::int32_t>(integer(row[s], path / p / s, 0, t.devices - 1)));
      }
    }

    const auto microbatches = static_cast<std::size_t>(t.microbatches);
    if (doc.contains("microbatch_pipeline")) {
      const JsonPath mp = JsonPath{} / "microbatch_pipeline";
      const auto& values = array(doc["microbatch_pipeline"], mp, microbatches);
      t.pipeline_of.reserve(microbatches);
      for (std::size_t m = 0; m < microbatches; ++m) {
        t.pipeline_of.push_back(
            static_cast<std::uint8_t>(integer(values[m], mp / m, 0, t.placement.pipelines - 1)));
      }
    } else if (t.placement.pipelines > 1) {
      fail(path, "a table with more than one pipeline needs \"microbatch_pipeline\"");
    } else {
      t.pipeline_of.assign(microbatches, 0);
    }

    if (doc.contains("stage_layers")) {
      const JsonPath sl = JsonPath{} / "stage_layers";
      const auto& layers = array(doc["stage_layers"], sl, placement.size());
      for (std::size_t p = 0; p < layers.size(); ++p) {
        const auto& row = array(layers[p], sl / p, static_cast<std::size_t>(t.stages));
        for (std::size_t s = 0; s < row.size(); ++s) {
          t.stage_layers.push_back(
              static_cast<std::int32_t>(integer(row[s], sl / p / s, 1, kMaxStageLayers)));
        }
      }
    }
  }

  void read_rows(const json& doc, ScheduleTable& t) const {
    const JsonPath path = JsonPath{} / "rows";
    const auto& rows = array(require(doc, "rows"), path, static_cast<std::size_t>(t.devices));
    bool idle_cells = false;
    for (std::size_t d = 0; d < rows.size(); ++d) {
      const auto& row = rows[d];
      if (!row.is_array())
        fail(path / d,
             fmt::format("expected an array of cells, got {}", detail::json_type_name(row)));
      for (std::size_t c = 0; c < row.size(); ++c) {
        const auto& cell = row[c];
        if (!cell.is_string()) {
          fail(path / d / c, fmt::format("expected an action string like \"0F1\", got {}",
                                         detail::json_type_name(cell)));
        }
        const auto parsed = parse_action(cell.get_ref<const std::string&>());
        if (!parsed.ok()) fail(path / d / c, parsed.error, false, 1 + parsed.error_offset);
        if (parsed.idle()) {
          idle_cells = true;
          continue;
        }
        if (parsed.comm) {
          fail(path / d / c,
               fmt::format("'{}' is a communication action: pipetab JSON rows hold computations "
                           "only (a communication order is kept in PyTorch's compute+comms CSV)",
                           to_string(*parsed.comm)));
        }
        if (static_cast<std::int64_t>(t.ops.size()) >= kMaxOps)
          fail(path / d / c, fmt::format("more than {} ops", kMaxOps));
        t.ops.push_back(*parsed.op);
        t.slots.push_back(static_cast<std::int32_t>(c));
      }
      t.row_begin.push_back(static_cast<std::int64_t>(t.ops.size()));
    }
    if (!idle_cells) t.slots.clear();
  }

  std::string_view text_;
  const std::string& file_;
};

void append_array(std::string& out, const std::int32_t* values, std::size_t n) {
  out += '[';
  for (std::size_t i = 0; i < n; ++i)
    out += fmt::format("{}{}", i ? "," : "", values[i]);
  out += ']';
}

void append_rows_of(std::string& out, const std::vector<std::int32_t>& flat, std::size_t rows,
                    std::size_t width) {
  out += '[';
  for (std::size_t r = 0; r < rows; ++r) {
    if (r) out += ", ";
    append_array(out, flat.data() + r * width, width);
  }
  out += ']';
}

}  // namespace

ScheduleTable read_table_json(std::string_view text, const std::string& file, TableSource* source) {
  return JsonTableReader(text, file).read(source);
}

std::string write_table_json(const ScheduleTable& t, const TableSource& source) {
  std::string out =
      fmt::format("{{\n  \"format\": \"{}\",\n  \"version\": {},\n", kFormat, kVersion);
  if (!source.schedule.empty() || !source.params.is_null()) {
    json s = json::object();
    if (!source.schedule.empty()) s["schedule"] = source.schedule;
    if (!source.params.is_null()) s["params"] = source.params;
    out += fmt::format("  \"source\": {},\n", s.dump());
  }
  out += fmt::format("  \"devices\": {},\n  \"stages\": {},\n  \"microbatches\": {},\n", t.devices,
                     t.stages, t.microbatches);
  const auto pipelines = static_cast<std::size_t>(t.placement.pipelines);
  const auto stages = static_cast<std::size_t>(t.stages);
  out += "  \"placement\": ";
  append_rows_of(out, t.placement.device, pipelines, stages);
  out += ",\n";
  if (pipelines > 1) {
    out += "  \"microbatch_pipeline\": [";
    for (std::size_t m = 0; m < t.pipeline_of.size(); ++m)
      out += fmt::format("{}{}", m ? "," : "", t.pipeline_of[m]);
    out += "],\n";
  }
  if (!t.stage_layers.empty()) {
    out += "  \"stage_layers\": ";
    append_rows_of(out, t.stage_layers, pipelines, stages);
    out += ",\n";
  }
  out += "  \"rows\": [\n";
  for (std::int32_t d = 0; d < t.devices; ++d) {
    out += "    [";
    const auto b = static_cast<std::size_t>(t.row_begin[static_cast<std::size_t>(d)]);
    const auto e = static_cast<std::size_t>(t.row_begin[static_cast<std::size_t>(d) + 1]);
    std::int32_t next = 0;
    for (auto i = b; i < e; ++i) {
      const std::int32_t slot = t.slots.empty() ? next : t.slots[i];
      for (; next < slot; ++next)
        out += next ? ",\"\"" : "\"\"";
      out += fmt::format("{}\"{}\"", next ? "," : "", to_string(t.ops[i]));
      ++next;
    }
    out += d + 1 < t.devices ? "],\n" : "]\n";
  }
  out += "  ]\n}\n";
  return out;
}

}  // namespace pipetab::io
