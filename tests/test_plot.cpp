// Results tables (CSV, JSON Lines) and the line charts drawn from them: the SVG is parsed with
// expat, so every test also checks that it is well-formed XML.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "report/plot/axes.hpp"
#include <expat.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipetab/error.hpp"
#include "pipetab/io/data_table.hpp"
#include "pipetab/report/plot.hpp"

namespace pipetab {
namespace {

using io::DataTable;
using io::parse_data_table;

// ---------------------------------------------------------------------------------------------
// A small DOM over expat.

struct Node {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;
  std::vector<std::unique_ptr<Node>> children;
  Node* parent = nullptr;

  std::string attr(const std::string& key) const {
    const auto it = attributes.find(key);
    return it == attributes.end() ? std::string() : it->second;
  }
  bool has(const std::string& key) const { return attributes.count(key) > 0; }
};

struct Builder {
  std::unique_ptr<Node> root;
  Node* current = nullptr;
};

void on_start(void* data, const XML_Char* name, const XML_Char** attributes) {
  auto& b = *static_cast<Builder*>(data);
  auto node = std::make_unique<Node>();
  node->name = name;
  for (std::size_t i = 0; attributes[i] != nullptr; i += 2)
    node->attributes[attributes[i]] = attributes[i + 1];
  node->parent = b.current;
  Node* raw = node.get();
  if (b.current == nullptr) {
    b.root = std::move(node);
  } else {
    b.current->children.push_back(std::move(node));
  }
  b.current = raw;
}

void on_end(void* data, const XML_Char*) {
  auto& b = *static_cast<Builder*>(data);
  b.current = b.current->parent;
}

void on_text(void* data, const XML_Char* text, int length) {
  auto& b = *static_cast<Builder*>(data);
  if (b.current != nullptr) b.current->text.append(text, static_cast<std::size_t>(length));
}

// The document, or null with `error` set if it is not well-formed XML.
std::unique_ptr<Node> parse_xml(const std::string& text, std::string& error) {
  Builder builder;
  XML_Parser parser = XML_ParserCreate("UTF-8");
  XML_SetUserData(parser, &builder);
  XML_SetElementHandler(parser, on_start, on_end);
  XML_SetCharacterDataHandler(parser, on_text);
  const bool ok =
      XML_Parse(parser, text.data(), static_cast<int>(text.size()), 1) != XML_STATUS_ERROR;
  if (!ok) {
    error = std::string(XML_ErrorString(XML_GetErrorCode(parser))) + " at line " +
            std::to_string(XML_GetCurrentLineNumber(parser));
  }
  XML_ParserFree(parser);
  return ok ? std::move(builder.root) : nullptr;
}

void collect(const Node& node, const std::string& name, const std::string& cls,
             std::vector<const Node*>& out) {
  if ((name.empty() || node.name == name) && (cls.empty() || node.attr("class") == cls))
    out.push_back(&node);
  for (const auto& child : node.children)
    collect(*child, name, cls, out);
}

// Elements named `name` (any if empty) with class `cls` (any if empty), in document order.
std::vector<const Node*> all(const Node& root, const std::string& name,
                             const std::string& cls = {}) {
  std::vector<const Node*> out;
  collect(root, name, cls, out);
  return out;
}

std::vector<std::string> texts(const Node& root, const std::string& cls) {
  std::vector<std::string> out;
  for (const auto* node : all(root, "text", cls))
    out.push_back(node->text);
  return out;
}

bool contains(const std::vector<std::string>& values, const std::string& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// A parsed chart; the test fails if the SVG is not well-formed.
struct Chart {
  std::string svg;
  std::unique_ptr<Node> root;
};

Chart chart(const std::string& text, const PlotOptions& options,
            const std::string& file = "r.csv") {
  Chart c;
  c.svg = plot_svg(parse_data_table(text, file), options);
  std::string error;
  c.root = parse_xml(c.svg, error);
  EXPECT_TRUE(c.root) << error << "\n" << c.svg;
  if (!c.root) c.root = std::make_unique<Node>();
  return c;
}

PlotOptions options(std::string x, std::vector<std::string> y, std::string series) {
  PlotOptions o;
  o.x = std::move(x);
  o.y = std::move(y);
  o.series = std::move(series);
  return o;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string csv_error(const std::string& text) {
  return error_of([&] { parse_data_table(text, "t.csv"); });
}

std::string plot_error(const std::string& text, const PlotOptions& o) {
  return error_of([&] { plot_svg(parse_data_table(text, "r.csv"), o); });
}

// Three schedules × four microbatch counts, in an order that is not sorted by x.
const std::string kResults =
    "schedule,system,params.microbatches,simulation.runtime_s,table.bubble_ratio,"
    "formula.bubble_ratio\n"
    "gpipe,balanced,8,4,0.3,0.3\n"
    "gpipe,balanced,2,2,0.6,0.6\n"
    "gpipe,balanced,4,3,0.45,0.45\n"
    "gpipe,balanced,16,6,0.2,0.2\n"
    "1f1b,balanced,2,1.9,0.6,0.6\n"
    "1f1b,balanced,4,2.8,0.45,0.45\n"
    "1f1b,balanced,8,3.5,0.3,0.3\n"
    "1f1b,balanced,16,5,0.2,0.2\n"
    "chimera,balanced,2,1.5,0.5,0.4\n"
    "chimera,balanced,4,2,0.4,0.3\n"
    "chimera,balanced,8,3,0.25,0.2\n"
    "chimera,balanced,16,4.5,0.15,0.1\n";

std::string fmt_line(const char* schedule, const char* system, int devices, double value) {
  return fmt::format("{},{},{},{}\n", schedule, system, devices, value);
}

// A CSV row as the JSON Lines object sweep would write: numbers as numbers.
std::string fmt_json(const std::vector<std::string>& columns, const std::vector<std::string>& row) {
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < columns.size(); ++i) {
    std::size_t used = 0;
    try {
      if (row[i].find('.') == std::string::npos) {
        const long long whole = std::stoll(row[i], &used);
        if (used == row[i].size()) {
          object[columns[i]] = whole;
          continue;
        }
      }
      const double value = std::stod(row[i], &used);
      if (used == row[i].size()) {
        object[columns[i]] = value;
        continue;
      }
    } catch (const std::exception&) {
      // not a number: a string
    }
    object[columns[i]] = row[i];
  }
  return object.dump();
}

// ---------------------------------------------------------------------------------------------
// Reading results.

TEST(DataTable, CsvWithQuotingAndLines) {
  const auto t = parse_data_table(
      "\xEF\xBB\xBF"
      "a,b,c\r\n"
      "1,\"x, y\",\"say \"\"hi\"\"\"\r\n"
      "2,\"two\nlines\",\r\n"
      "\n"
      "3,,\"\"\n"
      "\n\n",
      "t.csv");
  EXPECT_EQ(t.file, "t.csv");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(t.rows.size(), 3U);
  EXPECT_EQ(t.rows[0].cells(3), (std::vector<std::string>{"1", "x, y", "say \"hi\""}));
  EXPECT_EQ(t.rows[1].cells(3), (std::vector<std::string>{"2", "two\nlines", ""}));
  EXPECT_EQ(t.rows[2].cells(3), (std::vector<std::string>{"3", "", ""}));
  EXPECT_EQ(t.lines, (std::vector<int>{2, 3, 6}));
  EXPECT_EQ(t.column("b"), 1);
  EXPECT_EQ(t.column("nope"), -1);
  // No final line end, and a last empty field.
  const auto u = parse_data_table("a,b\n1,", "t.csv");
  ASSERT_EQ(u.rows.size(), 1U);
  EXPECT_EQ(u.rows[0].cells(2), (std::vector<std::string>{"1", ""}));
}

TEST(DataTable, EmptyAndHeaderOnly) {
  for (const char* text : {"", "  \n\r\n", "a,b,c\n", "a,b,c"}) {
    const auto t = parse_data_table(text, "t.csv");
    EXPECT_TRUE(t.rows.empty()) << text;
    EXPECT_TRUE(t.lines.empty()) << text;
  }
  EXPECT_EQ(parse_data_table("a,b,c", "t.csv").columns.size(), 3U);
}

TEST(DataTable, CsvErrorsAreLocated) {
  EXPECT_EQ(csv_error("a,b,c\n1,2,3\n4,\"5,6\n"),
            "t.csv:3:3: unterminated quoted field (the quote opened here is never closed)");
  EXPECT_EQ(csv_error("a,b,c\n1,2,3\n4,5\n"), "t.csv:3:4: row has 2 fields, the header has 3");
  EXPECT_EQ(csv_error("a,b\n1,2,3,4\n"), "t.csv:2:5: row has 4 fields, the header has 2");
  EXPECT_EQ(csv_error("a,b\n1,2\"3\n"),
            "t.csv:2:4: quote inside an unquoted field (quote the whole field and double the "
            "quote: \"a\"\"b\")");
  EXPECT_EQ(
      csv_error("a,b\n1,\"2\"3\n"),
      "t.csv:2:6: unexpected '3' after a quoted field (write \"\" for a quote inside quotes)");
  EXPECT_EQ(csv_error("a,b,a\n"), "t.csv:1:5: duplicate column 'a' (also column 1)");
  EXPECT_EQ(csv_error("a,,b\n"), "t.csv:1:3: empty column name in the header");
  EXPECT_EQ(csv_error("a,b\r1,2\n"), "t.csv:1:4: carriage return not followed by a line feed");
  // ParseError carries the position.
  try {
    parse_data_table("a\n\"", "t.csv");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_EQ(e.column(), 1);
  }
}

TEST(DataTable, JsonLines) {
  const auto t = parse_data_table(
      "{\"schedule\": \"1f1b\", \"params.devices\": 4, \"x\": 0.1, \"ok\": true}\r\n"
      "\n"
      "  {\"params.devices\": 8, \"schedule\": \"gpipe\", \"peak\": [1, 2.5, 3], \"gone\": null, "
      "\"ok\": false, \"big\": 18446744073709551615, \"tiny\": 1e-7, \"neg\": -3}\n",
      "r.jsonl");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"schedule", "params.devices", "x", "ok", "peak",
                                                 "gone", "big", "tiny", "neg"}));
  ASSERT_EQ(t.rows.size(), 2U);
  EXPECT_EQ(t.rows[0].cells(9),
            (std::vector<std::string>{"1f1b", "4", "0.1", "true", "", "", "", "", ""}));
  EXPECT_EQ(t.rows[1].cells(9), (std::vector<std::string>{"gpipe", "8", "", "false", "1;2.5;3", "",
                                                          "18446744073709551615", "1e-07", "-3"}));
  EXPECT_EQ(t.lines, (std::vector<int>{1, 3}));
}

