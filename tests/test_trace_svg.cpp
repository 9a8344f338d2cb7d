// Traces, timeline pictures and the folded grid (issue 13): properties checked over many
// generated schedules and configurations, from the files' own contents (the trace parsed as
// JSON and read the way Perfetto reads it, the SVG parsed as XML with its colours' contrast
// computed by the WCAG 2.x formulas here, independently of the drawing code).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "helpers.hpp"
#include <expat.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/report/grid.hpp"
#include "pipetab/report/simulation.hpp"
#include "pipetab/report/trace.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/table/timing.hpp"

namespace pipetab {
namespace {

namespace fs = std::filesystem;

// The checks below report their first failed condition as text, so that a property (RC_ASSERT)
// and a plain sweep over every schedule (EXPECT_EQ) share them.
#define REQUIRE(condition)                                                           \
  do {                                                                               \
    if (!(condition))                                                                \
      return std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #condition; \
  } while (false)

// ---------------------------------------------------------------------------------------------
// Configurations: a schedule, its size and a cluster, drawn at random.

struct Config {
  std::string schedule;
  ScheduleParams params;
  std::string system, model;
  std::int32_t data_parallel = 1;
  bool explicit_costs = false;
};

std::string describe(const Config& c) {
  return c.schedule + " S=" + std::to_string(c.params.devices) +
         " M=" + std::to_string(c.params.microbatches) + " on " + c.system + " (" + c.model +
         ") dp=" + std::to_string(c.data_parallel) + (c.explicit_costs ? " explicit costs" : "");
}

// The table and its simulation, or nullopt where the schedule or the cluster refuses the
// configuration.
struct Run {
  ScheduleTable table;
  Simulation simulation;
};

std::optional<Run> simulate(const Config& c, bool record_memory = true) {
  try {
    auto table = generate(find_schedule(c.schedule), c.params);
    SimulationSetup setup;
    setup.model = io::load_model(c.model);
    setup.system = io::load_system(c.system);
    apply_settings(setup, setup.model.defaults);
    setup.layout.dp = c.data_parallel;
    if (c.explicit_costs) setup.lowering.costs = test::split_costs(1.0, 1.1, 0.7);
    setup.options.record_memory = record_memory;
    auto simulation = simulate_table(table, setup);
    return Run{std::move(table), std::move(simulation)};
  } catch (const ParamError&) {
    return std::nullopt;
  }
}

Config arbitrary_config() {
  const auto schedules = all_schedules();
  Config c;
  c.schedule = std::string(schedules[*rc::gen::inRange<std::size_t>(0, schedules.size())]->name);
  // Mostly sizes every schedule takes (even S, M a multiple of S), some that only a few do.
  const auto devices = *rc::gen::element<std::int64_t>(1, 2, 2, 3, 4, 4, 6);
  const auto microbatches =
      devices * *rc::gen::inRange<std::int64_t>(1, 5) + *rc::gen::element<std::int64_t>(0, 0, 0, 1);
  c.params = test::sm(devices, microbatches);
  c.system =
      *rc::gen::element<std::string>("ideal", "balanced", "network-bound", "dgx-h100", "dgx-a100");
  c.model = *rc::gen::element<std::string>("paper", "gpt3-1.3b");
  c.data_parallel = *rc::gen::element<std::int32_t>(1, 1, 2, 4);
  c.explicit_costs = *rc::gen::element(false, false, true);
  return c;
}

// ---------------------------------------------------------------------------------------------
// Reading a trace as Perfetto does: "ts" and "dur" are microseconds, converted to integer
// nanoseconds by truncating value × 1000 (perfetto src/trace_processor/importers/json/
// json_utils.h, CoerceToTs); a complete slice ends at ts + dur.

std::int64_t perfetto_ns(const nlohmann::json& microseconds) {
  return static_cast<std::int64_t>(microseconds.get<double>() * 1000.0);
}

struct Slice {
  std::int64_t start, end;
  std::string name, op;
  double ts, dur;  // as parsed, in microseconds
};

using Track = std::pair<int, int>;  // pid, tid

std::map<Track, std::vector<Slice>> complete_slices(const nlohmann::json& trace) {
  std::map<Track, std::vector<Slice>> tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const auto start = perfetto_ns(e["ts"]);
    tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
        {start, start + perfetto_ns(e["dur"]), e["name"].get<std::string>(),
         e.contains("args") ? e["args"]["op"].get<std::string>() : std::string(),
         e["ts"].get<double>(), e["dur"].get<double>()});
  }
  for (auto& [track, slices] : tracks) {
    std::stable_sort(slices.begin(), slices.end(),
                     [](const Slice& a, const Slice& b) { return a.start < b.start; });
  }
  return tracks;
}

