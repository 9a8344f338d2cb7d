// Random tables (rapidcheck), each property checked against an independent oracle: random valid
// tables come from a random topological order of the passes, so the order itself gives the
// times; the deadlock verdict is compared with a naive lock-step executor; peaks with a
// brute-force count of live activations; mutations must be rejected; files must round-trip.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "pipetab/error.hpp"
#include "pipetab/io/pytorch_csv.hpp"
#include "pipetab/io/table_json.hpp"
#include "pipetab/table/memory.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

struct Generated {
  ScheduleTable table;
  std::vector<std::size_t> order;  // op indices in the topological order they were generated in
};

// A random valid table: random placement (every device holds a stage), pipelines, split or
// full backwards, and per-device orders from a random topological order of all passes.
Generated random_table(std::uint32_t seed, int devices, int stages, int microbatches,
                       int pipelines) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::vector<std::int32_t> placement(static_cast<std::size_t>(pipelines * stages));
  for (std::size_t i = 0; i < placement.size(); ++i) {
    placement[i] =
        i < static_cast<std::size_t>(devices) ? static_cast<std::int32_t>(i) : pick(devices);
  }
  std::shuffle(placement.begin(), placement.end(), rng);
  // Every pipeline carries a microbatch (a valid table's rule): the first ones in turn, the
  // rest at random, then shuffled.
  std::vector<std::uint8_t> pipeline_of(static_cast<std::size_t>(microbatches));
  for (std::size_t m = 0; m < pipeline_of.size(); ++m) {
    pipeline_of[m] = static_cast<std::uint8_t>(
        m < static_cast<std::size_t>(pipelines) ? static_cast<int>(m) : pick(pipelines));
  }
  std::shuffle(pipeline_of.begin(), pipeline_of.end(), rng);
  std::vector<bool> split(static_cast<std::size_t>(microbatches * stages));
  for (std::size_t i = 0; i < split.size(); ++i)
    split[i] = pick(3) == 0;

  // Ready passes; run a random one, append it to its device's row, enable its successors.
  std::vector<Pass> ready;
  for (int m = 0; m < microbatches; ++m)
    ready.push_back({m, 0, PassKind::F});
  std::vector<std::vector<Op>> rows(static_cast<std::size_t>(devices));
  std::vector<std::pair<int, std::size_t>> sequence;  // (device, index in row)
  auto device_of = [&](const Pass& p) {
    return placement[static_cast<std::size_t>(
        pipeline_of[static_cast<std::size_t>(p.microbatch)] * stages + p.stage)];
  };
  while (!ready.empty()) {
    const auto i = static_cast<std::size_t>(pick(static_cast<int>(ready.size())));
    const Pass p = ready[i];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(i));
    const auto d = static_cast<std::size_t>(device_of(p));
    sequence.emplace_back(static_cast<int>(d), rows[d].size());
    rows[d].push_back(Op::single(p));
    const bool is_split = split[static_cast<std::size_t>(p.microbatch * stages + p.stage)];
    const auto backward = [&](int stage) {
      const bool s = split[static_cast<std::size_t>(p.microbatch * stages + stage)];
      return Pass{p.microbatch, static_cast<std::uint16_t>(stage), s ? PassKind::I : PassKind::B};
    };
    if (p.kind == PassKind::F) {
      if (p.stage + 1 < stages) {
        ready.push_back({p.microbatch, static_cast<std::uint16_t>(p.stage + 1), PassKind::F});
      } else {
        ready.push_back(backward(p.stage));
      }
    } else if (p.kind != PassKind::W) {
      if (p.stage > 0) ready.push_back(backward(p.stage - 1));
      if (is_split) ready.push_back({p.microbatch, p.stage, PassKind::W});
    }
  }
  Generated g;
  TableBuilder builder(devices, stages, microbatches, pipelines, placement, pipeline_of, 0);
  for (const auto& row : rows) {
    for (const Op& op : row)
      builder.push(op);
    builder.end_row();
  }
  g.table = std::move(builder).finish();
  for (const auto& [d, index] : sequence) {
    g.order.push_back(static_cast<std::size_t>(g.table.row_begin[static_cast<std::size_t>(d)]) +
                      index);
  }
  return g;
}

Generated arbitrary_table(int max_pipelines = 3) {
  const auto seed = *rc::gen::arbitrary<std::uint32_t>();
  const int devices = *rc::gen::inRange(1, 6);
  const int stages = *rc::gen::inRange(devices, 3 * devices + 1);
  const int microbatches = *rc::gen::inRange(1, 7);
  const int pipelines = *rc::gen::inRange(1, std::min(max_pipelines, microbatches) + 1);
  return random_table(seed, devices, stages, microbatches, pipelines);
}

