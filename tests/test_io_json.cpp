// The pipetab JSON table format: exact layout, exact round trips of every generator's table,
// and every reader error with its line, column and path.
#include "helpers.hpp"
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/data_table.hpp"
#include "pipetab/io/table_json.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

using io::read_table_json;
using io::write_table_json;

ScheduleTable small() {
  auto p = test::sm(2, 2);
  return test::make("1f1b", p);
}

std::string error_of(const std::string& text) {
  try {
    read_table_json(text, "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A valid document with one member's value replaced ("rows" runs to the end), for targeted errors.
std::string with(const std::string& key, const std::string& value) {
  std::string text = write_table_json(small());
  const auto at = text.find("\"" + key + "\"");
  const auto end = key == "rows" ? text.rfind("\n}") : text.find('\n', at);
  return text.replace(at, end - at, "\"" + key + "\": " + value + (key == "rows" ? "" : ","));
}

TEST(Json, Layout) {
  EXPECT_EQ(write_table_json(small(), {"1f1b", {{"devices", 2}}}),
            "{\n"
            "  \"format\": \"pipetab-table\",\n"
            "  \"version\": 1,\n"
            "  \"source\": {\"params\":{\"devices\":2},\"schedule\":\"1f1b\"},\n"
            "  \"devices\": 2,\n"
            "  \"stages\": 2,\n"
            "  \"microbatches\": 2,\n"
            "  \"placement\": [[0,1]],\n"
            "  \"rows\": [\n"
            "    [\"0F0\",\"0F1\",\"0B0\",\"0B1\"],\n"
            "    [\"1F0\",\"1B0\",\"1F1\",\"1B1\"]\n"
            "  ]\n"
            "}\n");
}

TEST(Json, KeepsSourceStageSizesPipelinesAndIdleSlots) {
  auto p = test::sm(4, 8);
  const auto asym = test::make("chimera-asym", p);
  io::TableSource source;
  const auto back = read_table_json(write_table_json(asym, {"chimera-asym", {{"devices", 4}}}),
                                    "a.json", &source);
  EXPECT_TRUE(back.same_schedule(asym));
  EXPECT_EQ(source.schedule, "chimera-asym");
  EXPECT_EQ(source.params["devices"], 4);

  auto slotted = small();
  slotted.slots = {0, 1, 3, 5, 1, 2, 3, 4};
  const auto text = write_table_json(slotted);
  EXPECT_NE(text.find("[\"0F0\",\"0F1\",\"\",\"0B0\",\"\",\"0B1\"]"), std::string::npos);
  EXPECT_EQ(read_table_json(text, "s.json").slots, slotted.slots);
}

TEST(Json, EveryGeneratorRoundTripsExactly) {
  for (const auto* info : all_schedules()) {
    for (std::int64_t S : {1, 2, 4, 8}) {
      auto p = test::sm(S, S);
      try {
        const auto t = generate(*info, p);
        const auto text = write_table_json(t);
        const auto back = read_table_json(text, "t.json");
        EXPECT_TRUE(back.same_schedule(t)) << info->name << " S=" << S;
        EXPECT_TRUE(validate(back).ok());
        EXPECT_EQ(write_table_json(back), text);
      } catch (const ParamError&) {
      }
    }
  }
}

TEST(Json, SyntaxErrorsHaveLineAndColumn) {
  EXPECT_EQ(error_of("{\n  \"format\": \"pipetab-table\",\n  oops\n}"),
            "t.json:3:3: invalid JSON: syntax error while parsing object key - invalid literal; "
            "last read: "
            "'\"pipetab-table\",<U+000A>  o'; expected string literal");
  EXPECT_EQ(error_of("[1]"), "t.json:1:1: expected a JSON object, got an array");
  // Found by fuzz_json: nlohmann reports overflow as out_of_range, not as a parse error.
  EXPECT_EQ(error_of("1e400"), "t.json:1:1: invalid JSON: number overflow parsing '1e400'");
  EXPECT_EQ(error_of("{\"devices\":\n 1e999}"),
            "t.json:2:2: invalid JSON: number overflow parsing '1e999'");
  EXPECT_EQ(error_of(""),
            "t.json:1:1: invalid JSON: syntax error while parsing value - unexpected end of input; "
            "expected '[', '{', or a literal");
}

TEST(Json, KeysAreChecked) {
  auto text = write_table_json(small());
  text.insert(text.find("  \"devices\""), "  \"colour\": 3,\n");
  EXPECT_EQ(error_of(text),
            "t.json:4:3: colour: unknown key 'colour' (expected: format, version, source, devices, "
            "stages, "
            "microbatches, placement, microbatch_pipeline, stage_layers, rows)");
  text = write_table_json(small());
  text.insert(text.find("  \"rows\""), "  \"devices\": 2,\n");
  EXPECT_EQ(error_of(text), "t.json:8:3: devices: duplicate key 'devices'");
  text = write_table_json(small(), {"1f1b", nullptr});
  text.replace(text.find("{\"schedule\""), 1, "{\"schedule\":\"x\",");
  EXPECT_EQ(error_of(text), "t.json:4:29: source.schedule: duplicate key 'schedule'");
  text = write_table_json(small());
  text.erase(text.find("  \"stages\""), std::string("  \"stages\": 2,\n").size());
  EXPECT_EQ(error_of(text), "t.json:1:1: missing key 'stages'");
}

TEST(Json, ValuesAreChecked) {
  EXPECT_EQ(error_of(with("format", "\"pipetab\"")),
            "t.json:2:13: format: expected \"pipetab-table\"");
  EXPECT_EQ(error_of(with("version", "2")),
            "t.json:3:14: version: unsupported version 2 (this pipetab reads version 1)");
  EXPECT_EQ(error_of(with("devices", "\"two\"")),
            "t.json:4:14: devices: expected a whole number, got a string");
  EXPECT_EQ(error_of(with("devices", "2.5")),
            "t.json:4:14: devices: expected a whole number, got 2.5");
  EXPECT_EQ(error_of(with("devices", "2.0")),
            "t.json:4:14: devices: expected a whole number written without a fraction or exponent, "
            "got 2.0");
  EXPECT_EQ(error_of(with("devices", "true")),
            "t.json:4:14: devices: expected a whole number, got a boolean");
  EXPECT_EQ(error_of(with("devices", "null")),
            "t.json:4:14: devices: expected a whole number, got null");
  EXPECT_EQ(error_of(with("devices", "0")),
            "t.json:4:14: devices: 0 is out of range (expected 1..65535)");
  EXPECT_EQ(error_of(with("microbatches", "99999999999999999999")),
            "t.json:6:19: microbatches: 1e+20 is out of range (expected 1..16777216)");
  EXPECT_EQ(error_of(with("microbatches", "-5")),
            "t.json:6:19: microbatches: -5 is out of range (expected 1..16777216)");
  EXPECT_EQ(error_of(with("placement", "[[0]]")),
            "t.json:7:17: placement[0]: expected 2 entries, got 1");
  EXPECT_EQ(error_of(with("placement", "[[0,5]]")),
            "t.json:7:20: placement[0][1]: 5 is out of range (expected 0..1)");
  EXPECT_EQ(error_of(with("placement", "[]")),
            "t.json:7:16: placement: expected an array of 1..255 pipelines, each an array of stage "
            "devices");
  EXPECT_EQ(
      error_of(with("placement", "[[0,1],[1,0]]")),
      "t.json:7:16: placement: a table with more than one pipeline needs \"microbatch_pipeline\"");
  EXPECT_EQ(error_of(with("placement", "[[0,1]], \"microbatch_pipeline\": [0,3]")),
            "t.json:7:51: microbatch_pipeline[1]: 3 is out of range (expected 0..0)");
  EXPECT_EQ(error_of(with("placement", "[[0,1]], \"stage_layers\": [[1,0]]")),
            "t.json:7:45: stage_layers[0][1]: 0 is out of range (expected 1..1000000)");
}

TEST(Json, RowsAreChecked) {
  EXPECT_EQ(error_of(with("rows", "[[\"0F0\"]]")), "t.json:8:11: rows: expected 2 entries, got 1");
  EXPECT_EQ(error_of(with("rows", "[[\"0F0\", 7], []]")),
            "t.json:8:20: rows[0][1]: expected an action string like "
            "\"0F1\", got a number");
  EXPECT_EQ(error_of(with("rows", "[[\"0F0\", \"0Q1\"], []]")),
            "t.json:8:22: rows[0][1]: unknown action type 'Q' (expected F, B, I, W, SEND_F, "
            "RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD or REDUCE_GRAD)");
  EXPECT_EQ(error_of(with("rows", "[[\"0F0\", \"0SEND_F0\"], []]")),
            "t.json:8:20: rows[0][1]: '0SEND_F0' is a communication action: pipetab JSON rows "
            "hold computations only (a communication order is kept in PyTorch's compute+comms "
            "CSV)");
  EXPECT_EQ(error_of(with("rows", "[{}, []]")),
            "t.json:8:12: rows[0]: expected an array of cells, got an object");
}

TEST(Json, SourceIsChecked) {
  auto text = write_table_json(small(), {"1f1b", nullptr});
  text.replace(text.find("\"schedule\""), 10, "\"sched\"");
  EXPECT_EQ(error_of(text),
            "t.json:4:14: source.sched: unknown key 'sched' (expected: schedule, params)");
  text = write_table_json(small(), {"1f1b", nullptr});
  text.replace(text.find("\"1f1b\""), 6, "4");
  EXPECT_EQ(error_of(text), "t.json:4:25: source.schedule: expected a string");
  text = write_table_json(small(), {"1f1b", nullptr});
  text.replace(text.find("{\"schedule\""), 19, "[]");
  EXPECT_EQ(error_of(text), "t.json:4:13: source: expected an object, got an array");
  text = write_table_json(small(), {"1f1b", {{"devices", 2}}});
  text.replace(text.find("{\"devices\":2}"), 13, "7");
  EXPECT_EQ(error_of(text), "t.json:4:23: source.params: expected an object");
}

// Issue 14: 150,000 nested arrays in source.params overflowed the stack (exit 139). Nesting is
// limited before parsing; the error points at the bracket that goes one level too deep, inside
// a string nothing counts, and 64 levels are still read.
TEST(Json, NestingDepthIsLimitedWithALocatedError) {
  const auto nested = [](int levels) {
    return std::string(static_cast<std::size_t>(levels), '[') +
           std::string(static_cast<std::size_t>(levels), ']');
  };
  const auto params = [&](const std::string& value) {
    auto text = write_table_json(small(), {"1f1b", {{"devices", 2}}});
    text.replace(text.find("{\"devices\":2}"), 13, "{\"x\": " + value + "}");
    return text;
  };
  for (const int levels : {150000, 63}) {
    const auto text = params(nested(levels));
    // The document's own levels: the top object, source, params, then the arrays.
    const auto deep = text.find('[') + 61;
    EXPECT_EQ(
        error_of(text),
        fmt::format("t.json:4:{}: JSON nested deeper than 64 levels (a pipetab table needs 4)",
                    deep - text.rfind('\n', deep)))
        << levels;
  }
  EXPECT_EQ(error_of(params(nested(61))).find("nested deeper"), std::string::npos);
  EXPECT_EQ(error_of(params("\"" + std::string(200, '[') + "\"")).find("nested deeper"),
            std::string::npos);
}

// The results reader (plot, sweep --resume) has the same limit, located in the whole file.
TEST(Json, ResultsNestingDepthIsLimitedWithALocatedError) {
  const std::string deep = std::string(150000, '[') + std::string(150000, ']');
  const std::string text = "{\"a\": 1}\n{\"a\": 2, \"b\": " + deep + "}\n";
  try {
    io::parse_data_table(text, "r.jsonl");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    // Line 2 opens its object (level 1) at column 1 and its arrays at column 15: the 64th
    // array, at column 78, is level 65.
    EXPECT_EQ(std::string(e.what()),
              "r.jsonl:2:78: JSON nested deeper than 64 levels (a results row is one flat object)");
  }
}

}  // namespace
}  // namespace pipetab