// The slice of `slices` strictly containing `ns` (start < ns < end), or null.
const Slice* strictly_inside(const std::vector<Slice>& slices, std::int64_t ns) {
  for (const auto& s : slices) {
    if (s.start < ns && ns < s.end) return &s;
  }
  return nullptr;
}

std::string check_trace(const Run& run) {
  const auto& g = run.simulation.graph;
  const auto& r = run.simulation.result;
  const auto trace = nlohmann::json::parse(chrome_trace(run.table, run.simulation));
  const auto tracks = complete_slices(trace);

  // No two slices on a track overlap, read as Perfetto reads them or as chrome://tracing does
  // (ts + dur in doubles, exactly), and every slice starts and ends within a few nanoseconds of
  // the simulated times.
  std::int64_t slices = 0;
  for (const auto& [track, list] : tracks) {
    for (std::size_t k = 0; k + 1 < list.size(); ++k) {
      REQUIRE(list[k].end <= list[k + 1].start);
      REQUIRE(list[k].ts + list[k].dur <= list[k + 1].ts);
    }
    slices += static_cast<std::int64_t>(list.size());
  }
  REQUIRE(slices == g.compute_nodes);
  for (std::int32_t d = 0; d < g.devices; ++d) {
    std::vector<std::pair<double, double>> simulated;
    for (auto k = g.stream_begin[static_cast<std::size_t>(d)];
         k < g.stream_begin[static_cast<std::size_t>(d) + 1]; ++k) {
      const auto n = static_cast<std::size_t>(g.stream[static_cast<std::size_t>(k)]);
      simulated.emplace_back(r.start[n], r.end[n]);
    }
    std::sort(simulated.begin(), simulated.end());
    const auto it = tracks.find({d, 0});
    const auto& list = it == tracks.end() ? std::vector<Slice>{} : it->second;
    REQUIRE(list.size() == simulated.size());
    for (std::size_t k = 0; k < list.size(); ++k) {
      // Rounded to a tick under a nanosecond, then truncated by Perfetto to a whole one (start
      // and duration each).
      REQUIRE(std::abs(static_cast<double>(list[k].start) - simulated[k].first * 1e9) <= 1.5);
      REQUIRE(std::abs(static_cast<double>(list[k].end) - simulated[k].second * 1e9) <= 2.5);
    }
  }

  // Every flow starts inside its producer's slice and ends inside its consumer's ("bp":"e"
  // binds to the enclosing slice), strictly, where the slice lasts 2 ns or more.
  std::map<std::int64_t, std::string> producer_op;
  std::int64_t flows = 0;
  for (const auto& e : trace["traceEvents"]) {
    const auto ph = e["ph"].get<std::string>();
    if (ph != "s" && ph != "f") continue;
    if (ph == "f") {
      REQUIRE(e["bp"] == "e");
    }
    const auto id = e["id"].get<std::int64_t>();
    REQUIRE(g.is_transfer(id));
    const auto t = static_cast<std::size_t>(id - g.compute_nodes);
    REQUIRE(is_pipeline(g.kind[t]));
    // The op at either end of transfer `id`, from the graph.
    std::size_t node = 0;
    if (ph == "f") {
      node = static_cast<std::size_t>(
          g.succ[static_cast<std::size_t>(g.succ_begin[static_cast<std::size_t>(id)])]);
    } else {
      bool found = false;
      for (std::int64_t n = 0; n < g.compute_nodes && !found; ++n) {
        for (auto k = g.succ_begin[static_cast<std::size_t>(n)];
             k < g.succ_begin[static_cast<std::size_t>(n) + 1]; ++k) {
          if (g.succ[static_cast<std::size_t>(k)] == id) {
            node = static_cast<std::size_t>(n);
            found = true;
          }
        }
      }
      REQUIRE(found);
      ++flows;
    }
    const auto& list = tracks.at({e["pid"].get<int>(), e["tid"].get<int>()});
    const auto ns = perfetto_ns(e["ts"]);
    const Slice* slice = strictly_inside(list, ns);
    if (r.end[node] - r.start[node] >= 8e-9) {  // but for ops of a few nanoseconds
      REQUIRE(slice != nullptr);
      REQUIRE(slice->op == to_string(run.table.ops[node]));
    }
    REQUIRE(e["pid"].get<int>() == g.device[node]);
  }
  std::int64_t pipeline_transfers = 0;
  for (std::int64_t t = 0; t < g.transfers(); ++t)
    pipeline_transfers += is_pipeline(g.kind[static_cast<std::size_t>(t)]) ? 1 : 0;
  REQUIRE(flows == pipeline_transfers);

  // Every process and every thread an event sits on has a name; async slices have names.
  std::set<int> named_processes;
  std::set<Track> named_threads;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") named_processes.insert(e["pid"].get<int>());
    if (e["name"] == "thread_name") {
      REQUIRE(!e["args"]["name"].get<std::string>().empty());
      named_threads.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    }
  }
  for (const auto& e : trace["traceEvents"]) {
    const auto ph = e["ph"].get<std::string>();
    if (ph == "M") continue;
    REQUIRE(named_processes.count(e["pid"].get<int>()) == 1U);
    if (e.contains("tid")) {
      REQUIRE(named_threads.count({e["pid"].get<int>(), e["tid"].get<int>()}) == 1U);
    }
    if (ph == "b" || ph == "e") {
      REQUIRE(!e["name"].get<std::string>().empty());
    }
  }
  return "";
}