TEST(DataTable, JsonLinesErrorsAreLocated) {
  const auto error = [](const std::string& text) {
    return error_of([&] { parse_data_table(text, "r.jsonl"); });
  };
  EXPECT_EQ(error("{\"a\": 1}\n[1, 2]\n"),
            "r.jsonl:2:1: line is not a JSON object (JSON Lines results hold one flat object per "
            "line)");
  EXPECT_EQ(error("{\"a\": 1}\n{\"a\": 2,}\n").rfind("r.jsonl:2:9: invalid JSON: ", 0), 0U)
      << error("{\"a\": 1}\n{\"a\": 2,}\n");
  EXPECT_EQ(error("{\"a\": 1}\n{\"a\": {\"b\": 1}}\n"),
            "r.jsonl:2:2: key 'a' holds an object; results rows are flat (write nested keys as "
            "dotted names, \"a.name\")");
  EXPECT_EQ(error("{\"a\": 1, \"b\": 2, \"a\": 3}\n"), "r.jsonl:1:2: duplicate key 'a'");
  EXPECT_EQ(error("{\"a\": [[1]]}\n").rfind("r.jsonl:1:2: key 'a' holds an array of arrays", 0),
            0U);
  EXPECT_EQ(error("{\"a\": 1}\n{\"a\": 1e999}\n").rfind("r.jsonl:2:1: invalid JSON", 0), 0U)
      << error("{\"a\": 1}\n{\"a\": 1e999}\n");
}

TEST(DataTable, ReadFileErrors) {
  const auto message = error_of([] { io::read_data_table("/nonexistent/results.csv"); });
  EXPECT_EQ(message.rfind("/nonexistent/results.csv: cannot read", 0), 0U) << message;
}

// ---------------------------------------------------------------------------------------------
// Charts.

