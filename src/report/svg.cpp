#include <algorithm>
#include <array>
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
constexpr double kCollectiveLane = 7.0;  // under each device lane, when collectives ran
// An axis break, when the tail after the pipeline is long: the pipeline keeps kPipelineShare of
// the width, the tail the rest past a gap of kBreakGap pixels.
constexpr double kTailShareForBreak = 0.2;
constexpr double kPipelineShare = 0.8;
constexpr double kBreakGap = 16.0;

// WCAG 2.x relative luminance of an sRGB colour "#rrggbb" (www.w3.org/TR/WCAG21/#dfn-relative-
// luminance): each channel linearised (c/12.92 at or below 0.04045, ((c+0.055)/1.055)^2.4
// above), weighted 0.2126 R + 0.7152 G + 0.0722 B.
double relative_luminance(const char* hex) {
  const auto channel = [&](int at) {
    int value = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[at + k];
      value = value * 16 + (c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0');
    }
    const double s = value / 255.0;
    return s <= 0.04045 ? s / 12.92 : std::pow((s + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * channel(1) + 0.7152 * channel(3) + 0.0722 * channel(5);
}

// WCAG 2.x contrast ratio (L_lighter + 0.05) / (L_darker + 0.05).
double contrast(const char* a, const char* b) {
  const double la = relative_luminance(a), lb = relative_luminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

// The label colour for a fill: black or white, whichever contrasts more. One of the two always
// reaches 4.58:1 (the worst fill, luminance 0.179, gives both sqrt(21) ≈ 4.58), above WCAG's
// 4.5:1 for normal text (success criterion 1.4.3).
const char* label_colour(const char* fill) {
  return contrast(fill, "#000000") >= contrast(fill, "#ffffff") ? "#000000" : "#ffffff";
}

// Fill colours by kind; the second shade marks a device's odd stages (chunks, the other pipeline).
const char* fill(PassKind kind, bool pair, int shade) {
  if (pair) return shade ? "#7fd8d8" : "#2a9d9d";
  switch (kind) {
    case PassKind::F:
      return shade ? "#9cc2f0" : "#2f6db8";
    case PassKind::B:
      return shade ? "#a8dba3" : "#3a8f35";
    case PassKind::I:
      return shade ? "#f5de96" : "#d6a91e";
    case PassKind::W:
      return shade ? "#ddb5ea" : "#8e44ad";
    case PassKind::None:
      break;
  }
  return "#999999";
}
constexpr const char* kOptimizerFill = "#7f8c8d";
constexpr const char* kTransferStroke = "#555555";

// Collectives by kind (ring steps of gradient reductions and gathers), drawn as bars.
const char* collective_fill(TransferKind kind) {
  switch (kind) {
    case TransferKind::ReplicaAllReduce:
      return "#c0392b";
    case TransferKind::DataAllReduce:
      return "#e67e22";
    case TransferKind::EmbeddingAllReduce:
      return "#6d4c41";
    case TransferKind::ParamAllGather:
      return "#16a085";
    case TransferKind::FsdpAllGather:
      return "#2980b9";
    case TransferKind::FsdpReduceScatter:
      return "#8e44ad";
    case TransferKind::ExpertAllToAll:
      return "#d35400";
    case TransferKind::ContextExchange:
      return "#27ae60";
    case TransferKind::HostOffload:
      return "#7f8fa6";
    case TransferKind::HostReload:
      return "#40739e";
    default:
      break;
  }
  return "#999999";
}

// An upper bound on the advance width, in em, of a label character in the fonts the SVG names:
// DejaVu Sans (the widest of them; its digits advance 1303/2048 em, '&' 1597/2048) rounded up.
double advance_em(char c) {
  if (c >= '0' && c <= '9') return 0.64;
  if (c == '&') return 0.79;
  return 1.0;
}
double text_width(std::string_view text, double font_size) {
  double em = 0.0;
  for (const char c : text)
    em += advance_em(c);
  return em * font_size;
}

// A tick step of 1, 2 or 5 × 10^k giving about `target` ticks.
double tick_step(double span, int target) {
  const double raw = span / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10.0 * power;
}

// The unit to print times in, from the span of the whole run.
struct Unit {
  double scale;
  const char* name;
};
Unit time_unit(double span) {
  if (span >= 1.0) return {1.0, "s"};
  if (span >= 1e-3) return {1e3, "ms"};
  return {1e6, "µs"};
}

// Time to x: linear, or two linear pieces either side of an axis break at `cut`.
struct TimeScale {
  bool broken = false;
  double cut = 0.0;             // the break's time (the pipeline's end)
  double sx1 = 0.0, sx2 = 0.0;  // pixels per second before and after it
  double x(double t) const {
    if (!broken || t <= cut) return kLeft + t * sx1;
    return kLeft + kPlotWidth * kPipelineShare + kBreakGap + (t - cut) * sx2;
  }
};

struct LegendItem {
  enum Shape { Box, Line, Bar } shape;
  const char* colour;
  std::string label;
};

}  // namespace

std::optional<std::string> timeline_svg_refusal(const ScheduleTable& table) {
  const auto ops = static_cast<std::int64_t>(table.ops.size());
  if (ops <= kMaxSvgOps) return std::nullopt;
  return fmt::format(
      "{} ops are too many for a readable SVG timeline (at most {}: 1100 pixels wide, more ops "
      "than that show less than a pixel each and the file passes 100 MB); use --trace instead",
      ops, kMaxSvgOps);
}

std::string timeline_svg(const ScheduleTable& table, const Simulation& sim,
                         const std::string& title) {
  if (const auto refusal = timeline_svg_refusal(table)) throw Error(*refusal);
  const auto& g = sim.graph;
  const auto& r = sim.result;
  const double runtime = r.runtime_s > 0.0 ? r.runtime_s : 1.0;

  // What is present decides the lanes, the scale and the legend.
  bool kinds[5] = {false, false, false, false, false};  // F, B, I, W, pair
  for (const Op& op : table.ops) {
    if (op.is_pair()) {
      kinds[4] = true;
    } else {
      kinds[static_cast<int>(op.first().kind) - static_cast<int>(PassKind::F)] = true;
    }
  }
  // Transfer lines only where ops are wide enough to tell them apart: past a mean of 6 px per op
  // on the busiest device the lines would hatch over the lanes.
  std::int64_t busiest = 0;
  for (std::int32_t d = 0; d < table.devices; ++d) {
    busiest = std::max(busiest, table.row_begin[static_cast<std::size_t>(d) + 1] -
                                    table.row_begin[static_cast<std::size_t>(d)]);
  }
  const bool draw_transfers = static_cast<double>(busiest) * 6.0 <= kPlotWidth;
  bool pipeline_transfers = false, optimizer = g.compute_nodes > g.table_ops;
  std::array<bool, 10> collectives{};  // by collective_fill's kinds
  const TransferKind collective_kinds[] = {
      TransferKind::ReplicaAllReduce,   TransferKind::DataAllReduce,
      TransferKind::EmbeddingAllReduce, TransferKind::ParamAllGather,
      TransferKind::FsdpAllGather,      TransferKind::FsdpReduceScatter,
      TransferKind::ExpertAllToAll,     TransferKind::ContextExchange,
      TransferKind::HostOffload,        TransferKind::HostReload};
  for (std::int64_t t = 0; t < g.transfers(); ++t) {
    const auto kind = g.kind[static_cast<std::size_t>(t)];
    if (is_pipeline(kind)) pipeline_transfers = draw_transfers;
    for (std::size_t k = 0; k < collectives.size(); ++k)
      collectives[k] = collectives[k] || kind == collective_kinds[k];
  }
  const bool any_collective =
      std::find(collectives.begin(), collectives.end(), true) != collectives.end();

  TimeScale scale;
  const double cut = std::min(r.pipeline_end_s, runtime);
  if (cut > 0.0 && runtime - cut > kTailShareForBreak * runtime) {
    scale.broken = true;
    scale.cut = cut;
    scale.sx1 = kPlotWidth * kPipelineShare / cut;
    scale.sx2 = (kPlotWidth * (1.0 - kPipelineShare) - kBreakGap) / (runtime - cut);
  } else {
    scale.sx1 = kPlotWidth / runtime;
  }

  const double collective_lane = any_collective ? kCollectiveLane : 0.0;
  const auto lane_y = [&](std::int32_t d) { return kTop + d * (kLane + collective_lane + kGap); };
  const double plot_bottom = lane_y(g.devices) - kGap;

  // Per (pipeline, stage): its index among its device's stages (the grid's letters).
  std::vector<int> stage_index(table.placement.device.size(), 0);
  bool multi_stage = false;
  {
    std::vector<int> count(static_cast<std::size_t>(table.devices), 0);
    for (std::size_t i = 0; i < stage_index.size(); ++i) {
      stage_index[i] = count[static_cast<std::size_t>(table.placement.device[i])]++;
      multi_stage = multi_stage || stage_index[i] > 0;
    }
  }

  std::vector<LegendItem> legend;
  const char* kind_names[] = {"forward F", "backward B", "input gradient I", "weight gradient W",
                              "overlapped F&B"};
  const PassKind kind_of[] = {PassKind::F, PassKind::B, PassKind::I, PassKind::W, PassKind::F};
  for (int k = 0; k < 5; ++k) {
    if (kinds[k]) legend.push_back({LegendItem::Box, fill(kind_of[k], k == 4, 0), kind_names[k]});
  }
  if (optimizer) legend.push_back({LegendItem::Box, kOptimizerFill, "optimizer step"});
  if (pipeline_transfers) legend.push_back({LegendItem::Line, kTransferStroke, "transfer"});
  for (std::size_t k = 0; k < collectives.size(); ++k) {
    if (collectives[k]) {
      legend.push_back(
          {LegendItem::Bar, collective_fill(collective_kinds[k]), to_string(collective_kinds[k])});
    }
  }
  // Legend rows: items left to right, wrapping at the plot's width.
  const double legend_top = plot_bottom + 62;
  std::vector<std::pair<double, double>> legend_at;  // x, y of each item
  {
    double lx = kLeft, ly = legend_top;
    for (const auto& item : legend) {
      // DejaVu Sans averages about 0.6 em per lower-case letter.
      const double w = 20 + 0.6 * 11 * static_cast<double>(item.label.size()) + 28;
      if (lx + w > kLeft + kPlotWidth && lx > kLeft) {
        lx = kLeft;
        ly += 18;
      }
      legend_at.emplace_back(lx, ly);
      lx += w;
    }
  }
  std::vector<std::string> notes;
  notes.emplace_back("label = microbatch (omitted where it does not fit)");
  if (!draw_transfers)
    notes.emplace_back("transfers not drawn: ops narrower than 6 px (see --trace)");
  if (multi_stage) notes.emplace_back("lighter shade = the device's second (fourth, ...) stage");
  if (any_collective) notes.emplace_back("thin bars under a device = the collectives it sends");
  if (scale.broken) {
    notes.emplace_back("the axis breaks at the pipeline's end; the tail has a scale of its own");
  }
  const double notes_y = (legend_at.empty() ? legend_top : legend_at.back().second) + 30;
  const double width = kLeft + kPlotWidth + kRight;
  const double height = notes_y + 14.0 * static_cast<double>(notes.size()) + 8;

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 "
      "{:.0f} {:.0f}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
      width, height, width, height);
  out.reserve(out.size() + table.ops.size() * 260 + static_cast<std::size_t>(g.transfers()) * 130);
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
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

  // A box with its label: the label in the largest of two sizes whose text fits inside the box
  // with a pixel and a half to spare on each side, or none.
  const auto box = [&](double x0, double x1, double y, const char* colour,
                       const std::string& tooltip, const std::string& label) {
    const double w = std::max(0.5, x1 - x0);
    out += fmt::format(
        "<rect class=\"op\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" "
        "stroke=\"#ffffff\" stroke-width=\"0.4\"><title>{}</title></rect>\n",
        x0, y, w, kLane, colour, report_detail::xml(tooltip));
    for (const double size : {10.0, 7.5}) {
      if (text_width(label, size) + 3.0 <= w) {
        out += fmt::format(
            "<text class=\"label\" x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"{}\" fill=\"{}\" "
            "text-anchor=\"middle\">{}</text>\n",
            x0 + w / 2, y + kLane / 2 + size * 0.35, size, label_colour(colour),
            report_detail::xml(label));
        break;
      }
    }
  };

  for (std::int64_t n = g.table_ops; n < g.compute_nodes; ++n) {
    const auto i = static_cast<std::size_t>(n);
    box(scale.x(r.start[i]), scale.x(r.end[i]), lane_y(g.device[i]), kOptimizerFill,
        fmt::format("optimizer step {:.6g}-{:.6g} s", r.start[i], r.end[i]), "opt");
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
    std::string label;
    for (const Pass& pass : op.passes()) {
      if (!label.empty()) label += '&';
      label += std::to_string(pass.microbatch);
    }
    box(scale.x(r.start[i]), scale.x(r.end[i]), lane_y(g.device[i]),
        fill(p.kind, op.is_pair(), shade),
        fmt::format("{} {:.6g}-{:.6g} s", to_string(op), r.start[i], r.end[i]), label);
  }

  // Pipeline transfers: from the sending lane's edge at issue to the receiving lane's edge on
  // arrival. Collectives: bars in the sender's collective lane (a ring step per bar).
  for (std::int64_t n = g.compute_nodes; n < g.nodes(); ++n) {
    const auto i = static_cast<std::size_t>(n);
    const auto t = static_cast<std::size_t>(n - g.compute_nodes);
    const auto kind = g.kind[t];
    if (kind == TransferKind::Sync) continue;
    const auto from = g.device[i], to = g.receiver[t];
    if (!is_pipeline(kind)) {
      const double x0 = scale.x(r.start[i]);
      out += fmt::format(
          "<rect class=\"collective\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" "
          "fill=\"{}\" fill-opacity=\"0.8\"/>\n",
          x0, lane_y(from) + kLane + 1, std::max(0.5, scale.x(r.end[i]) - x0), kCollectiveLane - 2,
          collective_fill(kind));
      continue;
    }
    if (!draw_transfers) continue;
    const double y1 = from < to ? lane_y(from) + kLane : lane_y(from);
    const double y2 = from < to ? lane_y(to) : lane_y(to) + kLane;
    out += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"0.8\" stroke-opacity=\"0.7\"/>\n",
        scale.x(r.start[i]), y1, scale.x(r.end[i]), y2, kTransferStroke);
  }

  // Time axis: ticks in one unit; with a break, each piece ticked on its own scale.
  const Unit unit = time_unit(runtime);
  const double axis_y = plot_bottom + 6;
  const auto axis_piece = [&](double x0, double x1, double t0, double t1, int target) {
    out += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"#000000\"/>\n", x0,
        axis_y, x1, axis_y);
    const double step = tick_step(t1 - t0, target);
    for (double tick = std::ceil(t0 / step - 1e-9) * step; tick <= t1 * (1 + 1e-9); tick += step) {
      const double x = scale.x(tick);
      // Keep the tail's first label clear of the break.
      if (scale.broken && t0 > 0.0 && x < x0 + 25) continue;
      out += fmt::format(
          "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"#000000\"/>\n", x,
          axis_y, x, axis_y + 5);
      out += fmt::format(
          "<text x=\"{:.2f}\" y=\"{:.1f}\" font-size=\"11\" text-anchor=\"middle\">{:g}</text>\n",
          x, axis_y + 18, tick * unit.scale + 0.0);  // + 0.0: no "-0"
    }
  };
  if (scale.broken) {
    const double xb = kLeft + kPlotWidth * kPipelineShare;
    axis_piece(kLeft, xb, 0.0, scale.cut, 8);
    axis_piece(xb + kBreakGap, kLeft + kPlotWidth, scale.cut, runtime, 2);
    // The break: two slanted strokes across the axis and a dashed guide through the lanes.
    for (const double dx : {2.0, 8.0}) {
      out += fmt::format(
          "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"#000000\"/>\n",
          xb + dx, axis_y + 5, xb + dx + 6, axis_y - 5);
    }
    out += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"#000000\" "
        "stroke-dasharray=\"2,3\" stroke-opacity=\"0.5\"/>\n",
        xb + kBreakGap / 2, kTop - 4, xb + kBreakGap / 2, axis_y);
  } else {
    axis_piece(kLeft, kLeft + kPlotWidth, 0.0, runtime, 10);
  }
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" text-anchor=\"middle\">time ({})</text>\n",
      kLeft + kPlotWidth / 2, axis_y + 36, unit.name);

  // Legend: the kinds present.
  for (std::size_t k = 0; k < legend.size(); ++k) {
    const auto& item = legend[k];
    const auto [lx, ly] = legend_at[k];
    switch (item.shape) {
      case LegendItem::Box:
        out += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n", lx, ly,
            item.colour);
        break;
      case LegendItem::Line:
        out += fmt::format(
            "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"/>\n", lx,
            ly + 6, lx + 16, ly + 6, item.colour);
        break;
      case LegendItem::Bar:
        out +=
            fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"16\" height=\"5\" fill=\"{}\"/>\n",
                        lx, ly + 4, item.colour);
        break;
    }
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\">{}</text>\n", lx + 20,
                       ly + 10, report_detail::xml(item.label));
  }
  for (std::size_t k = 0; k < notes.size(); ++k) {
    out +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"11\" fill=\"#555555\">{}</text>\n",
                    kLeft, notes_y + 14.0 * static_cast<double>(k), report_detail::xml(notes[k]));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace pipetab