RC_GTEST_PROP(Trace, SlicesNeverOverlapAndFlowsEndInsideTheirOps, ()) {
  const auto config = arbitrary_config();
  RC_TAG(config.schedule);
  const auto run = simulate(config);
  RC_PRE(run.has_value());
  const auto failure = check_trace(*run);
  RC_LOG() << failure;
  RC_ASSERT(failure.empty());
}

TEST(Trace, AbuttingSlicesStayAbuttingAtAwkwardTimes) {
  // Op times that are no whole number of anything, back to back on free communication:
  // explicit costs of 12.345, 0.1 and 0.3 µs (12.345 × 1000 is 12344.999… in doubles).
  const auto table = test::make("1f1b", test::sm(4, 16));
  SimulationSetup setup = test::preset_setup("paper", "ideal");
  setup.lowering.costs = test::split_costs(12.345e-6, 0.1e-6, 0.3e-6);
  setup.options.record_memory = true;
  const auto simulation = simulate_table(table, setup);
  const auto tracks = complete_slices(nlohmann::json::parse(chrome_trace(table, simulation)));
  std::int64_t abutting = 0;
  for (const auto& [track, list] : tracks) {
    for (std::size_t k = 0; k + 1 < list.size(); ++k)
      EXPECT_LE(list[k].end, list[k + 1].start) << track.first << " " << k;
    for (std::size_t k = 0; k + 1 < list.size(); ++k)
      EXPECT_LE(list[k].ts + list[k].dur, list[k + 1].ts) << track.first << " " << k;
    for (std::size_t k = 0; k + 1 < list.size(); ++k)
      abutting += list[k].end == list[k + 1].start ? 1 : 0;
  }
  EXPECT_GT(abutting, 16);  // the steady state runs ops back to back
}

// ---------------------------------------------------------------------------------------------
// Streaming, gzip and the size warning.

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string gunzip(const fs::path& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  EXPECT_NE(file, nullptr);
  std::string out;
  char buffer[1 << 15];
  for (int got; (got = gzread(file, buffer, sizeof buffer)) > 0;)
    out.append(buffer, static_cast<std::size_t>(got));
  gzclose(file);
  return out;
}

class TraceFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pipetab-trace-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TraceFile, StreamedPlainAndGzipEqualTheTraceText) {
  // Large enough to take several 1 MiB buffer flushes.
  const auto run = simulate({"zb-v", test::sm(8, 64), "dgx-h100", "gpt3-1.3b", 2, false});
  ASSERT_TRUE(run);
  const auto text = chrome_trace(run->table, run->simulation);
  ASSERT_GT(text.size(), 2U << 20);