TEST(Plot, OneLinePerSeriesWithLegendAndTitles) {
  const auto c =
      chart(kResults, options("params.microbatches", {"simulation.runtime_s"}, "schedule"));
  const Node& svg = *c.root;
  EXPECT_EQ(svg.name, "svg");
  EXPECT_EQ(svg.attr("xmlns"), "http://www.w3.org/2000/svg");
  EXPECT_EQ(svg.attr("version"), "1.1");
  // Sized in points, the viewBox in the same units.
  const auto points_of = [](const std::string& length) {
    EXPECT_EQ(length.substr(length.size() - 2), "pt") << length;
    return length.substr(0, length.size() - 2);
  };
  EXPECT_EQ(svg.attr("viewBox"),
            "0 0 " + points_of(svg.attr("width")) + " " + points_of(svg.attr("height")));
  EXPECT_NE(svg.attr("font-family").find("sans-serif"), std::string::npos);
  ASSERT_FALSE(svg.children.empty());
  EXPECT_EQ(c.svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg ", 0), 0U);
  const auto rects = all(svg, "rect");
  ASSERT_FALSE(rects.empty());
  EXPECT_EQ(rects.front()->attr("fill"), "white");
  EXPECT_EQ(c.svg.find("href"), std::string::npos) << "no external resources";

  const auto series = all(svg, "g", "series");
  ASSERT_EQ(series.size(), 3U);
  const std::vector<std::string> names = {"gpipe", "1f1b", "chimera"};
  const std::vector<std::string> colours = {"#0072B2", "#E69F00", "#009E73"};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(series[i]->attr("data-series"), names[i]);
    EXPECT_EQ(series[i]->attr("data-y"), "simulation.runtime_s");
    const auto lines = all(*series[i], "polyline");
    ASSERT_EQ(lines.size(), 1U);
    EXPECT_EQ(lines[0]->attr("stroke"), colours[i]);
    EXPECT_FALSE(lines[0]->has("stroke-dasharray"));
    EXPECT_EQ(all(*series[i], "circle").size() + all(*series[i], "path").size(), 4U)
        << "a marker at every point";
  }
  // Points sorted by x, in data units.
  EXPECT_EQ(series[0]->attr("data-points"), "2,2 4,3 8,4 16,6");
  EXPECT_EQ(series[2]->attr("data-points"), "2,1.5 4,2 8,3 16,4.5");

  const auto legend = texts(svg, "legend-entry");
  EXPECT_EQ(legend, names);
  EXPECT_EQ(texts(svg, "legend-title"), std::vector<std::string>{"schedule"});
  EXPECT_EQ(texts(svg, "xtitle"), std::vector<std::string>{"microbatches M"});
  EXPECT_EQ(texts(svg, "ytitle"), std::vector<std::string>{"simulated runtime (s)"});
  EXPECT_EQ(texts(svg, "title"), std::vector<std::string>{"simulated runtime vs microbatches M"});
  EXPECT_TRUE(texts(svg, "subtitle").empty());

  // The legend lies right of every panel.
  double panel_right = 0;
  for (const auto* panel : all(svg, "g", "panel")) {
    for (const auto* rect : all(*panel, "rect")) {
      panel_right =
          std::max(panel_right, std::stod(rect->attr("x")) + std::stod(rect->attr("width")));
    }
  }
  for (const auto* text : all(svg, "text", "legend-entry"))
    EXPECT_GT(std::stod(text->attr("x")), panel_right);

  // Byte for byte the same every time.
  EXPECT_EQ(plot_svg(parse_data_table(kResults, "r.csv"),
                     options("params.microbatches", {"simulation.runtime_s"}, "schedule")),
            c.svg);
}

TEST(Plot, TickLabelsAreCompact) {
  const auto c =
      chart(kResults, options("params.microbatches", {"table.bubble_ratio"}, "schedule"));
  const auto y = texts(*c.root, "ytick");
  ASSERT_GE(y.size(), 3U);
  for (const auto& label : y) {
    EXPECT_LE(label.size(), 4U) << label;
    EXPECT_EQ(label.find("000"), std::string::npos) << label;
  }
  EXPECT_TRUE(contains(y, "0.3")) << ::testing::PrintToString(y);
  EXPECT_TRUE(contains(texts(*c.root, "xtick"), "10"));
  EXPECT_EQ(texts(*c.root, "ytitle"), std::vector<std::string>{"bubble ratio (table)"});
}

TEST(Plot, FacetsAreSmallMultiplesWithSharedAxes) {
  std::string text = "schedule,system,params.devices,simulation.idle_ratio\n";
  const char* systems[] = {"compute-bound", "balanced", "network-bound", "dgx-h100"};
  for (int s = 0; s < 4; ++s) {
    for (const char* schedule : {"gpipe", "1f1b"}) {
      for (int d = 2; d <= 8; d *= 2)
        text += fmt_line(schedule, systems[s], d, 0.1 * (s + 1) + 0.01 * d);
    }
  }
  PlotOptions o = options("params.devices", {"simulation.idle_ratio"}, "schedule");
  o.facet = "system";
  const auto c = chart(text, o);
  const auto panels = all(*c.root, "g", "panel");
  ASSERT_EQ(panels.size(), 4U);
  EXPECT_EQ(texts(*c.root, "panel-title"),
            (std::vector<std::string>{"system = compute-bound", "system = balanced",
                                      "system = network-bound", "system = dgx-h100"}));
  EXPECT_EQ(all(*c.root, "g", "series").size(), 8U);
  // Shared ranges: every panel has the same tick labels.
  const auto first = texts(*panels[0], "ytick");
  for (const auto* panel : panels) {
    EXPECT_EQ(texts(*panel, "ytick"), first);
    EXPECT_EQ(texts(*panel, "xtick"), texts(*panels[0], "xtick"));
  }
  // At most three panels a row: the fourth starts a new row, under the first.
  const auto frame = [](const Node* panel) { return all(*panel, "rect").front(); };
  EXPECT_EQ(frame(panels[3])->attr("x"), frame(panels[0])->attr("x"));
  EXPECT_GT(std::stod(frame(panels[3])->attr("y")), std::stod(frame(panels[0])->attr("y")));
  EXPECT_EQ(frame(panels[2])->attr("y"), frame(panels[0])->attr("y"));
  EXPECT_EQ(texts(*c.root, "title"),
            std::vector<std::string>{"idle ratio vs pipeline depth S by system"});
  EXPECT_EQ(texts(*c.root, "xtitle"), std::vector<std::string>{"pipeline depth S (devices)"});
}

TEST(Plot, LogAxesHaveDecadeTicks) {
  std::string text = "schedule,params.microbatches,simulation.runtime_s\n";
  for (int m = 1; m <= 1000; m *= 10)
    text += "a," + std::to_string(m) + "," + std::to_string(m * 3) + "\n";
  PlotOptions o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  o.logx = true;
  o.logy = true;
  auto c = chart(text, o);
  auto x = texts(*c.root, "xtick");
  EXPECT_EQ(x, (std::vector<std::string>{"1", "10", "100", "1000"}));
  const auto y = texts(*c.root, "ytick");
  EXPECT_TRUE(contains(y, "10") && contains(y, "100") && contains(y, "1000"))
      << ::testing::PrintToString(y);
  // Equal steps in log space.
  const auto points = all(*c.root, "polyline").front()->attr("points");
  std::istringstream in(points);
  std::vector<double> px;
  for (std::string pair; in >> pair;)
    px.push_back(std::stod(pair.substr(0, pair.find(','))));
  ASSERT_EQ(px.size(), 4U);
  EXPECT_NEAR(px[1] - px[0], px[2] - px[1], 0.2);
  EXPECT_NEAR(px[3] - px[2], px[2] - px[1], 0.2);

  // Under two decades, 2 and 5 are labelled too.
  text = "schedule,params.microbatches,simulation.runtime_s\na,1,1\na,2,2\na,64,3\n";
  o.logy = false;
  c = chart(text, o);
  x = texts(*c.root, "xtick");
  EXPECT_EQ(x, (std::vector<std::string>{"1", "2", "5", "10", "20", "50"}));
}