// Naive lock-step executor: sweep the devices until nothing moves.
bool naive_executable(const ScheduleTable& t) {
  std::vector<std::int64_t> next(t.row_begin.begin(), t.row_begin.end() - 1);
  std::vector<std::uint8_t> done_f(static_cast<std::size_t>(t.microbatches * t.stages), 0),
      done_b(done_f.size(), 0);
  auto key = [&](const Pass& p, int stage) {
    return static_cast<std::size_t>(p.microbatch * t.stages + stage);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < t.devices; ++d) {
      while (next[static_cast<std::size_t>(d)] < t.row_begin[static_cast<std::size_t>(d) + 1]) {
        const Op& op = t.ops[static_cast<std::size_t>(next[static_cast<std::size_t>(d)])];
        const Pass& p = op.first();
        bool ok = true;
        if (p.kind == PassKind::F) ok = p.stage == 0 || done_f[key(p, p.stage - 1)];
        if (p.kind == PassKind::B || p.kind == PassKind::I) {
          ok = done_f[key(p, p.stage)] && (p.stage + 1 == t.stages || done_b[key(p, p.stage + 1)]);
        }
        if (p.kind == PassKind::W) ok = done_b[key(p, p.stage)];
        if (!ok) break;
        if (p.kind == PassKind::F) done_f[key(p, p.stage)] = 1;
        if (p.kind == PassKind::B || p.kind == PassKind::I) done_b[key(p, p.stage)] = 1;
        ++next[static_cast<std::size_t>(d)];
        progress = true;
      }
    }
  }
  for (int d = 0; d < t.devices; ++d) {
    if (next[static_cast<std::size_t>(d)] < t.row_begin[static_cast<std::size_t>(d) + 1])
      return false;
  }
  return true;
}

RC_GTEST_PROP(RandomTables, GeneratedTablesAreValid, ()) {
  const auto g = arbitrary_table();
  const auto report = validate(g.table);
  RC_ASSERT(report.ok());
}

RC_GTEST_PROP(RandomTables, TimingEqualsTheTopologicalOrderOracle, ()) {
  const auto g = arbitrary_table();
  const auto& t = g.table;
  Costs costs;
  costs.F = *rc::gen::inRange(1, 5);
  costs.B = *rc::gen::inRange(1, 9);
  costs.I = *rc::gen::inRange(1, 5);
  costs.W = *rc::gen::inRange(1, 5);
  const auto durations = op_durations(t, costs);
  // The generation order respects every dependency and every device's order: compute times in it.
  std::vector<double> start(t.ops.size()), end(t.ops.size()),
      free_at(static_cast<std::size_t>(t.devices), 0.0);
  std::vector<double> f_end(static_cast<std::size_t>(t.microbatches * t.stages)),
      b_end(f_end.size());
  std::vector<int> device_of_op(t.ops.size());
  for (int d = 0; d < t.devices; ++d) {
    for (auto i = t.row_begin[static_cast<std::size_t>(d)];
         i < t.row_begin[static_cast<std::size_t>(d) + 1]; ++i) {
      device_of_op[static_cast<std::size_t>(i)] = d;
    }
  }
  for (const auto i : g.order) {
    const Pass& p = t.ops[i].first();
    const auto d = static_cast<std::size_t>(device_of_op[i]);
    const auto k = static_cast<std::size_t>(p.microbatch * t.stages + p.stage);
    double ready = free_at[d];
    if (p.kind == PassKind::F && p.stage > 0) ready = std::max(ready, f_end[k - 1]);
    if (p.kind == PassKind::B || p.kind == PassKind::I) {
      ready = std::max(ready, f_end[k]);
      if (p.stage + 1 < t.stages) ready = std::max(ready, b_end[k + 1]);
    }
    if (p.kind == PassKind::W) ready = std::max(ready, b_end[k]);
    start[i] = ready;
    end[i] = ready + durations[i];
    free_at[d] = end[i];
    if (p.kind == PassKind::F) f_end[k] = end[i];
    if (p.kind == PassKind::B || p.kind == PassKind::I) b_end[k] = end[i];
  }
  const auto timing = idealized_timing(t, costs);
  RC_ASSERT(timing.start == start);
  RC_ASSERT(timing.end == end);
  RC_ASSERT(timing.makespan == *std::max_element(end.begin(), end.end()));
}

RC_GTEST_PROP(RandomTables, DeadlockVerdictMatchesNaiveExecution, ()) {
  auto g = arbitrary_table();
  auto& t = g.table;
  std::mt19937 rng(*rc::gen::arbitrary<std::uint32_t>());
  for (int d = 0; d < t.devices; ++d) {
    std::shuffle(t.ops.begin() + t.row_begin[static_cast<std::size_t>(d)],
                 t.ops.begin() + t.row_begin[static_cast<std::size_t>(d) + 1], rng);
  }
  const auto report = validate(t);
  RC_ASSERT(report.ok() == naive_executable(t));
  if (!report.ok()) {
    const auto& message = report.issues.front().message;
    RC_ASSERT(message.find("deadlock") != std::string::npos ||
              message.find("later on the same device") != std::string::npos);
  }
}