  const auto plain = dir_ / "run.json";
  const auto stats = write_chrome_trace(plain.string(), run->table, run->simulation);
  EXPECT_EQ(slurp(plain), text);
  EXPECT_FALSE(stats.gzip);
  EXPECT_EQ(stats.json_bytes, text.size());
  EXPECT_EQ(stats.file_bytes, text.size());

  const auto packed = dir_ / "run.json.gz";
  const auto gz = write_chrome_trace(packed.string(), run->table, run->simulation);
  EXPECT_TRUE(gz.gzip);
  const auto bytes = slurp(packed);
  ASSERT_GE(bytes.size(), 10U);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x1f);  // RFC 1952 magic
  EXPECT_EQ(static_cast<unsigned char>(bytes[1]), 0x8b);
  EXPECT_EQ(gz.file_bytes, bytes.size());
  EXPECT_LT(bytes.size(), text.size() / 4);
  EXPECT_EQ(gunzip(packed), text);
  // Deterministic: the same trace compresses to the same bytes.
  write_chrome_trace(packed.string(), run->table, run->simulation);
  EXPECT_EQ(slurp(packed), bytes);
  // No temporary file is left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 2);
}

TEST_F(TraceFile, AFailedWriteLeavesNothing) {
  const auto run = simulate({"1f1b", test::sm(2, 2), "balanced", "paper", 1, false});
  ASSERT_TRUE(run);
  const auto missing = dir_ / "no-such-dir" / "run.json";
  try {
    write_chrome_trace(missing.string(), run->table, run->simulation);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string() + ": cannot write"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(write_chrome_trace(dir_.string(), run->table, run->simulation), Error);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 0);
}

TEST(TraceSize, WarnsBeforeChromeTracingsStringLimit) {
  // V8's longest string, which chrome://tracing's importer needs the whole JSON to fit in:
  // 2^28 − 16 characters (catapult-project/catapult issue 3071).
  EXPECT_LE(kTraceWarnBytes, (std::uint64_t{1} << 28) - 16);
  EXPECT_GE(kTraceWarnBytes, std::uint64_t{100} << 20);  // not for ordinary traces
  TraceFileStats stats;
  stats.json_bytes = kTraceWarnBytes;
  EXPECT_EQ(trace_size_warning("run.json", stats), "");
  stats.json_bytes = kTraceWarnBytes + 1;
  const auto warning = trace_size_warning("run.json", stats);
  EXPECT_EQ(warning.rfind("warning: run.json: ", 0), 0U) << warning;
  EXPECT_NE(warning.find("trace_processor"), std::string::npos);
  EXPECT_EQ(std::count(warning.begin(), warning.end(), '\n'), 1);
}

// ---------------------------------------------------------------------------------------------
// The SVG, parsed.

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;
};

struct Parsed {
  std::vector<Element> elements;  // in document order
  std::vector<std::size_t> open;
};

void on_start(void* data, const XML_Char* name, const XML_Char** attributes) {
  auto* p = static_cast<Parsed*>(data);
  Element e;
  e.name = name;
  for (int k = 0; attributes[k] != nullptr; k += 2)
    e.attributes[attributes[k]] = attributes[k + 1];
  p->open.push_back(p->elements.size());
  p->elements.push_back(std::move(e));
}
void on_end(void* data, const XML_Char*) {
  static_cast<Parsed*>(data)->open.pop_back();
}
void on_text(void* data, const XML_Char* text, int length) {
  auto* p = static_cast<Parsed*>(data);
  if (!p->open.empty())
    p->elements[p->open.back()].text.append(text, static_cast<std::size_t>(length));
}

std::vector<Element> parse_svg(const std::string& svg) {
  Parsed parsed;
  XML_Parser parser = XML_ParserCreate("UTF-8");
  XML_SetUserData(parser, &parsed);
  XML_SetElementHandler(parser, on_start, on_end);
  XML_SetCharacterDataHandler(parser, on_text);
  const bool ok =
      XML_Parse(parser, svg.data(), static_cast<int>(svg.size()), 1) != XML_STATUS_ERROR;
  const std::string error = ok ? "" : XML_ErrorString(XML_GetErrorCode(parser));
  XML_ParserFree(parser);
  EXPECT_TRUE(ok) << error;
  return parsed.elements;
}

