#include <algorithm>
#include <cmath>

#include "xml.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/report/trace.hpp"

namespace pipetab {
namespace {

constexpr double kPlotWidth = 1100.0;
constexpr double kLeft = 70.0, kRight = 30.0, kTop = 50.0;
constexpr double kLane = 28.0, kGap = 10.0;
constexpr std::int64_t kMaxSvgOps = 200000;

// Fill colours by kind; the second shade marks a device's odd stages (chunks, the other pipeline).
const char* fill(PassKind kind, bool pair, int shade) {
  if (pair) return shade ? "#7fd8d8" : "#2aa8a8";
  switch (kind) {
    case PassKind::F:
      return shade ? "#8fb8ee" : "#3b78c9";
    case PassKind::B:
      return shade ? "#9fd49a" : "#3f9a3a";
    case PassKind::I:
      return shade ? "#f3d98a" : "#d6a91e";
    case PassKind::W:
      return shade ? "#d6a8e6" : "#9b4fb8";
    case PassKind::None:
      break;
  }
  return "#999999";
}

// A tick step of 1, 2 or 5 × 10^k giving about `target` ticks, and the unit to print it in.
struct Axis {
  double step;
  double scale;
  const char* unit;
};

Axis axis(double span, int target) {
  const double raw = span / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  }
  if (span >= 1.0) return {step, 1.0, "s"};
  if (span >= 1e-3) return {step, 1e3, "ms"};
  return {step, 1e6, "µs"};
}

}  // namespace