TEST(Plot, RelativeToABaselineSeries) {
  PlotOptions o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  o.relative_to = "gpipe";
  const auto c = chart(kResults, o);
  const auto series = all(*c.root, "g", "series");
  ASSERT_EQ(series.size(), 3U);
  EXPECT_EQ(series[0]->attr("data-series"), "gpipe");
  EXPECT_EQ(series[0]->attr("data-points"), "2,1 4,1 8,1 16,1");
  EXPECT_EQ(series[2]->attr("data-points"), "2,0.75 4,0.6666666666666666 8,0.75 16,0.75");
  EXPECT_EQ(texts(*c.root, "ytitle"),
            std::vector<std::string>{"simulated runtime relative to gpipe"});
  EXPECT_EQ(texts(*c.root, "legend-entry"),
            (std::vector<std::string>{"gpipe (baseline)", "1f1b", "chimera"}));

  // A missing baseline point is named.
  const std::string gap = kResults.substr(0, kResults.find("gpipe,balanced,2,")) +
                          kResults.substr(kResults.find("gpipe,balanced,4,"));
  EXPECT_EQ(plot_error(gap, o),
            "r.csv:5: --relative-to gpipe: series 'gpipe' has no simulation.runtime_s at x = 2 "
            "to divide series '1f1b' by");
  o.relative_to = "nosuch";
  EXPECT_EQ(plot_error(kResults, o),
            "plot: --relative-to 'nosuch': no plotted series is 'nosuch'; the series are 'gpipe', "
            "'1f1b', 'chimera'");
}

TEST(Plot, SeveralYColumnsGetDashesAndALegend) {
  const auto c = chart(
      kResults,
      options("params.microbatches", {"table.bubble_ratio", "formula.bubble_ratio"}, "schedule"));
  const auto series = all(*c.root, "g", "series");
  ASSERT_EQ(series.size(), 6U);
  std::map<std::string, std::string> dash_of;
  for (const auto* s : series) {
    const auto line = all(*s, "polyline").front();
    dash_of[s->attr("data-y")] = line->attr("stroke-dasharray");
  }
  EXPECT_EQ(dash_of["table.bubble_ratio"], "");
  EXPECT_FALSE(dash_of["formula.bubble_ratio"].empty());
  // The second column's markers: the series' shape, larger, so that both show where the
  // columns coincide.
  ASSERT_EQ(all(*series[0], "circle").size(), 4U);
  ASSERT_EQ(all(*series[1], "circle").size(), 4U);
  EXPECT_GT(std::stod(all(*series[1], "circle")[0]->attr("r")),
            std::stod(all(*series[0], "circle")[0]->attr("r")));
  EXPECT_EQ(texts(*c.root, "ytitle"), std::vector<std::string>{"bubble ratio"});
  EXPECT_EQ(texts(*c.root, "legend-entry"),
            (std::vector<std::string>{"gpipe", "1f1b", "chimera", "bubble ratio (table)",
                                      "bubble ratio (formula)"}));
  EXPECT_EQ(texts(*c.root, "legend-title"), (std::vector<std::string>{"schedule", "line style"}));
}

TEST(Plot, SeveralColumnsMakeOneSeriesOrFacet) {
  const std::string text =
      "schedule,params.split,system,params.devices,params.devices.copy,simulation.runtime_s\n"
      "chimera,,a,4,4,2\n"
      "chimera,,a,8,8,4\n"
      "chimera-asym,1:2,a,4,4,1\n"
      "chimera-asym,1:2,a,8,8,3\n"
      "chimera-asym,1:3,a,4,4,1.5\n"
      "chimera-asym,1:3,a,8,8,2\n";
  PlotOptions o = options("params.devices", {"simulation.runtime_s"}, "schedule, params.split");
  o.relative_to = "chimera";
  o.facet = "system,params.devices.copy";
  o.x = "params.devices";
  const auto c = chart(text, o);
  const auto series = all(*c.root, "g", "series");
  ASSERT_EQ(series.size(), 6U);
  EXPECT_EQ(series[1]->attr("data-series"), "chimera-asym (split 1:2)");
  EXPECT_EQ(series[1]->attr("data-facet"), "a, 4");
  EXPECT_EQ(series[1]->attr("data-points"), "4,0.5");
  EXPECT_EQ(texts(*c.root, "legend-title"), std::vector<std::string>{"schedule, split"});
  EXPECT_EQ(texts(*c.root, "panel-title"),
            (std::vector<std::string>{"system = a, params.devices.copy = 4",
                                      "system = a, params.devices.copy = 8"}));
  EXPECT_EQ(texts(*c.root, "title"),
            std::vector<std::string>{"simulated runtime relative to chimera vs pipeline depth S by "
                                     "system and params.devices.copy"});
  o.series = "schedule,nosuch";
  EXPECT_EQ(plot_error(text, o).rfind("plot: --series: unknown column 'nosuch'", 0), 0U);
}

TEST(Plot, OverridesFiltersAndSkippedRows) {
  const std::string text =
      "schedule,system,params.microbatches,simulation.runtime_s,status\n"
      "gpipe,a,1,1,ok\n"
      "gpipe,a,2,2,ok\n"
      "gpipe,b,1,5,ok\n"
      "hanayo,a,1,,skipped: M must equal S\n"
      "hanayo,a,2,0.5,ok\n";
  PlotOptions o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  o.where = {{"system", "a"}};
  o.title = "My <chart> & \"stuff\"";
  o.xlabel = "M";
  o.ylabel = "seconds";
  const auto c = chart(text, o);
  const auto series = all(*c.root, "g", "series");
  ASSERT_EQ(series.size(), 2U);
  EXPECT_EQ(series[0]->attr("data-points"), "1,1 2,2");
  EXPECT_EQ(series[1]->attr("data-points"), "2,0.5");
  EXPECT_TRUE(all(*series[1], "polyline").empty()) << "one point: just its marker";
  EXPECT_EQ(all(*series[1], "circle").size() + all(*series[1], "path").size(), 1U);
  EXPECT_EQ(texts(*c.root, "title"), std::vector<std::string>{"My <chart> & \"stuff\""});
  // The filter is what the command did, not what the chart shows: in the description, never
  // on the figure (issue 13).
  EXPECT_TRUE(texts(*c.root, "subtitle").empty());
  for (const auto* t : all(*c.root, "text"))
    EXPECT_EQ(t->text.find("rows with"), std::string::npos) << t->text;
  ASSERT_EQ(all(*c.root, "desc").size(), 1U);
  EXPECT_EQ(all(*c.root, "desc")[0]->text, "rows with system = a");
  EXPECT_EQ(texts(*c.root, "xtitle"), std::vector<std::string>{"M"});
  EXPECT_EQ(texts(*c.root, "ytitle"), std::vector<std::string>{"seconds"});

  o.where = {{"system", "c"}};
  EXPECT_EQ(plot_error(text, o), "plot: --where system=c: no row matches; system holds 'a', 'b'");
}