double number(const Element& e, const std::string& key) {
  return std::stod(e.attributes.at(key));
}

// WCAG 2.x (www.w3.org/TR/WCAG21/#dfn-relative-luminance, #dfn-contrast-ratio): sRGB channels
// linearised, luminance 0.2126 R + 0.7152 G + 0.0722 B, contrast (L1 + 0.05) / (L2 + 0.05).
double luminance(const std::string& hex) {
  EXPECT_EQ(hex.size(), 7U) << hex;
  double rgb[3];
  for (int k = 0; k < 3; ++k) {
    const double c =
        std::stoi(hex.substr(1 + 2 * static_cast<std::size_t>(k), 2), nullptr, 16) / 255.0;
    rgb[k] = c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
  }
  return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2];
}
double contrast_ratio(const std::string& a, const std::string& b) {
  const double la = luminance(a), lb = luminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

TEST(Wcag, KnownContrastRatios) {
  EXPECT_NEAR(contrast_ratio("#000000", "#ffffff"), 21.0, 1e-12);
  EXPECT_NEAR(contrast_ratio("#777777", "#ffffff"), 4.48, 0.01);  // the classic near miss
  EXPECT_NEAR(contrast_ratio("#767676", "#ffffff"), 4.54, 0.01);
}

// Advance widths of DejaVu Sans, the first (and widest) font the SVG names, in em
// (units / 2048 from the font's hmtx table): digits 1303, '&' 1597, 'o' 1253, 'p' 1300, 't' 803.
double dejavu_width(const std::string& text, double size) {
  double em = 0.0;
  for (const char c : text) {
    if (c >= '0' && c <= '9') {
      em += 1303.0 / 2048;
    } else if (c == '&') {
      em += 1597.0 / 2048;
    } else if (c == 'o') {
      em += 1253.0 / 2048;
    } else if (c == 'p') {
      em += 1300.0 / 2048;
    } else if (c == 't') {
      em += 803.0 / 2048;
    } else {
      ADD_FAILURE() << "no width for '" << c << "'";
    }
  }
  return em * size;
}

struct SvgFacts {
  std::vector<std::string> legend;  // texts of the legend
  std::int64_t ops = 0, labels = 0, collective_bars = 0;
  double pipeline_right = 0.0;  // the right edge of the rightmost table op's box
  double plot_left = 0.0, plot_right = 0.0;
};

std::string check_svg(const std::string& svg, SvgFacts& facts) {
  const auto elements = parse_svg(svg);
  REQUIRE(!elements.empty());
  REQUIRE(elements[0].name == "svg");
  const double width = number(elements[0], "width");
  const Element* box = nullptr;
  for (std::size_t k = 0; k < elements.size(); ++k) {
    const auto& e = elements[k];
    const auto cls = e.attributes.count("class") ? e.attributes.at("class") : "";
    if (e.name == "rect" && cls == "op") {
      box = &e;
      ++facts.ops;
      continue;
    }
    if (e.name == "rect" && cls == "collective") ++facts.collective_bars;
    if (e.name == "text" && cls == "label") {
      // A label belongs to the box just before it: centred on it, inside it with its text's
      // full advance width, and readable on its fill.
      REQUIRE(box != nullptr);
      ++facts.labels;
      const double size = number(e, "font-size");
      const double x0 = number(*box, "x"), w = number(*box, "width");
      const double y0 = number(*box, "y"), h = number(*box, "height");
      REQUIRE(std::abs(number(e, "x") - (x0 + w / 2)) < 0.02);  // printed to 0.01 px
      REQUIRE(dejavu_width(e.text, size) <= w);
      REQUIRE(size >= 6.0);
      const double baseline = number(e, "y");
      REQUIRE(baseline - size * 0.8 >= y0);  // DejaVu's ascent is 0.76 em, descent 0.24
      REQUIRE(baseline + size * 0.25 <= y0 + h);
      REQUIRE(contrast_ratio(e.attributes.at("fill"), box->attributes.at("fill")) >= 4.5);
      box = nullptr;
      continue;
    }
    if (e.name == "text" && !e.attributes.count("text-anchor")) {
      // Left-anchored texts (legend, notes) stay inside the picture.
      REQUIRE(number(e, "x") + 0.62 * number(e, "font-size") * static_cast<double>(e.text.size()) <=
              width);
      const auto fill = e.attributes.count("fill") ? e.attributes.at("fill") : "#000000";
      REQUIRE(contrast_ratio(fill, "#ffffff") >= 4.5);
      if (number(e, "font-size") == 11) facts.legend.push_back(e.text);
    }
  }
  return "";
}

SvgFacts svg_facts(const Config& c) {
  const auto run = simulate(c, false);
  EXPECT_TRUE(run) << describe(c);
  const auto svg = timeline_svg(run->table, run->simulation, describe(c));
  SvgFacts facts;
  EXPECT_EQ(check_svg(svg, facts), "") << describe(c);
  // The rightmost edge of a table op: the first ops are the table's, in node order.
  const auto elements = parse_svg(svg);
  std::int64_t seen = 0;
  const std::int64_t optimizer =
      run->simulation.graph.compute_nodes - run->simulation.graph.table_ops;
  for (const auto& e : elements) {
    if (e.name == "rect" && e.attributes.count("class") && e.attributes.at("class") == "op") {
      if (seen++ >= optimizer)
        facts.pipeline_right = std::max(facts.pipeline_right, number(e, "x") + number(e, "width"));
    }
  }
  return facts;
}

RC_GTEST_PROP(Svg, LabelsFitTheirBoxesAndContrastOnEveryFill, ()) {
  const auto config = arbitrary_config();
  RC_TAG(config.schedule);
  const auto run = simulate(config, false);
  RC_PRE(run.has_value());
  SvgFacts facts;
  const auto failure =
      check_svg(timeline_svg(run->table, run->simulation, describe(config)), facts);
  RC_LOG() << failure;
  RC_ASSERT(failure.empty());
  RC_ASSERT(facts.ops == run->simulation.graph.compute_nodes);
}

// The same checks, deterministically over every registered schedule.
TEST(TraceAndSvg, EveryScheduleOnTwoClusters) {
  int runs = 0;
  for (const auto* info : all_schedules()) {
    for (const std::int64_t S : {2, 4}) {
      for (const std::int64_t M : {S, 2 * S + 1}) {
        for (const auto& [system, dp] : {std::pair<std::string, int>{"balanced", 1},
                                         std::pair<std::string, int>{"dgx-h100", 2}}) {
          const Config c{std::string(info->name), test::sm(S, M), system, "gpt3-1.3b", dp, false};
          const auto run = simulate(c);
          if (!run) continue;
          ++runs;
          EXPECT_EQ(check_trace(*run), "") << describe(c);
          SvgFacts facts;
          EXPECT_EQ(check_svg(timeline_svg(run->table, run->simulation, describe(c)), facts), "")
              << describe(c);
        }
      }
    }
  }
  EXPECT_GT(runs, 3 * static_cast<int>(all_schedules().size()));
}

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST(Svg, LegendListsTheKindsPresent) {
  const auto f1b = svg_facts({"1f1b", test::sm(4, 8), "balanced", "paper", 1, false});
  EXPECT_TRUE(has(f1b.legend, "forward F"));
  EXPECT_TRUE(has(f1b.legend, "backward B"));
  EXPECT_FALSE(has(f1b.legend, "input gradient I"));
  EXPECT_FALSE(has(f1b.legend, "weight gradient W"));
  EXPECT_FALSE(has(f1b.legend, "overlapped F&B"));
  EXPECT_TRUE(has(f1b.legend, "transfer"));
  EXPECT_FALSE(has(f1b.legend, "data-parallel reduction"));

  const auto zbv = svg_facts({"zb-v", test::sm(4, 8), "balanced", "paper", 1, false});
  EXPECT_TRUE(has(zbv.legend, "input gradient I"));
  EXPECT_TRUE(has(zbv.legend, "weight gradient W"));
  EXPECT_FALSE(has(zbv.legend, "backward B"));

  const auto dual = svg_facts({"dualpipe", test::sm(4, 8), "dgx-h100", "gpt3-1.3b", 2, false});
  EXPECT_TRUE(has(dual.legend, "overlapped F&B"));
  EXPECT_TRUE(has(dual.legend, "replica all-reduce"));
  EXPECT_TRUE(has(dual.legend, "data-parallel reduction"));
  EXPECT_GT(dual.collective_bars, 0);
}

TEST(Svg, CollectivesDoNotSqueezeThePipeline) {
  // Data parallelism over a slow network: the gradient reduction after the pipeline lasts
  // longer than the pipeline; the pipeline still spans most of the plot.
  Config c{"1f1b", test::sm(4, 4), "network-bound", "gpt3-1.3b", 4, false};
  const auto run = simulate(c, false);
  ASSERT_TRUE(run);
  const auto& r = run->simulation.result;
  ASSERT_GT(r.runtime_s - r.pipeline_end_s, 0.5 * r.pipeline_end_s) << describe(c);
  const auto facts = svg_facts(c);
  EXPECT_GT(facts.pipeline_right - 70.0, 0.75 * 1100.0);
}

TEST(Svg, RefusedBeforeAnyWorkFromTheTableAlone) {
  const auto small = test::make("1f1b", test::sm(2, 4));
  EXPECT_FALSE(timeline_svg_refusal(small));
  // 2 × 8 × 12,501 ops: just over the limit.
  const auto big = test::make("1f1b", test::sm(8, 12501));
  ASSERT_GT(static_cast<std::int64_t>(big.ops.size()), kMaxSvgOps);
  const auto refusal = timeline_svg_refusal(big);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->find("200000"), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("--trace"), std::string::npos) << *refusal;
}