RC_GTEST_PROP(RandomTables, PeaksMatchBruteForceLiveCount, ()) {
  const auto g = arbitrary_table();
  const auto& t = g.table;
  const auto timing = idealized_timing(t, Costs{});
  const auto shares = t.stage_shares();
  const auto peaks = activation_peaks(t);
  for (int d = 0; d < t.devices; ++d) {
    // Live intervals [F start, end of the pass that frees) of the stages on this device.
    std::vector<std::pair<double, double>> live;
    std::vector<double> weight;
    const auto b = static_cast<std::size_t>(t.row_begin[static_cast<std::size_t>(d)]);
    const auto e = static_cast<std::size_t>(t.row_begin[static_cast<std::size_t>(d) + 1]);
    for (auto i = b; i < e; ++i) {
      const Pass& p = t.ops[i].first();
      if (p.kind != PassKind::F) continue;
      for (auto j = b; j < e; ++j) {
        const Pass& q = t.ops[j].first();
        if (q.microbatch == p.microbatch && q.stage == p.stage &&
            (q.kind == PassKind::B || q.kind == PassKind::W)) {
          live.emplace_back(timing.start[i], timing.end[j]);
          weight.push_back(shares[static_cast<std::size_t>(
              t.pipeline_of[static_cast<std::size_t>(p.microbatch)] * t.stages + p.stage)]);
        }
      }
    }
    double peak = 0.0;
    for (const auto& [at, unused] : live) {
      double sum = 0.0;
      for (std::size_t k = 0; k < live.size(); ++k) {
        if (live[k].first <= at && at < live[k].second) sum += weight[k];
      }
      peak = std::max(peak, sum);
    }
    RC_ASSERT(std::abs(peaks[static_cast<std::size_t>(d)] - peak) < 1e-9);
    const auto curve = activation_curve(t, timing, d);
    double curve_peak = 0.0;
    for (const auto& sample : curve)
      curve_peak = std::max(curve_peak, sample.value);
    RC_ASSERT(std::abs(curve_peak - peak) < 1e-9);
    RC_ASSERT(curve.back().value == 0.0);
  }
}

RC_GTEST_PROP(RandomTables, MutationsAreRejected, ()) {
  auto g = arbitrary_table();
  auto& t = g.table;
  const auto i = static_cast<std::size_t>(*rc::gen::inRange<std::size_t>(0, t.ops.size()));
  switch (*rc::gen::inRange(0, 4)) {
    case 0:  // drop an op
      t.ops.erase(t.ops.begin() + static_cast<std::ptrdiff_t>(i));
      for (auto& b : t.row_begin)
        b -= b > static_cast<std::int64_t>(i) ? 1 : 0;
      break;
    case 1:  // run an op twice
      t.ops.insert(t.ops.begin() + static_cast<std::ptrdiff_t>(i), t.ops[i]);
      for (auto& b : t.row_begin)
        b += b > static_cast<std::int64_t>(i) ? 1 : 0;
      break;
    case 2:  // an out-of-range microbatch
      t.ops[i].halves[0].microbatch = t.microbatches + *rc::gen::inRange(0, 3);
      break;
    default:  // a backward made forward: one F too many, one backward missing
      if (t.ops[i].first().kind == PassKind::F)
        t.ops[i].halves[0].kind = PassKind::B;
      else
        t.ops[i].halves[0].kind = PassKind::F;
      break;
  }
  RC_ASSERT(!validate(t).ok());
}

RC_GTEST_PROP(RandomTables, JsonRoundTripsExactly, ()) {
  auto g = arbitrary_table();
  if (*rc::gen::arbitrary<bool>()) {
    g.table.stage_layers.assign(static_cast<std::size_t>(g.table.pipelines() * g.table.stages), 2);
    for (int p = 0; p < g.table.pipelines(); ++p)
      g.table.stage_layers[static_cast<std::size_t>(p * g.table.stages)] = 5;
  }
  const auto text = io::write_table_json(g.table);
  const auto back = io::read_table_json(text, "t.json");
  RC_ASSERT(back.same_schedule(g.table));
  RC_ASSERT(io::write_table_json(back) == text);
}

RC_GTEST_PROP(RandomTables, CsvRoundTripsSinglePipelineTables, ()) {
  const auto g = arbitrary_table(1);
  const auto text = io::write_pytorch_csv(g.table);
  const auto back = io::read_pytorch_csv(text, "t.csv");
  RC_ASSERT(back.same_schedule(g.table));
  RC_ASSERT(io::write_pytorch_csv(back) == text);
}

RC_GTEST_PROP(RandomTables, ParsersOnlyThrowPipetabErrors, ()) {
  // Text from an alphabet rich in the formats' own characters.
  const auto text = *rc::gen::container<std::string>(
      rc::gen::element('0', '1', '2', 'F', 'B', 'I', 'W', ',', '\n', '"', ';', '(', ')', '{', '}',
                       '[', ']', ':', ' ', 'x', '_', '-'));
  for (const bool json : {false, true}) {
    try {
      const auto t = json ? io::read_table_json(text, "r") : io::read_pytorch_csv(text, "r");
      (void)validate(t);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace pipetab