TEST(Plot, BytesAndEqualValues) {
  const std::string text =
      "schedule,params.devices,simulation.peak_memory_max_bytes\n"
      "a,2,40000000000\na,4,45000000000\na,8,52000000000\n";
  auto c = chart(text, options("params.devices", {"simulation.peak_memory_max_bytes"}, "schedule"));
  EXPECT_EQ(texts(*c.root, "ytitle"), std::vector<std::string>{"peak memory per device (bytes)"});
  const auto y = texts(*c.root, "ytick");
  ASSERT_FALSE(y.empty());
  for (const auto& label : y)
    EXPECT_EQ(label.substr(label.size() - 3), " GB") << label;
  EXPECT_TRUE(contains(y, "40 GB") || contains(y, "40.0 GB")) << ::testing::PrintToString(y);

  // All y equal: still a range, with ticks around the value.
  c = chart("s,x,y\na,1,3\na,2,3\n", options("x", {"y"}, "s"));
  EXPECT_GE(texts(*c.root, "ytick").size(), 2U);
  EXPECT_EQ(c.svg.find("nan"), std::string::npos);
  EXPECT_EQ(c.svg.find("inf"), std::string::npos);
  c = chart("s,x,y\na,1,0\n", options("x", {"y"}, "s"));
  EXPECT_TRUE(contains(texts(*c.root, "ytick"), "0"));
  // Differences at double precision, and values whose range overflows.
  c = chart("s,x,y\na,1,1e300\na,2,1.0000000000000002e300\n", options("x", {"y"}, "s"));
  EXPECT_GE(texts(*c.root, "ytick").size(), 2U);
  EXPECT_EQ(c.svg.find("nan"), std::string::npos);
  // A range wider than the largest double still draws: axes compute in scaled coordinates.
  c = chart("s,x,y\na,1,1.7e308\na,2,-1.7e308\n", options("x", {"y"}, "s"));
  EXPECT_TRUE(contains(texts(*c.root, "ytick"), "0"))
      << ::testing::PrintToString(texts(*c.root, "ytick"));
  EXPECT_EQ(c.svg.find("nan"), std::string::npos);
  EXPECT_EQ(c.svg.find("inf"), std::string::npos);
}

TEST(Plot, UnusualTextStaysWellFormed) {
  const std::string text =
      "schedule,x,y\n"
      "\"<a & \"\"b\"\">\",1,2\n"
      "bad\xff\xfe\x01utf8,1,3\n"
      "caf\xc3\xa9,1,4\n";
  const auto c = chart(text, options("x", {"y"}, "schedule"));
  const auto legend = texts(*c.root, "legend-entry");
  ASSERT_EQ(legend.size(), 3U);
  EXPECT_EQ(legend[0], "<a & \"b\">");
  EXPECT_EQ(legend[2], "caf\xc3\xa9");
}

TEST(Plot, JsonLinesGivesTheSameChartAsCsv) {
  std::string jsonl;
  const auto t = parse_data_table(kResults, "r.csv");
  for (const auto& row : t.rows) {
    jsonl += fmt_json(t.columns, row.cells(t.columns.size())) + "\n";
  }
  const auto o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  EXPECT_EQ(plot_svg(parse_data_table(jsonl, "r.jsonl"), o), plot_svg(t, o));
}

TEST(Plot, Errors) {
  auto o = options("params.micro", {"simulation.runtime_s"}, "schedule");
  EXPECT_EQ(plot_error(kResults, o),
            "plot: --x: unknown column 'params.micro'; the columns of r.csv are: schedule, system, "
            "params.microbatches, simulation.runtime_s, table.bubble_ratio, formula.bubble_ratio");
  o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  o.facet = "sys";
  EXPECT_EQ(plot_error(kResults, o).rfind("plot: --facet: unknown column 'sys'; the columns", 0),
            0U);

  const std::string bad_x = "schedule,params.microbatches,simulation.runtime_s\na,1,2\na,eight,3\n";
  o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  EXPECT_EQ(plot_error(bad_x, o),
            "r.csv:3: column 'params.microbatches' holds 'eight', expected a number");
  EXPECT_EQ(plot_error("s,x,y\na,1,1;2;3\n", options("x", {"y"}, "s"))
                .rfind("r.csv:2: column 'y' holds '1;2;3', expected a number (it is a list", 0),
            0U);

  // Two rows at one point: an error that names both, never an average.
  o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  const std::string two_systems = kResults + "gpipe,slow,8,9,0.3,0.3\n";
  EXPECT_EQ(plot_error(two_systems, o),
            "r.csv:2 and r.csv:14 both give series 'gpipe' at x = 8: filter with --where or add "
            "--facet (the rows differ in system)");
  // Sweep's running index tells every row apart; it is no hint.
  EXPECT_EQ(plot_error("index,s,x,y\n0,a,1,1\n1,a,1,2\n", options("x", {"y"}, "s")),
            "r.csv:2 and r.csv:3 both give series 'a' at x = 1: filter with --where or add "
            "--facet");
  o.facet = "system";
  EXPECT_NO_THROW(plot_svg(parse_data_table(two_systems, "r.csv"), o));
  o.facet = "table.bubble_ratio";
  EXPECT_EQ(plot_error(two_systems, o),
            "r.csv:2 and r.csv:14 both give series 'gpipe' at x = 8 (facet bubble ratio (table) = "
            "0.3): filter with --where or add --facet (the rows differ in system)");

  // Log axes need positive values.
  o = options("x", {"y"}, "s");
  o.logx = true;
  EXPECT_EQ(plot_error("s,x,y\na,1,1\na,0,2\n", o),
            "r.csv:3: column 'x' holds 0; --logx needs values above 0");
  o = options("x", {"y"}, "s");
  o.logy = true;
  EXPECT_EQ(plot_error("s,x,y\na,1,1\na,2,-2\n", o),
            "r.csv:3: column 'y' holds -2; --logy needs values above 0");

  // Nothing left to draw.
  EXPECT_EQ(plot_error("s,x,y\na,1,\n", options("x", {"y"}, "s")),
            "plot: nothing to draw: r.csv has 1 row, 1 left after --where, and none of them has a "
            "value in y");
  EXPECT_EQ(plot_error("", options("x", {"y"}, "s")),
            "plot: --x: unknown column 'x'; the columns of r.csv are: (none: the file is empty)");
}

// ---------------------------------------------------------------------------------------------
// The command line, end to end.

class PlotCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pipetab-plot-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string slurp(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Exit code and stderr of `pipetab ARGS`.
  std::pair<int, std::string> run(const std::string& args) const {
    const auto err = dir_ / "stderr";
    const std::string command = std::string(PIPETAB_BINARY) + " " + args + " > " +
                                (dir_ / "stdout").string() + " 2> " + err.string() + " < /dev/null";
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(err)};
  }
  std::string file(const std::string& name, const std::string& text) const {
    const auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  std::filesystem::path dir_;
};

TEST_F(PlotCli, WritesAnSvgFile) {
  const auto results = file("results.csv", kResults);
  const auto svg = (dir_ / "chart.svg").string();
  auto [code, err] = run("plot " + results +
                         " --x params.microbatches --y table.bubble_ratio --y formula.bubble_ratio "
                         "--series schedule --facet system --where system=balanced --logx "
                         "--title 'Bubbles' -o " +
                         svg);
  ASSERT_EQ(code, 0) << err;
  EXPECT_TRUE(err.empty()) << err;
  const auto text = slurp(svg);
  std::string error;
  const auto root = parse_xml(text, error);
  ASSERT_TRUE(root) << error;
  EXPECT_EQ(all(*root, "g", "series").size(), 6U);
  EXPECT_EQ(texts(*root, "title"), std::vector<std::string>{"Bubbles"});
  EXPECT_EQ(texts(*root, "panel-title"), std::vector<std::string>{"system = balanced"});

  std::tie(code, err) = run("plot --help");
  EXPECT_EQ(code, 0);
  EXPECT_NE(slurp(dir_ / "stdout").find("--relative-to"), std::string::npos);
}