// ---------------------------------------------------------------------------------------------
// The grid, folded.

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

// Per device, the cells of the grid in time order: every block's row for the device, margins
// removed, concatenated.
std::vector<std::string> rows(const std::string& grid, std::int32_t devices) {
  std::vector<std::string> out(static_cast<std::size_t>(devices));
  for (const auto& line : lines(grid)) {
    if (line.rfind("dev ", 0) != 0) continue;
    const auto bar = line.find("| ");
    const auto d = std::stoi(line.substr(4, bar - 4));
    auto cells = line.substr(bar + 2);
    auto& row = out[static_cast<std::size_t>(d)];
    // Rows lose their trailing spaces; a space keeps the last label apart from the next block's
    // first (only the labels' order is compared).
    row += cells + " ";
  }
  return out;
}

// The op labels of a row in order ('.' idle cells and '-' continuations dropped).
std::vector<std::string> labels(const std::string& row) {
  std::vector<std::string> out;
  std::istringstream in(row);
  for (std::string token; in >> token;) {
    while (!token.empty() && token.back() == '-')
      token.pop_back();
    if (!token.empty() && token != ".") out.push_back(token);
  }
  return out;
}

RC_GTEST_PROP(Grid, FoldsToTheWidthAndKeepsEveryOpInOrder, ()) {
  const auto schedules = all_schedules();
  const auto name =
      std::string(schedules[*rc::gen::inRange<std::size_t>(0, schedules.size())]->name);
  ScheduleTable t;
  try {
    t = generate(find_schedule(name), test::sm(*rc::gen::inRange<std::int64_t>(1, 7),
                                               *rc::gen::inRange<std::int64_t>(1, 17)));
  } catch (const ParamError&) {
    RC_DISCARD("parameters the schedule refuses");
  }
  const auto costs = *rc::gen::element(Costs{}, parse_costs("F=1,B=3"), parse_costs("F=1,I=1,W=1"));
  const auto timing = idealized_timing(t, costs);
  const auto whole = render_grid(t, timing);
  GridOptions options;
  options.fold_width = *rc::gen::inRange<std::int64_t>(1, 160);
  const auto folded = render_grid(t, timing, options);
  const auto margin =
      std::string("dev ") + std::string(std::to_string(t.devices - 1).size(), ' ') + "| ";
  // The widest op label plus its separator: one column must fit, whatever the width asked.
  std::size_t cell = 0;
  for (const auto& line : lines(whole)) {
    if (line.rfind("dev ", 0) == 0) {
      for (const auto& l : labels(line.substr(line.find("| ") + 2)))
        cell = std::max(cell, l.size() + 1);
    }
  }
  for (const auto& line : lines(folded)) {
    RC_ASSERT(line.size() <= std::max<std::size_t>(static_cast<std::size_t>(options.fold_width),
                                                   margin.size() + std::max<std::size_t>(cell, 3)));
  }
  const auto a = rows(whole, t.devices), b = rows(folded, t.devices);
  for (std::size_t d = 0; d < a.size(); ++d)
    RC_ASSERT(labels(a[d]) == labels(b[d]));
  // Wide enough for everything: no folding at all.
  options.fold_width = 100000;
  RC_ASSERT(render_grid(t, timing, options) == whole);
}

