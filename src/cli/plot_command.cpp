// `pipetab plot`: line charts (SVG, PDF, PNG) from the results files `pipetab sweep` writes.
#include <memory>

#include "commands.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/io/data_table.hpp"
#include "pipetab/report/plot.hpp"

namespace pipetab::cli {

Subcommand add_plot(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("plot",
                         "Draw line charts (SVG, PDF or PNG, by the output's extension) from a "
                         "results file of pipetab sweep (CSV or JSON Lines): one line "
                         "per --series value and --y column, one panel per --facet value");
  struct State {
    std::string results, output, width, height, y_scales = "auto";
    std::vector<std::string> where;
    PlotOptions plot;
  };
  auto s = std::make_shared<State>();
  cmd->add_option("results", s->results, "results file: CSV with a header row, or JSON Lines")
      ->required();
  cmd->add_option("--x", s->plot.x,
                  "numeric column on the horizontal axis, e.g. params.microbatches")
      ->required();
  // One value per --y: CLI11 would otherwise let `--y a b` swallow the following words.
  cmd->add_option("--y", s->plot.y,
                  "numeric column on the vertical axis, e.g. simulation.runtime_s; repeat for "
                  "several (told apart by dash style)")
      ->required()
      ->allow_extra_args(false);
  cmd->add_option("--series", s->plot.series,
                  "column whose values are the lines, one colour each, e.g. schedule; several "
                  "separated by commas combine (schedule,params.split)")
      ->required();
  cmd->add_option("--facet", s->plot.facet,
                  "column whose values get a panel each (small multiples with shared axes), "
                  "e.g. system; several separated by commas combine");
  cmd->add_flag("--logx", s->plot.logx, "logarithmic x axis (values must be above 0)");
  cmd->add_flag("--logy", s->plot.logy, "logarithmic y axis (values must be above 0)");
  cmd->add_option("--where", s->where,
                  "keep only rows whose COL holds exactly VALUE (COL=VALUE); repeat to combine "
                  "(all must hold)")
      ->allow_extra_args(false);
  cmd->add_option("--relative-to", s->plot.relative_to,
                  "divide each y by the y of the series with this value at the same x (and "
                  "panel); that series becomes the line at 1");
  cmd->add_option("--title", s->plot.title, "chart title (default: Y vs X, by FACET)");
  cmd->add_option("--xlabel", s->plot.xlabel,
                  "x axis title (default: from the column, with units)");
  cmd->add_option("--ylabel", s->plot.ylabel,
                  "y axis title (default: from the column, with units)");
  cmd->add_option("--width", s->width,
                  "print width, e.g. 3.3in (one column of a two-column paper), 7in, 17cm, 240pt; "
                  "text is then 7 pt × --font-scale and the legend goes under the panels");
  cmd->add_option("--height", s->height,
                  "print height, likewise (default with --width: panels 1.6 times as wide as "
                  "high)");
  cmd->add_option("--font-scale", s->plot.font_scale,
                  "every text size times this (default 1); text below 7 pt is refused");
  cmd->add_option("--y-scales", s->y_scales,
                  "per-panel y ranges: shared, free, or auto (free when the panels' largest "
                  "values differ 10x or more; the default)")
      ->check(CLI::IsMember({"auto", "shared", "free"}));
  cmd->add_option("--dpi", s->plot.dpi, "PNG resolution in pixels per inch (default 300)");
  cmd->add_option("-o,--output", s->output,
                  "file to write: .svg, .pdf or .png ('-': SVG on standard output)")
      ->required();
  return {cmd, [s] {
            auto options = s->plot;
            for (const auto& filter : s->where) {
              const auto equals = filter.find('=');
              if (equals == std::string::npos || equals == 0) {
                throw Error(
                    fmt::format("--where {}: expected COL=VALUE, e.g. system=balanced", filter));
              }
              options.where.emplace_back(filter.substr(0, equals), filter.substr(equals + 1));
            }
            if (!s->width.empty()) options.width = parse_length(s->width, "--width");
            if (!s->height.empty()) options.height = parse_length(s->height, "--height");
            options.y_scales = s->y_scales == "free"     ? PlotOptions::YScales::Free
                               : s->y_scales == "shared" ? PlotOptions::YScales::Shared
                                                         : PlotOptions::YScales::Auto;
            const auto format = plot_format(s->output);  // before reading: fail fast
            const auto table = io::read_data_table(s->results);
            emit(s->output, plot_chart(table, options, format));
          }};
}

}  // namespace pipetab::cli