TEST_F(PlotCli, BadInputIsExitTwoWithOneLine) {
  const auto results = file("results.csv", kResults);
  const auto expect = [&](const std::string& args, const std::string& fragment) {
    const auto [code, err] = run(args);
    EXPECT_EQ(code, 2) << args << "\n" << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find(fragment), std::string::npos) << args << ": " << err;
  };
  const std::string out = " -o " + (dir_ / "x.svg").string();
  expect("plot " + results + " --y simulation.runtime_s --series schedule" + out, "--x");
  expect("plot " + results + " --x params.microbatches --y nope --series schedule" + out,
         "unknown column 'nope'");
  expect("plot " + results +
             " --x params.microbatches --y simulation.runtime_s --series schedule --where system" +
             out,
         "--where system: expected COL=VALUE");
  expect("plot " + file("bad.csv", "a,b\n1,\"2\n") + " --x a --y b --series a" + out,
         "bad.csv:2:3: unterminated quoted field");
  expect("plot /nonexistent.csv --x a --y b --series a" + out, "/nonexistent.csv: cannot read");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.svg"));
}

// ---------------------------------------------------------------------------------------------
// Axes for any finite data (issue 14): every range and tick computation terminates.

// A finite double from its bits: subnormals, 1e308 and everything between are as likely as
// their share of the encodings.
rc::Gen<double> finite_double() {
  return rc::gen::map(rc::gen::arbitrary<std::uint64_t>(), [](std::uint64_t bits) {
    double v = 0;
    std::memcpy(&v, &bits, sizeof v);
    return std::isfinite(v) ? v : 1.0;
  });
}

// The facts every axis must have, from the values it was set to show.
void check_axis(const plot_detail::Axis& axis, double min, double max) {
  RC_ASSERT(std::isfinite(axis.lo));
  RC_ASSERT(std::isfinite(axis.hi));
  RC_ASSERT(axis.lo < axis.hi);
  for (const double v : {min, max}) {
    const double at = axis.offset(v);
    RC_ASSERT(std::isfinite(at));
    RC_ASSERT(at >= -1e-6 * axis.length);
    RC_ASSERT(at <= axis.length * (1 + 1e-6));
  }
  const auto ticks = plot_detail::make_ticks(axis);
  RC_ASSERT(ticks.size() <= 2000U);
  std::size_t labelled = 0;
  for (const auto& t : ticks) {
    RC_ASSERT(std::isfinite(t.at));
    RC_ASSERT(t.label.find("nan") == std::string::npos);
    RC_ASSERT(t.label.find("inf") == std::string::npos);
    RC_ASSERT(t.label.size() <= 40U);
    if (!t.label.empty()) ++labelled;
  }
  RC_ASSERT(labelled >= 1U);
}

RC_GTEST_PROP(PlotAxes, LinearRangesAndTicksTerminateForAnyFiniteValues, ()) {
  double a = *finite_double(), b = *finite_double();
  if (*rc::gen::arbitrary<bool>()) b = a;  // equal values: one point
  plot_detail::Axis axis;
  axis.bytes = *rc::gen::arbitrary<bool>();
  axis.horizontal = *rc::gen::arbitrary<bool>();
  axis.length = *rc::gen::inRange(20, 2000);
  axis.font = 7;
  plot_detail::set_range(axis, std::min(a, b), std::max(a, b));
  check_axis(axis, std::min(a, b), std::max(a, b));
}

RC_GTEST_PROP(PlotAxes, LogRangesAndTicksTerminateForAnyPositiveValues, ()) {
  double a = std::abs(*finite_double()), b = std::abs(*finite_double());
  if (a == 0) a = 5e-324;
  if (b == 0) b = std::numeric_limits<double>::max();
  if (*rc::gen::arbitrary<bool>()) b = a;
  plot_detail::Axis axis;
  axis.log = true;
  axis.bytes = *rc::gen::arbitrary<bool>();
  axis.horizontal = *rc::gen::arbitrary<bool>();
  axis.length = *rc::gen::inRange(20, 2000);
  axis.font = 7;
  plot_detail::set_range(axis, std::min(a, b), std::max(a, b));
  check_axis(axis, std::min(a, b), std::max(a, b));
}

TEST(PlotAxes, ExtremeValuesDrawWithReadableLabels) {
  // The case: a subnormal on a log axis once looped until memory ran out.
  std::string text = "s,x,y\na,1,1e-320\na,2,1e-318\n";
  PlotOptions o = options("x", {"y"}, "s");
  o.logy = true;
  auto c = chart(text, o);
  auto y = texts(*c.root, "ytick");
  EXPECT_TRUE(contains(y, "1e-320") && contains(y, "1e-318")) << ::testing::PrintToString(y);
  EXPECT_EQ(all(*c.root, "g", "series")[0]->attr("data-points"), "1,1e-320 2,1e-318");
  // One subnormal point, on a log and on a linear axis.
  for (const bool log : {true, false}) {
    o.logy = log;
    c = chart("s,x,y\na,1,5e-324\n", o);
    EXPECT_GE(texts(*c.root, "ytick").size(), 2U) << log;
  }
  // The whole range of doubles on a log axis: a label every 50 or 100 decades.
  o.logy = true;
  c = chart("s,x,y\na,1,5e-324\na,2,1.7e308\n", o);
  y = texts(*c.root, "ytick");
  EXPECT_GE(y.size(), 3U);
  EXPECT_LE(y.size(), 20U) << ::testing::PrintToString(y);
  // 1e308 on a linear axis: ticks in scientific notation, no overflow.
  o.logy = false;
  c = chart("s,x,y\na,1,1e308\na,2,1.5e308\n", o);
  y = texts(*c.root, "ytick");
  EXPECT_TRUE(contains(y, "1.0e308") || contains(y, "1.2e308") || contains(y, "1.5e308"))
      << ::testing::PrintToString(y);
}

// ---------------------------------------------------------------------------------------------
// Memory bounded by the input (issue 14).

TEST(DataTable, JsonLinesRowsKeepOnlyTheirKeys) {
  // Every line a new key: columns grow, but each row holds one cell.
  std::string text;
  for (int i = 0; i < 5000; ++i)
    text += fmt::format("{{\"k{}\": {}, \"x\": {}}}\n", i, i, i);
  const auto t = parse_data_table(text, "r.jsonl");
  ASSERT_EQ(t.columns.size(), 5001U);
  EXPECT_EQ(t.columns[0], "k0");
  EXPECT_EQ(t.columns[1], "x");
  EXPECT_EQ(t.columns[5000], "k4999");
  EXPECT_EQ(t.rows[4999][5000], "4999");
  EXPECT_EQ(t.rows[4999][1], "4999");
  EXPECT_EQ(t.rows[4999][0], "");
  EXPECT_EQ(t.rows[0][5000], "");
  EXPECT_EQ(t.rows[0][999999], "") << "past the last column: missing";
  EXPECT_EQ(t.rows[2].cells(5), (std::vector<std::string>{"", "2", "", "2", ""}));
  // Keys in a different order on each line mean the same columns.
  const auto u = parse_data_table("{\"a\": 1, \"b\": 2}\n{\"b\": 3, \"a\": 4}\n", "r.jsonl");
  EXPECT_EQ(u.rows[1].cells(2), (std::vector<std::string>{"4", "3"}));
}