TEST(Grid, FoldedByHand) {
  const auto t = test::make("1f1b", test::sm(2, 2));
  GridOptions options;
  options.fold_width = 8 + 3 * 4;  // the margin and four columns of three
  EXPECT_EQ(render_grid(t, idealized_timing(t, Costs{}), options),
            "time   0  1  2  3\n"
            "dev 0| F0 F1 .  .\n"
            "dev 1| .  F0 B0---\n"
            "\n"
            "time   4  5  6  7\n"
            "dev 0| B0--- .  B1\n"
            "dev 1| F1 B1--- .\n"
            "\n"
            "time   8\n"
            "dev 0| --\n"
            "dev 1| .\n");
}

// ---------------------------------------------------------------------------------------------
// The command line: limits before work, the report kept, folding only where asked.

struct Result {
  int code = -1;
  std::string out, err;
};

class TraceCli : public TraceFile {
 protected:
  Result run(const std::string& args, const std::string& env = "") const {
    const auto out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string command = env + " " + std::string(PIPETAB_BINARY) + " " + args + " > " +
                                out.string() + " 2> " + err.string() + " < /dev/null";
    const int status = std::system(command.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    fs::remove(out);
    fs::remove(err);
    return r;
  }
};

TEST_F(TraceCli, OversizedSvgIsRefusedBeforeSimulating) {
  const auto trace = (dir_ / "run.json").string(), svg = (dir_ / "run.svg").string();
  // 2 × 8 × 20,000 ops: refused from the table, before the simulation or the trace.
  const auto r =
      run("simulate 1f1b -S 8 -M 20000 --system balanced --trace " + trace + " --svg " + svg);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--svg " + svg + ": 320000 ops are too many"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(trace));
  EXPECT_FALSE(fs::exists(svg));
}

TEST_F(TraceCli, TheReportSurvivesAPictureThatCannotBeWritten) {
  const auto svg = (dir_ / "missing" / "run.svg").string();
  const auto r = run("simulate 1f1b -S 4 -M 8 --system balanced --svg " + svg);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("optimizer step on device"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find(svg), std::string::npos) << r.err;
}

TEST_F(TraceCli, GzipTraceByExtension) {
  const auto plain = (dir_ / "run.json").string(), packed = (dir_ / "run.json.gz").string();
  auto r = run("simulate zb-v -S 4 -M 8 --system balanced --trace " + plain);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // no size warning for a small trace
  r = run("simulate zb-v -S 4 -M 8 --system balanced --trace " + packed);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(gunzip(packed), slurp(plain));
}

TEST_F(TraceCli, ShowFoldsOnlyWhenAskedOrOnATerminal) {
  const auto longest = [](const std::string& text) {
    std::size_t most = 0;
    for (const auto& line : lines(text)) {
      if (line.rfind("dev ", 0) == 0 || line.rfind("time", 0) == 0)
        most = std::max(most, line.size());
    }
    return most;
  };
  // Into a file (not a terminal): never folded, whatever COLUMNS says.
  auto r = run("show 1f1b -S 4 -M 16", "COLUMNS=40");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto whole = longest(r.out);
  EXPECT_GT(whole, 40U);
  r = run("show 1f1b -S 4 -M 16 --width 40");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LE(longest(r.out), 40U);
  r = run("show 1f1b -S 4 -M 16 --width 0", "COLUMNS=40");
  EXPECT_EQ(longest(r.out), whole);
  r = run("show 1f1b -S 4 -M 16 --width -3");
  EXPECT_EQ(r.code, 2) << r.err;
}

}  // namespace
}  // namespace pipetab