std::string timeline_svg(const ScheduleTable& table, const Simulation& sim,
                         const std::string& title) {
  const auto& g = sim.graph;
  const auto& r = sim.result;
  if (g.table_ops > kMaxSvgOps) {
    throw Error(
        fmt::format("{} ops are too many for a readable SVG (at most {}); use --trace instead",
                    g.table_ops, kMaxSvgOps));
  }
  const double runtime = r.runtime_s > 0.0 ? r.runtime_s : 1.0;
  const double sx = kPlotWidth / runtime;
  const auto lane_y = [&](std::int32_t d) { return kTop + d * (kLane + kGap); };
  const double plot_bottom = lane_y(g.devices) - kGap;
  const double width = kLeft + kPlotWidth + kRight;
  const double height = plot_bottom + 95.0;

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 "
      "{:.0f} {:.0f}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
      width, height, width, height);
  out += fmt::format("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  out += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                     kLeft, report_detail::xml(title));

  // Lanes and device labels.
  for (std::int32_t d = 0; d < g.devices; ++d) {
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f4f4f4\"/>\n",
                       kLeft, lane_y(d), kPlotWidth, kLane);
    out += fmt::format(
        "<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\" text-anchor=\"end\">dev {}</text>\n",
        kLeft - 8, lane_y(d) + kLane / 2 + 4, d);
  }

  // Ops, shaded by the device's stage index (the grid's letters).
  std::vector<int> stage_index(table.placement.device.size(), 0);
  {
    std::vector<int> count(static_cast<std::size_t>(table.devices), 0);
    for (std::size_t i = 0; i < stage_index.size(); ++i) {
      stage_index[i] = count[static_cast<std::size_t>(table.placement.device[i])]++;
    }
  }
  for (std::int64_t n = g.table_ops; n < g.compute_nodes; ++n) {
    const auto i = static_cast<std::size_t>(n);
    const double x = kLeft + r.start[i] * sx;
    const double w = std::max(0.5, (r.end[i] - r.start[i]) * sx);
    out += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"#7f8c8d\" "
        "stroke=\"white\" stroke-width=\"0.4\"><title>optimizer step {:.6g}-{:.6g} "
        "s</title></rect>\n",
        x, lane_y(g.device[i]), w, kLane, r.start[i], r.end[i]);
  }
  for (std::int64_t n = 0; n < g.table_ops; ++n) {
    const auto i = static_cast<std::size_t>(n);
    const Op& op = table.ops[i];
    const Pass& p = op.first();
    const int shade =
        stage_index[static_cast<std::size_t>(table.pipeline_of_microbatch(p.microbatch)) *
                        static_cast<std::size_t>(table.stages) +
                    p.stage] %
        2;
    const double x = kLeft + r.start[i] * sx;
    const double w = std::max(0.5, (r.end[i] - r.start[i]) * sx);
    const double y = lane_y(g.device[i]);
    out += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" "
        "stroke=\"white\" "
        "stroke-width=\"0.4\"><title>{} {:.6g}-{:.6g} s</title></rect>\n",
        x, y, w, kLane, fill(p.kind, op.is_pair(), shade), report_detail::xml(to_string(op)),
        r.start[i], r.end[i]);
    if (w >= 13.0) {
      out += fmt::format(
          "<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"9\" fill=\"white\" "
          "text-anchor=\"middle\">{}</text>\n",
          x + w / 2, y + kLane / 2 + 3, p.microbatch);
    }
  }

  // Transfers: from the sending lane's bottom at issue to the receiving lane's top on arrival.
  for (std::int64_t n = g.compute_nodes; n < g.nodes(); ++n) {
    const auto i = static_cast<std::size_t>(n);
    const auto t = static_cast<std::size_t>(n - g.compute_nodes);
    if (g.kind[t] == TransferKind::Sync) continue;
    const auto from = g.device[i], to = g.receiver[t];
    const bool collective = !is_pipeline(g.kind[t]);
    const double y1 = from < to ? lane_y(from) + kLane : lane_y(from);
    const double y2 =
        from < to ? lane_y(to) : (from == to ? lane_y(to) + kLane : lane_y(to) + kLane);
    out += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"0.8\" "
        "stroke-opacity=\"0.7\"{}/>\n",
        kLeft + r.start[i] * sx, y1, kLeft + r.end[i] * sx, y2, collective ? "#b03a2e" : "#555555",
        collective ? " stroke-dasharray=\"3,2\"" : "");
  }

  // Time axis.
  const Axis a = axis(runtime, 10);
  out += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"black\"/>\n",
                     kLeft, plot_bottom + 6, kLeft + kPlotWidth, plot_bottom + 6);
  for (double tick = 0.0; tick <= runtime * (1 + 1e-9); tick += a.step) {
    const double x = kLeft + tick * sx;
    out += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"black\"/>\n", x,
        plot_bottom + 6, x, plot_bottom + 11);
    out += fmt::format(
        "<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{:g}</text>\n", x,
        plot_bottom + 24, tick * a.scale);
  }
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" text-anchor=\"middle\">time ({})</text>\n",
      kLeft + kPlotWidth / 2, plot_bottom + 42, a.unit);

  // Legend.
  const double ly = plot_bottom + 62;
  double lx = kLeft;
  const std::pair<const char*, const char*> items[] = {{"#3b78c9", "forward F"},
                                                       {"#3f9a3a", "backward B"},
                                                       {"#d6a91e", "input grad I"},
                                                       {"#9b4fb8", "weight grad W"},
                                                       {"#2aa8a8", "overlapped F&amp;B"}};
  for (const auto& [colour, label] : items) {
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n",
                       lx, ly, colour);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{}</text>\n", lx + 16,
                       ly + 10, label);
    lx += 120;
  }
  out += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#555555\"/>\n", lx,
      ly + 6, lx + 18, ly + 6);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">transfer</text>\n", lx + 22,
                     ly + 10);
  lx += 90;
  out += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#b03a2e\" "
      "stroke-dasharray=\"3,2\"/>\n",
      lx, ly + 6, lx + 18, ly + 6);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">all-reduce step</text>\n",
                     lx + 22, ly + 10);
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#555555\">label = microbatch; "
      "lighter "
      "shade = the device's second (fourth, ...) stage</text>\n",
      kLeft, ly + 30);
  out += "</svg>\n";
  return out;
}

}  // namespace pipetab