TEST(DataTable, TooManyDistinctColumnsIsAnError) {
  std::string text;
  for (std::size_t i = 0; i <= io::kMaxDataColumns; ++i)
    text += fmt::format("{{\"key{}\": 1}}\n", i);
  EXPECT_EQ(error_of([&] { parse_data_table(text, "r.jsonl"); }),
            fmt::format("r.jsonl:{}:2: key 'key{}' would be column {}: a results file has at most "
                        "{} distinct keys (columns)",
                        io::kMaxDataColumns + 1, io::kMaxDataColumns, io::kMaxDataColumns + 1,
                        io::kMaxDataColumns));
  std::string header = "c0";
  for (std::size_t i = 1; i <= io::kMaxDataColumns; ++i)
    header += fmt::format(",c{}", i);
  EXPECT_EQ(
      csv_error(header + "\n")
          .rfind(fmt::format("t.csv:1:{}: the header has {} columns; a results file has at most {}",
                             header.find(fmt::format(",c{}", io::kMaxDataColumns)) + 2,
                             io::kMaxDataColumns + 1, io::kMaxDataColumns),
                 0),
      0U)
      << csv_error(header + "\n");
}

// ---------------------------------------------------------------------------------------------
// Print sizes, free y scales, markers.

TEST(Plot, PrintSizeGivesExactPointsAndTextOfAtLeastSevenPoints) {
  PlotOptions o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  o.width = parse_length("3.3in", "--width");
  o.height = parse_length("2.2in", "--height");
  EXPECT_DOUBLE_EQ(o.width, 237.6);
  const auto c = chart(kResults, o);
  EXPECT_EQ(c.root->attr("width"), "237.60pt");
  EXPECT_EQ(c.root->attr("height"), "158.40pt");
  EXPECT_EQ(c.root->attr("viewBox"), "0 0 237.60 158.40");
  double smallest = 1e9;
  for (const auto* t : all(*c.root, "text")) {
    smallest = std::min(smallest, std::stod(t->attr("font-size")));
    // Everything inside the page.
    const double x = std::stod(t->attr("x")), y = std::stod(t->attr("y"));
    EXPECT_GE(x, 0) << t->text;
    EXPECT_LE(x, 237.6) << t->text;
    EXPECT_GE(y, 0) << t->text;
    EXPECT_LE(y, 158.4) << t->text;
  }
  EXPECT_DOUBLE_EQ(smallest, 7.0);
  // The legend goes under the panels: below every panel frame.
  double frame_bottom = 0;
  for (const auto* panel : all(*c.root, "g", "panel")) {
    const auto* frame = all(*panel, "rect").front();
    frame_bottom =
        std::max(frame_bottom, std::stod(frame->attr("y")) + std::stod(frame->attr("height")));
  }
  for (const auto* t : all(*c.root, "text", "legend-entry"))
    EXPECT_GT(std::stod(t->attr("y")), frame_bottom);

  // Smaller text is refused, as is a chart too small for its panels.
  o.font_scale = 0.9;
  EXPECT_EQ(plot_error(kResults, o),
            "plot: --font-scale 0.9 makes tick labels 6.3 pt; text must be at least 7 pt (use a "
            "scale of at least 1.00)");
  o.font_scale = 1;
  o.width = 72;
  o.height = 50;
  EXPECT_EQ(plot_error(kResults, o).rfind("plot: a chart of 72 pt × 50 pt leaves 1 panel of", 0),
            0U)
      << plot_error(kResults, o);
  // Only a width: the height follows.
  o.width = 500;
  o.height = 0;
  const auto d = chart(kResults, o);
  EXPECT_EQ(d.root->attr("width"), "500.00pt");
  EXPECT_GT(std::stod(d.root->attr("height")), 100.0);
}

TEST(Plot, LengthsAndFormats) {
  EXPECT_DOUBLE_EQ(parse_length("240", "--width"), 240);
  EXPECT_DOUBLE_EQ(parse_length("240pt", "--width"), 240);
  EXPECT_DOUBLE_EQ(parse_length("2.54cm", "--width"), 72);
  EXPECT_DOUBLE_EQ(parse_length("25.4mm", "--width"), 72);
  // The bound the message names is admitted, and just past it refused.
  EXPECT_DOUBLE_EQ(parse_length("200in", "--width"), 14400);
  for (const char* bad : {"", "in", "3 in", "-3in", "0", "3ft", "1e9in", "nan", "200.01in"}) {
    EXPECT_EQ(error_of([&] { parse_length(bad, "--width"); }).rfind("--width ", 0), 0U) << bad;
  }
  EXPECT_EQ(plot_format("a.svg"), PlotFormat::Svg);
  EXPECT_EQ(plot_format("-"), PlotFormat::Svg);
  EXPECT_EQ(plot_format("dir/a.PDF"), PlotFormat::Pdf);
  EXPECT_EQ(plot_format("a.png"), PlotFormat::Png);
  EXPECT_EQ(error_of([] { plot_format("a.jpg"); }),
            "plot: -o a.jpg: the format is chosen by the extension: .svg, .pdf or .png ('-' "
            "writes SVG to standard output)");
}

TEST(Plot, PanelsWhoseRangesDifferTenfoldGetTheirOwnYScale) {
  std::string text = "schedule,system,params.devices,simulation.runtime_s\n";
  for (const char* schedule : {"gpipe", "1f1b"}) {
    for (int d = 2; d <= 8; d *= 2) {
      text += fmt_line(schedule, "small", d, 1 + 0.1 * d);
      text += fmt_line(schedule, "large", d, 1000 + 100 * d);
    }
  }
  PlotOptions o = options("params.devices", {"simulation.runtime_s"}, "schedule");
  o.facet = "system";
  auto c = chart(text, o);
  auto panels = all(*c.root, "g", "panel");
  ASSERT_EQ(panels.size(), 2U);
  EXPECT_NE(texts(*panels[0], "ytick"), texts(*panels[1], "ytick"));
  EXPECT_EQ(texts(*c.root, "subtitle"), std::vector<std::string>{"y scales differ between panels"});
  // Each panel's range covers its own data: the small panel's labels stay under 10.
  for (const auto& label : texts(*panels[0], "ytick"))
    EXPECT_LT(std::stod(label), 10.0) << label;
  o.y_scales = PlotOptions::YScales::Shared;
  c = chart(text, o);
  panels = all(*c.root, "g", "panel");
  EXPECT_EQ(texts(*panels[0], "ytick"), texts(*panels[1], "ytick"));
  EXPECT_TRUE(texts(*c.root, "subtitle").empty());
  // Within 10×, shared unless asked.
  const std::string close = kResults;
  o = options("params.microbatches", {"simulation.runtime_s"}, "schedule");
  o.facet = "schedule";
  c = chart(close, o);
  panels = all(*c.root, "g", "panel");
  EXPECT_EQ(texts(*panels[0], "ytick"), texts(*panels[2], "ytick"));
  o.y_scales = PlotOptions::YScales::Free;
  c = chart(close, o);
  panels = all(*c.root, "g", "panel");
  EXPECT_NE(texts(*panels[0], "ytick"), texts(*panels[2], "ytick"));
}

