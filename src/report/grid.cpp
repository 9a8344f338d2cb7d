#include "pipetab/report/grid.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/report/evaluation.hpp"
#include "pipetab/report/output.hpp"

namespace pipetab {
namespace {

// Largest u with every value an integer multiple of u (within rounding), by Euclid's
// algorithm on reals; 0 if none above a millionth of the largest value.
double common_unit(const std::vector<double>& values) {
  double unit = 0.0;
  double largest = 0.0;
  for (double v : values)
    largest = std::max(largest, v);
  const double eps = largest * 1e-9;
  for (double v : values) {
    double a = std::max(unit, v), b = std::min(unit, v);
    while (b > eps) {
      const double r = std::fmod(a, b);
      a = b;
      b = (r > eps && b - r > eps) ? r : 0.0;
    }
    unit = a;
  }
  return unit > largest * 1e-6 ? unit : 0.0;
}

// Per (pipeline, stage): its letter index on its device (its rank among that device's stages).
std::vector<int> chunk_letters(const ScheduleTable& t, std::vector<bool>& multi_stage) {
  const auto cells = t.placement.device.size();
  std::vector<int> letter(cells, 0);
  std::vector<int> count(static_cast<std::size_t>(t.devices), 0);
  for (std::size_t i = 0; i < cells; ++i)
    letter[i] = count[static_cast<std::size_t>(t.placement.device[i])]++;
  multi_stage.assign(count.size(), false);
  for (std::size_t d = 0; d < count.size(); ++d)
    multi_stage[d] = count[d] > 1;
  return letter;
}

const char* background(PassKind kind, bool pair, int letter) {
  if (pair) return letter % 2 ? "\x1b[106;30m" : "\x1b[46;30m";
  switch (kind) {
    case PassKind::F:
      return letter % 2 ? "\x1b[104;30m" : "\x1b[44;97m";
    case PassKind::B:
      return letter % 2 ? "\x1b[102;30m" : "\x1b[42;30m";
    case PassKind::I:
      return letter % 2 ? "\x1b[103;30m" : "\x1b[43;30m";
    case PassKind::W:
      return letter % 2 ? "\x1b[105;30m" : "\x1b[45;97m";
    case PassKind::None:
      break;
  }
  return "";
}

}  // namespace

std::string render_grid(const ScheduleTable& t, const Timing& timing, const GridOptions& options) {
  std::vector<double> durations(t.ops.size());
  for (std::size_t i = 0; i < t.ops.size(); ++i)
    durations[i] = timing.end[i] - timing.start[i];
  const double unit = common_unit(durations);
  if (unit <= 0.0)
    throw Error("the op durations share no common time unit; use --format csv or json");
  const double columns_real = timing.makespan / unit;
  if (columns_real > static_cast<double>(options.max_columns)) {
    throw Error(
        fmt::format("the grid would be {:.0f} columns wide (limit {}); use --format csv or json",
                    columns_real, options.max_columns));
  }
  const auto column_of = [&](double time) {
    return static_cast<std::int64_t>(std::llround(time / unit));
  };
  // Every op must cover at least one whole column (the unit search tolerates rounding, so an
  // op far below the largest duration could otherwise round to nothing).
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    if (column_of(timing.end[i]) <= column_of(timing.start[i])) {
      throw Error(
          "the op durations are too unequal to draw on one time axis; use --format csv or json");
    }
  }

  std::vector<bool> multi_stage;
  const auto letters = chunk_letters(t, multi_stage);
  const auto letter_of = [&](const Pass& p) {
    return letters[static_cast<std::size_t>(t.pipeline_of_microbatch(p.microbatch)) *
                       static_cast<std::size_t>(t.stages) +
                   p.stage];
  };
  std::vector<std::string> labels(t.ops.size());
  std::size_t width = 3;
  for (std::int32_t d = 0; d < t.devices; ++d) {
    for (auto i = t.row_begin[static_cast<std::size_t>(d)];
         i < t.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
      std::string label;
      for (const Pass& p : t.ops[static_cast<std::size_t>(i)].passes()) {
        if (!label.empty()) label += '&';
        label += fmt::format("{}{}", kind_letter(p.kind), p.microbatch);
        if (multi_stage[static_cast<std::size_t>(d)]) {
          const int l = letter_of(p);
          label += l < 26 ? std::string(1, static_cast<char>('a' + l)) : fmt::format(".{}", l);
        }
      }
      width = std::max(width, label.size() + 1);
      labels[static_cast<std::size_t>(i)] = std::move(label);
    }
  }

