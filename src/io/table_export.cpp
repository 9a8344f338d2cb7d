#include "pipetab/io/table_export.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/pytorch_csv.hpp"

namespace pipetab::io {

nlohmann::json params_json(const ResolvedParams& p) {
  nlohmann::json j = {{"devices", p.devices},
                      {"microbatches", p.microbatches},
                      {"chunks", p.chunks},
                      {"waves", p.waves}};
  if (!p.variant.empty()) j["variant"] = p.variant;
  if (p.group_size > 0) j["group_size"] = p.group_size;
  if (p.split_early != 1 || p.split_late != 1)
    j["split"] = fmt::format("{}:{}", p.split_early, p.split_late);
  if (p.combined_1f1b) j["combined_1f1b"] = true;
  return j;
}

std::optional<ResolvedParams> recognized_params(const TableFile& file) {
  const auto& source = file.source;
  if (source.schedule.empty()) return std::nullopt;
  try {
    const ScheduleInfo& info = find_schedule(source.schedule);
    const auto& j = source.params;
    ScheduleParams p;
    p.devices = j.at("devices").get<std::int64_t>();
    p.microbatches = j.at("microbatches").get<std::int64_t>();
    if (info.default_chunks > 0 && j.contains("chunks")) p.chunks = j["chunks"].get<std::int64_t>();
    if (info.default_waves > 0 && j.contains("waves")) p.waves = j["waves"].get<std::int64_t>();
    if (j.contains("variant")) p.variant = j["variant"].get<std::string>();
    if (info.takes_group_size && j.contains("group_size"))
      p.group_size = j["group_size"].get<std::int64_t>();
    if (j.contains("split")) p.split = j["split"].get<std::string>();
    if (info.takes_combined_1f1b && j.contains("combined_1f1b"))
      p.combined_1f1b = j["combined_1f1b"].get<bool>();
    // Generators make 2·S·M·v or 4·S·M·W ops: a small file cannot ask for a huge generation.
    const auto& t = file.table;
    if (p.devices != t.devices || p.microbatches != t.microbatches) return std::nullopt;
    const double ops = 2.0 * static_cast<double>(t.devices) * static_cast<double>(t.microbatches) *
                       static_cast<double>(p.chunks.value_or(1)) *
                       static_cast<double>(p.waves.value_or(1));
    if (ops > 2.0 * static_cast<double>(t.ops.size())) return std::nullopt;
    auto params = resolve(info, p);
    if (info.generate(params).same_schedule(t)) return params;
  } catch (const std::exception&) {
    // Not a recognizable generated table: evaluated as a user table.
  }
  return std::nullopt;
}

void require_valid(const TableFile& file) {
  const auto report = validate(file.table, 1);
  if (report.ok()) return;
  const auto& issue = report.issues.front();
  throw Error(fmt::format(
      "{}: invalid table: {}{}", issue_location(file, issue), to_string(issue),
      report.total > 1 ? fmt::format(" (and {} more; see pipetab validate)", report.total - 1)
                       : std::string()));
}

nlohmann::json validation_json(const std::string& path, const TableFile& file,
                               const ValidationReport& report) {
  const auto& t = file.table;
  nlohmann::json issues = nlohmann::json::array();
  for (const auto& issue : report.issues) {
    issues.push_back({{"location", issue_location(file, issue)},
                      {"device", issue.device},
                      {"position", issue.position},
                      {"op", issue.op},
                      {"message", issue.message}});
  }
  return {{"file", path},
          {"format", to_string(file.format)},
          {"valid", report.ok()},
          {"devices", t.devices},
          {"stages", t.stages},
          {"microbatches", t.microbatches},
          {"pipelines", t.pipelines()},
          {"ops", t.ops.size()},
          {"issue_count", report.total},
          {"issues", issues}};
}

const std::vector<std::string>& export_formats() {
  static const std::vector<std::string> formats = {"csv", "pytorch", "pytorch-comms", "json"};
  return formats;
}

TableExport export_table(const ScheduleTable& table, std::string_view format,
                         const TableSource& source, bool force, std::ostream& text) {
  const auto& formats = export_formats();
  if (std::find(formats.begin(), formats.end(), format) == formats.end()) {
    throw Error(fmt::format("format '{}': expected one of {}", format, fmt::join(formats, ", ")));
  }
  const bool pytorch = format != "json";
  TableExport out;
  std::vector<std::string> problems;
  if (pytorch) problems = pytorch_export_problems(table);
  if (format == "json" && !table.comms.empty()) {
    problems.push_back(
        "pipetab JSON has no communication actions: the table's send/receive "
        "order would be lost (write --format csv or pytorch-comms to keep it)");
  }
  if (!problems.empty() && !force) {
    throw Error(fmt::format("cannot export as {}: {}; --force writes it anyway", format,
                            fmt::join(problems, "; ")));
  }
  out.forced = std::move(problems);
  ScheduleTable compute_only;
  const ScheduleTable* written = &table;
  if (format == "pytorch" && !table.comms.empty()) {
    compute_only = table;
    compute_only.comms = {};
    written = &compute_only;
    out.compute_only = true;
  }
  if (format == "json") {
    text << format_table(*written, TableFormat::Json, source);
  } else if (format == "pytorch-comms") {
    text << write_pytorch_comms_csv(*written);
  } else {
    // The padded grid can be far larger than the table (S² cells at M = 1): streamed.
    write_pytorch_csv(text, *written);
  }
  if (pytorch) {
    out.pytorch_note =
        pytorch_export_note(*written, format == "pytorch-comms" || !written->comms.empty());
  }
  return out;
}

TableExport export_table(const ScheduleTable& table, std::string_view format,
                         const TableSource& source, bool force) {
  std::ostringstream text;
  auto out = export_table(table, format, source, force, text);
  out.text = std::move(text).str();
  return out;
}

}  // namespace pipetab::io