// A marker's shape, as drawn: markers at one point differ in shape where their outlines do.
std::string shape_of(const Node& marker) {
  return marker.name == "circle" ? "circle" : marker.attr("d");
}

TEST(Plot, CoincidingSeriesStayVisible) {
  // Seven series on the very same points: each its own colour and marker shape, markers open
  // so that every one shows through the others.
  std::string text = "schedule,x,y\n";
  for (int s = 0; s < 7; ++s) {
    for (int x = 1; x <= 3; ++x)
      text += fmt::format("s{},{},{}\n", s, x, x);
  }
  const auto c = chart(text, options("x", {"y"}, "schedule"));
  const auto series = all(*c.root, "g", "series");
  ASSERT_EQ(series.size(), 7U);
  std::set<std::string> shapes, colours;
  for (const auto* s : series) {
    const auto* marker = s->children.back().get();
    shapes.insert(shape_of(*marker));
    colours.insert(marker->attr("stroke"));
    EXPECT_EQ(marker->attr("fill"), "none") << "open markers";
  }
  EXPECT_EQ(shapes.size(), 7U);
  EXPECT_EQ(colours.size(), 7U);
}
// ---------------------------------------------------------------------------------------------
// PDF and PNG, checked with poppler's pdfinfo and pdftotext (Debian poppler-utils).

// Standard output of a shell command, and whether it exited 0.
std::pair<bool, std::string> shell(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {false, ""};
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) && WEXITSTATUS(status) == 0, out};
}

TEST_F(PlotCli, PdfHasTheRequestedPageSizeAndItsText) {
  const auto results = file("results.csv", kResults);
  const auto pdf = (dir_ / "chart.pdf").string();
  const std::string args = "plot " + results +
                           " --x params.microbatches --y simulation.runtime_s --series schedule "
                           "--width 3.3in --height 2.2in --title Runtimes -o ";
  auto [code, err] = run(args + pdf);
  ASSERT_EQ(code, 0) << err;
  const auto bytes = slurp(pdf);
  EXPECT_EQ(bytes.rfind("%PDF-", 0), 0U);
  EXPECT_NE(bytes.find("%%EOF"), std::string::npos);
  const auto [info_ok, info] = shell("pdfinfo " + pdf);
  ASSERT_TRUE(info_ok) << "pdfinfo (Debian poppler-utils, scripts/install-deps) failed:\n" << info;
  EXPECT_NE(info.find("Pages:           1\n"), std::string::npos) << info;
  // 3.3 in × 2.2 in = 237.6 × 158.4 pt.
  EXPECT_NE(info.find("Page size:       237.6 x 158.4 pts"), std::string::npos) << info;
  EXPECT_EQ(info.find("CreationDate"), std::string::npos) << "no date: the same bytes every run";
  const auto [text_ok, text] = shell("pdftotext -layout " + pdf + " -");
  ASSERT_TRUE(text_ok);
  for (const char* expected :
       {"Runtimes", "gpipe", "1f1b", "chimera", "microbatches M", "simulated runtime"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << " in\n" << text;
  }
  // Byte-identical across runs.
  const auto again = (dir_ / "again.pdf").string();
  std::tie(code, err) = run(args + again);
  ASSERT_EQ(code, 0) << err;
  EXPECT_TRUE(slurp(again) == bytes);
}

TEST_F(PlotCli, PngHasThePixelSizeOfItsPrintSizeAndResolution) {
  const auto results = file("results.csv", kResults);
  const auto png = (dir_ / "chart.png").string();
  const auto [code, err] = run("plot " + results +
                               " --x params.microbatches --y simulation.runtime_s --series "
                               "schedule --width 3in --height 2in --dpi 150 -o " +
                               png);
  ASSERT_EQ(code, 0) << err;
  const auto bytes = slurp(png);
  ASSERT_GT(bytes.size(), 24U);
  EXPECT_EQ(bytes.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  const auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i)
      v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  EXPECT_EQ(be32(16), 450U);  // 3 in × 150 px/in
  EXPECT_EQ(be32(20), 300U);
}

TEST_F(PlotCli, UnknownExtensionOrTinyTextIsRefusedBeforeReading) {
  const auto [code, err] =
      run("plot /nonexistent.csv --x a --y b --series a -o " + (dir_ / "x.jpg").string());
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("the format is chosen by the extension"), std::string::npos) << err;
  const auto results = file("results.csv", kResults);
  const auto [code2, err2] = run("plot " + results +
                                 " --x params.microbatches --y simulation.runtime_s --series "
                                 "schedule --width 3in --font-scale 0.5 -o " +
                                 (dir_ / "x.pdf").string());
  EXPECT_EQ(code2, 2) << err2;
  EXPECT_NE(err2.find("3.5 pt; text must be at least 7 pt"), std::string::npos) << err2;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.pdf"));
}

// Issue 14: memory that runs out while an input is read or parsed is an error naming the file,
// never a chart of the rows read so far. The address space is limited with the shell's
// `ulimit -v`; the input is sparse, so the test writes little.
TEST_F(PlotCli, OutOfMemoryWhileReadingIsAnErrorNotAPartialChart) {
#ifdef PIPETAB_SANITIZED
  GTEST_SKIP() << "an address-space limit leaves no room for the sanitizers' shadow memory";
#endif
  const auto results = (dir_ / "big.csv").string();
  {
    std::ofstream out(results, std::ios::binary);
    out << "s,x,y\na,1,1\na,2,2\n";
  }
  // Then 1 GB of blank lines' worth (NUL bytes; a file hole) and two more rows.
  std::filesystem::resize_file(results, std::uintmax_t{1} << 30);
  {
    std::ofstream out(results, std::ios::binary | std::ios::app);
    out << "\na,3,3\na,4,4\n";
  }
  const auto svg = (dir_ / "x.svg").string();
  // Under the limit the file cannot be held: the command fails, naming the file, and writes
  // nothing.
  const std::string limited = "bash -c 'ulimit -v 400000; exec " + std::string(PIPETAB_BINARY) +
                              " plot " + results + " --x x --y y --series s -o " + svg + "' 2>&1";
  const auto [ok, out] = shell(limited);
  EXPECT_FALSE(ok) << out;
  EXPECT_NE(out.find(results), std::string::npos) << out;
  EXPECT_NE(out.find("too large to read"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(svg));
}
}  // namespace
}  // namespace pipetab