  const auto total_columns = column_of(timing.makespan);
  const std::string margin = fmt::format("dev {:<{}}| ", "", std::to_string(t.devices - 1).size());
  // Time axis: a tick label every `step` columns, where it fits.
  std::size_t tick_width = 0;
  for (std::int64_t c = 0; c < total_columns; ++c) {
    tick_width = std::max(tick_width, fmt::format("{:g}", static_cast<double>(c) * unit).size());
  }
  const auto step = static_cast<std::int64_t>((tick_width + width) / width);
  // Folding: blocks of whole columns, each line at most fold_width characters (at least one
  // column per block, however narrow the terminal). A row's last cell needs no separator.
  std::int64_t block = std::max<std::int64_t>(total_columns, 1);
  if (options.fold_width > 0) {
    const auto room = options.fold_width - static_cast<std::int64_t>(margin.size()) + 1;
    block = std::clamp<std::int64_t>(room / static_cast<std::int64_t>(width), 1, block);
  }
  const auto trim = [](std::string& text) {
    while (!text.empty() && text.back() == ' ')
      text.pop_back();
    text += '\n';
  };

  std::string out;
  // Per device, the first op not yet wholly drawn.
  std::vector<std::int64_t> next(t.row_begin.begin(), t.row_begin.end() - 1);
  for (std::int64_t c0 = 0; c0 < std::max<std::int64_t>(total_columns, 1); c0 += block) {
    const auto c1 = std::min(c0 + block, total_columns);
    if (c0 > 0) out += '\n';
    // The axis: labels at multiples of `step`, each where its column starts; when folding, one
    // that would run past the width (or the block, if that is wider) is left out.
    std::string axis = fmt::format("{:<{}}", "time", margin.size());
    const auto limit = std::max(static_cast<std::size_t>(options.fold_width),
                                margin.size() + static_cast<std::size_t>(c1 - c0) * width - 1);
    for (std::int64_t c = (c0 + step - 1) / step * step; c < c1; c += step) {
      const auto label = fmt::format("{:g}", static_cast<double>(c) * unit);
      const auto at = margin.size() + static_cast<std::size_t>(c - c0) * width;
      if (options.fold_width > 0 && at + label.size() > limit) break;
      axis.resize(at, ' ');
      axis += label;
    }
    trim(axis);
    out += axis;

    for (std::int32_t d = 0; d < t.devices; ++d) {
      const auto row = static_cast<std::size_t>(d);
      out += fmt::format("dev {:<{}}| ", d, std::to_string(t.devices - 1).size());
      std::int64_t column = c0;
      for (auto i = next[row]; i < t.row_begin[row + 1]; ++i) {
        const auto index = static_cast<std::size_t>(i);
        const auto first = column_of(timing.start[index]);
        const auto last = column_of(timing.end[index]);
        if (first >= c1) break;
        for (; column < first; ++column)
          out += fmt::format("{:<{}}", ".", width);
        const auto shown_last = std::min(last, c1);
        const auto span = static_cast<std::size_t>(shown_last - column) * width - 1;
        // An op cut by the previous fold continues without its label.
        const bool continued = first < c0;
        const std::string_view label = continued ? std::string_view() : labels[index];
        const Op& op = t.ops[index];
        if (options.color) {
          out += background(op.first().kind, op.is_pair(), letter_of(op.first()));
          out += fmt::format("{:<{}}", continued ? std::string_view("-") : label, span);
          out += "\x1b[0m ";
        } else {
          out += label;
          out += std::string(span - label.size(), last - first > 1 ? '-' : ' ');
          out += ' ';
        }
        column = shown_last;
        if (last > c1) break;  // the op goes on in the next block
        next[row] = i + 1;
      }
      for (; column < c1; ++column)
        out += fmt::format("{:<{}}", ".", width);
      trim(out);
    }
  }
  return out;
}

std::string grid_header(const Evaluation& e) {
  return summary(e) + fmt::format("\nmakespan {}, bubble ratio {:.4f}, peak activation {} M_a\n",
                                  format_number(e.table.makespan), e.table.bubble_ratio,
                                  format_number(e.table.peak_activation_max()));
}

std::string grid_legend(const ScheduleTable& t) {
  bool kinds[4] = {false, false, false, false};
  bool pairs = false;
  for (const Op& op : t.ops) {
    pairs = pairs || op.is_pair();
    for (const Pass& p : op.passes())
      kinds[static_cast<int>(p.kind)] = true;
  }
  std::vector<std::string> parts;
  if (kinds[0]) parts.emplace_back("F forward");
  if (kinds[1]) parts.emplace_back("B backward");
  if (kinds[2]) parts.emplace_back("I input-grad backward");
  if (kinds[3]) parts.emplace_back("W weight-grad backward");
  if (pairs) parts.emplace_back("X&Y overlapped pair");
  parts.emplace_back("number = microbatch");
  if (t.stages * t.pipelines() > t.devices) {
    parts.emplace_back("letter = the device's stage (a, b, ... in model order, pipeline 0 first)");
  }
  parts.emplace_back("'.' idle");
  return fmt::format("{}\n", fmt::join(parts, "; "));
}

}  // namespace pipetab
