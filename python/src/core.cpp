// pipetab._core: the library on Python values (python/pipetab/__init__.py is the public API).
//
// Results are handed over as the JSON text the CLI prints for the same request: both call the
// library's to_json (report layer; study/tune and study/plan for their searches) and io's table
// export, recognition and validity check, so that "equals `pipetab ... --format json`" holds by
// construction (python/tests checks it against the CLI); per-op data comes as NumPy arrays. What
// remains below is turning Python arguments into the library's requests, as the CLI turns flags.
//
// Long calls release the GIL. Ctrl-C: Python's C signal handler only sets a flag while the GIL
// is released; the library calls back on the calling (main) thread between units of work (sweep
// rows, tune candidates, plan blocks, compare rows), and there the GIL is taken at most every
// 50 ms to run Python's signal handlers (PyErr_CheckSignals). A KeyboardInterrupt stops the run
// and is raised once the GIL is back.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/job_file.hpp"
#include "pipetab/io/table_export.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/report/compare.hpp"
#include "pipetab/report/evaluation.hpp"
#include "pipetab/report/output.hpp"
#include "pipetab/report/simulation.hpp"
#include "pipetab/report/trace.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/sim/run_shape.hpp"
#include "pipetab/study/measurements.hpp"
#include "pipetab/study/plan.hpp"
#include "pipetab/study/sweep.hpp"
#include "pipetab/study/tune.hpp"
#include "pipetab/table/costs.hpp"
#include "pipetab/table/timing.hpp"
#include "pipetab/table/validate.hpp"
#include "pipetab/threads.hpp"

namespace py = pybind11;

namespace pipetab::python {
namespace {

// ---------------------------------------------------------------------------------------------
// Ctrl-C

// Runs Python's signal handlers at most every 50 ms; returns the exception a handler raised.
class SignalCheck {
 public:
  std::optional<py::error_already_set> poll() {
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(50)) return std::nullopt;
    last_ = now;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) return py::error_already_set();
    return std::nullopt;
  }
  // Throws the exception a handler raised (for callers that may unwind the library).
  void check() {
    if (auto error = poll()) throw std::move(*error);
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_ = Clock::now();
};

// ---------------------------------------------------------------------------------------------
// Tables

// A table and where it came from: a generated schedule (params set) or a file (file set).
struct Table {
  std::string name;  // schedule name, or the file's path as given
  ScheduleTable table;
  std::optional<ResolvedParams> params;
  std::shared_ptr<const io::TableFile> file;
  io::TableSource source;  // what a JSON export names as its source
};

// A JSON table whose "source" regenerates exactly this table is evaluated as that schedule.
void recognize(Table& subject) {
  if (subject.file) subject.params = io::recognized_params(*subject.file);
}

std::shared_ptr<Table> generated(const std::string& name, const ScheduleParams& params) {
  const ScheduleInfo& info = find_schedule(name);
  auto t = std::make_shared<Table>();
  t->name = name;
  t->params = resolve(info, params);
  t->table = info.generate(*t->params);
  t->source = {t->params->schedule, io::params_json(*t->params)};
  return t;
}

std::shared_ptr<Table> generate_table(const std::string& name, std::int64_t devices,
                                      std::int64_t microbatches, std::optional<std::int64_t> chunks,
                                      std::optional<std::int64_t> waves,
                                      std::optional<std::int64_t> group_size,
                                      std::optional<std::string> variant,
                                      std::optional<std::string> split) {
  ScheduleParams p;
  p.devices = devices;
  p.microbatches = microbatches;
  p.chunks = chunks;
  p.waves = waves;
  p.group_size = group_size;
  p.variant = std::move(variant);
  p.split = std::move(split);
  py::gil_scoped_release release;
  return generated(name, p);
}

std::shared_ptr<Table> load_table(const std::string& path, bool check) {
  py::gil_scoped_release release;
  auto file = std::make_shared<io::TableFile>(io::load_table(path));
  if (check) io::require_valid(*file);
  auto t = std::make_shared<Table>();
  t->name = path;
  t->table = file->table;
  t->source = file->source;
  t->file = std::move(file);
  recognize(*t);
  return t;
}

// `pipetab validate FILE --format json` (without its trailing newline).
std::string validate_file(const std::string& path, std::size_t max_issues) {
  py::gil_scoped_release release;
  const auto file = io::load_table(path);
  const auto report = validate(file.table, max_issues);
  return io::validation_json(path, file, report).dump(2);
}

// io::export_table; what the CLI notes on stderr about forced problems becomes Python warnings.
std::string export_table(const Table& t, const std::string& format, bool force) {
  auto out = io::export_table(t.table, format, t.source, force);
  const auto warn = py::module_::import("warnings").attr("warn");
  for (const auto& problem : out.forced)
    warn("written with force=True although " + problem);
  return std::move(out.text);
}

template <class T>
py::array_t<T> to_array(const std::vector<T>& values) {
  py::array_t<T> out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

// Per op, in table order (device by device): device, position in the device's order, and the
// first (and for an overlapped pair the second) pass's kind letter, microbatch and stage.
py::dict ops_arrays(const Table& t) {
  const auto& table = t.table;
  const auto n = table.ops.size();
  std::vector<std::int32_t> device(n), position(n), microbatch(n), stage(n), microbatch2(n),
      stage2(n);
  std::vector<std::string> kind(n), kind2(n), action(n);
  for (std::int32_t d = 0; d < table.devices; ++d) {
    const auto begin = table.row_begin[static_cast<std::size_t>(d)];
    const auto end = table.row_begin[static_cast<std::size_t>(d) + 1];
    for (auto i = begin; i < end; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const Op& op = table.ops[k];
      device[k] = d;
      position[k] = static_cast<std::int32_t>(i - begin);
      kind[k] = std::string(1, kind_letter(op.first().kind));
      microbatch[k] = op.first().microbatch;
      stage[k] = op.first().stage;
      kind2[k] = op.is_pair() ? std::string(1, kind_letter(op.second().kind)) : std::string();
      microbatch2[k] = op.is_pair() ? op.second().microbatch : -1;
      stage2[k] = op.is_pair() ? op.second().stage : -1;
      action[k] = to_string(op);
    }
  }
  py::dict out;
  out["device"] = to_array(device);
  out["position"] = to_array(position);
  out["kind"] = py::array(py::cast(kind));
  out["microbatch"] = to_array(microbatch);
  out["stage"] = to_array(stage);
  out["pair_kind"] = py::array(py::cast(kind2));
  out["pair_microbatch"] = to_array(microbatch2);
  out["pair_stage"] = to_array(stage2);
  out["action"] = py::array(py::cast(action));
  return out;
}

Costs costs_of(const std::optional<std::string>& costs) {
  return costs ? parse_costs(*costs) : Costs{};
}

// The idealized (table-level) start and end of every op.
py::tuple table_timing(const Table& t, const std::optional<std::string>& costs) {
  const auto parsed = costs_of(costs);
  Timing timing;
  {
    py::gil_scoped_release release;
    timing = idealized_timing(t.table, parsed);
  }
  return py::make_tuple(to_array(timing.start), to_array(timing.end));
}

// ---------------------------------------------------------------------------------------------
// The simulation level: what cli/options.cpp ScheduleOptions::simulation() builds from the flags.

// A keyword's setting as Python gives it (pipetab/__init__.py turns keywords into these): the
// option's key (sim/options.hpp), its value as text, and the keyword that gave it ("tp",
// "fsdp.shard"), which messages name.
using Keyword = std::tuple<std::string, std::string, std::string>;

struct SimArgs {
  std::string system = "balanced";
  std::optional<std::string> system_text;  // a TOML document (from a Python dict)
  std::string model = io::kDefaultModel;
  std::optional<std::string> model_text;
  std::vector<Keyword> settings;     // applied in order, over the job file's
  std::optional<std::string> job;    // a torchtitan job TOML or Megatron-LM arguments (--job)
  std::optional<std::int64_t> gpus;  // --gpus
  std::optional<std::string> costs;  // table-level costs; at the simulation level in seconds
  double input_grad_frees = 0.0;
};

ModelConfig model_of(const SimArgs& a) {
  return a.model_text ? io::parse_model(*a.model_text, "<model dict>") : io::load_model(a.model);
}

SystemConfig system_of(const SimArgs& a, const std::string* system) {
  if (system != nullptr) return io::load_system(*system);
  return a.system_text ? io::parse_system(*a.system_text, "<system dict>")
                       : io::load_system(a.system);
}

MemoryOptions memory_of(const SimArgs& a) {
  if (!(a.input_grad_frees >= 0.0 && a.input_grad_frees <= 1.0)) {
    throw Error(fmt::format("input_grad_frees {}: expected a fraction between 0 and 1",
                            a.input_grad_frees));
  }
  return MemoryOptions{a.input_grad_frees};
}

// What a run's options are, as cli/options.cpp RunFlags gives them: the job file's settings but
// its GPU count, then the keywords'; and the GPU count, the keyword's or the job file's.
struct RunSettings {
  std::vector<Setting> given;
  std::optional<std::int64_t> gpus;
  bool job = false;
};

RunSettings run_settings(const std::optional<std::string>& job, std::optional<std::int64_t> gpus,
                         const std::vector<Keyword>& keywords) {
  RunSettings out;
  out.gpus = gpus;
  if (job) {
    out.job = true;
    for (auto& s : io::read_job_file(*job, gpus).settings) {
      if (s.key != "gpus") {
        out.given.push_back(std::move(s));
      } else if (!out.gpus) {
        out.gpus = std::stoll(s.value);
      }
    }
  }
  for (const auto& [key, value, keyword] : keywords)
    out.given.push_back({key, value, keyword});
  return out;
}

RunSettings run_settings(const SimArgs& a) {
  return run_settings(a.job, a.gpus, a.settings);
}

// The last value `settings` give `key`.
std::optional<std::string> last_value(const std::vector<Setting>& settings, std::string_view key) {
  for (auto it = settings.rbegin(); it != settings.rend(); ++it) {
    if (it->key == key) return it->value;
  }
  return std::nullopt;
}

// The setup of a table of `devices` stages: the model's defaults, the job file's settings, the
// keywords' and the costs applied; the data-parallel replicas from the GPU count where no option
// gives them; checked. `system` overrides the arguments' system (compare's regimes).
SimulationSetup setup_of(const SimArgs& a, std::int64_t devices,
                         const std::string* system = nullptr) {
  SimulationSetup setup = default_setup(model_of(a), system_of(a, system));
  const auto run = run_settings(a);
  apply_settings(setup, run.given);
  resolve_replicas(setup.layout, devices, run.gpus,
                   last_value(run.given, "data_parallel").has_value(), "gpus");
  if (a.costs) setup.lowering.costs = parse_costs(*a.costs);
  auto applied = setup.model.defaults;
  applied.insert(applied.end(), run.given.begin(), run.given.end());
  require_valid(setup, applied);
  return setup;
}

// The table a run's options describe where the caller's sizes leave it, as cli/options.cpp
// ScheduleOptions::params does for a job file or --global-batch: the schedule a job file names,
// its pipeline depth (pipeline_parallel), its chunks, and the microbatches of its global batch
// (checked against `microbatches` where given). A keyword of those keys counts as the file's.
// Returns (schedule, devices, microbatches, chunks); a size nothing gives stays None.
py::tuple run_shape(const SimArgs& a, std::optional<std::int64_t> devices,
                    std::optional<std::int64_t> microbatches, std::optional<std::int64_t> chunks,
                    std::int64_t default_devices) {
  std::optional<std::string> schedule;
  {
    py::gil_scoped_release release;
    const auto run = run_settings(a);
    const auto given = [&](std::string_view key) { return last_value(run.given, key).has_value(); };
    schedule = last_value(run.given, "schedule");
    if (!schedule && run.job) {
      if (const auto name = job_schedule(run.given); !name.empty()) schedule = name;
    }
    if (run.job || given("pipeline_parallel") || given("global_batch") || given("chunks")) {
      SimulationSetup values = default_setup(model_of(a), {});
      apply_settings(values, run.given);  // checked: the settings' messages name their origin
      if (!devices && given("pipeline_parallel")) devices = values.layout.pp;
      resolve_replicas(values.layout, devices.value_or(default_devices), run.gpus,
                       given("data_parallel"), "gpus");
      if (!chunks && values.layout.chunks > 0) chunks = values.layout.chunks;
      if (const auto m =
              batch_microbatches(values.job, values.layout, microbatches, "microbatches"))
        microbatches = m;
    }
  }
  return py::make_tuple(schedule, devices, microbatches, chunks);
}

py::list run_options_list() {
  const SimulationSetup defaults = default_setup({}, {});
  py::list out;
  for (const RunOption& o : run_options()) {
    const bool numeric = o.type == OptionType::Integer || o.type == OptionType::Number;
    py::dict d;
    d["key"] = std::string(o.key);
    d["flag"] = o.flag.empty() ? py::object(py::none()) : py::str(std::string(o.flag));
    d["group"] = std::string(to_string(o.group));
    d["type"] = std::string(to_string(o.type));
    d["help"] = std::string(o.help);
    d["min"] = numeric ? py::object(py::float_(o.min)) : py::object(py::none());
    d["max"] = numeric ? py::object(py::float_(o.max)) : py::object(py::none());
    py::list choices;
    for (const auto c : o.choices)
      choices.append(std::string(c));
    d["choices"] = choices;
    d["default"] = default_text(o, defaults);
    d["flag_sets"] = o.flag_sets;
    d["flag_scale"] = o.flag_scale;
    d["flag_unit"] = std::string(o.flag_unit);
    out.append(d);
  }
  return out;
}

// The table as the job runs it: a generated table in Megatron-Core's combined 1F1B order where
// the job overlaps the experts' all-to-alls (job_schedule_params), as the commands generate it.
std::shared_ptr<const Table> as_run(const std::shared_ptr<const Table>& t,
                                    const SimulationSetup& setup) {
  if (!t->params || t->params->combined_1f1b) return t;
  const ScheduleInfo& info = find_schedule(t->params->schedule);
  if (!job_schedule_params({}, info, setup.job).combined_1f1b) return t;
  auto run = std::make_shared<Table>(*t);
  run->params->combined_1f1b = true;
  run->table = info.generate(*run->params);
  run->source = {run->params->schedule, io::params_json(*run->params)};
  return run;
}

Evaluation evaluate_table(const Table& t, const SimArgs& a, const SimulationSetup* setup,
                          bool curves) {
  return evaluate(t.table, t.params ? &*t.params : nullptr, t.name, costs_of(a.costs),
                  {memory_of(a), curves, setup});
}

// `pipetab analyze --format json`.
std::string analyze(const std::shared_ptr<Table>& t, const SimArgs& a, bool curves) {
  py::gil_scoped_release release;
  const auto setup = setup_of(a, t->table.devices);
  return to_json(evaluate_table(*as_run(t, setup), a, &setup, curves)).dump(2);
}

// A simulation kept for its pictures: `pipetab simulate --format json`, the simulated start and
// end of every table op, and the Chrome trace and SVG timeline of `simulate --trace/--svg`.
struct SimulationRun {
  std::shared_ptr<const Table> table;
  Simulation simulation;
  std::string title;  // the SVG's, as the command writes it
  std::string json;
};

std::shared_ptr<SimulationRun> simulate(const std::shared_ptr<Table>& t, const SimArgs& a) {
  py::gil_scoped_release release;
  auto setup = setup_of(a, t->table.devices);
  setup.options.record_memory = true;  // the trace's memory counters, as `simulate --trace`
  const auto run = as_run(t, setup);
  auto simulation =
      simulate_table(run->table, setup,
                     run->params ? std::string_view(run->params->schedule) : std::string_view());
  auto json = simulation_json(run->table, simulation).dump(2);
  auto title = fmt::format("{} on {} ({}), S={} M={}", run->name, setup.system.name,
                           setup.model.name, run->table.devices, run->table.microbatches);
  return std::make_shared<SimulationRun>(
      SimulationRun{run, std::move(simulation), std::move(title), std::move(json)});
}

// The simulated start (or end) of every table op, in the table's op order.
py::array_t<double> op_times(const SimulationRun& run, bool end) {
  const auto& times = end ? run.simulation.result.end : run.simulation.result.start;
  const auto n = static_cast<std::size_t>(run.simulation.graph.table_ops);
  return to_array(
      std::vector<double>(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(n)));
}

// `simulate --svg`: refused (Error) past kMaxSvgOps, as the command refuses it.
std::string run_svg(const SimulationRun& run, const std::optional<std::string>& title) {
  py::gil_scoped_release release;
  if (const auto refusal = timeline_svg_refusal(run.table->table)) throw Error(*refusal);
  return timeline_svg(run.table->table, run.simulation, title ? *title : run.title);
}

// `simulate --trace PATH`: streamed to the file (gzip for .gz); the size warning as a Python
// warning. Returns (events, json_bytes, file_bytes).
py::tuple run_write_trace(const SimulationRun& run, const std::string& path) {
  TraceFileStats stats;
  {
    py::gil_scoped_release release;
    stats = write_chrome_trace(path, run.table->table, run.simulation);
  }
  const auto warning = trace_size_warning(path, stats);
  if (!warning.empty()) py::module_::import("warnings").attr("warn")(warning);
  return py::make_tuple(stats.events, stats.json_bytes, stats.file_bytes);
}

// `pipetab compare --format json`: `names` generated at the shape given, `tables` as they are;
// on the system given, or on the paper's three regimes when `system_given` is false.
std::string compare_schedules(const std::vector<std::string>& names,
                              const std::vector<std::shared_ptr<Table>>& tables,
                              const ScheduleParams& shape, const SimArgs& a, bool system_given) {
  for (const auto& t : tables) {
    if (!t) throw Error("compare: a table is None");
  }
  py::gil_scoped_release release;
  for (const auto& name : names)
    find_schedule(name);
  static const std::vector<std::string> kRegimes = {"compute-bound", "balanced", "network-bound"};
  const std::vector<std::string> systems =
      system_given ? std::vector<std::string>{a.system} : kRegimes;
  SignalCheck signals;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& system : systems) {
    const auto setup = setup_of(a, shape.devices, system_given ? nullptr : &system);
    std::vector<Evaluation> rows;
    std::vector<Skipped> skipped;
    for (const auto& name : names) {
      signals.check();
      const ScheduleInfo& info = find_schedule(name);
      // options.cpp params(info, only_applicable = true).
      ScheduleParams p;
      p.devices = shape.devices;
      p.microbatches = shape.microbatches;
      if (info.default_chunks > 0) p.chunks = shape.chunks;
      if (info.default_waves > 0) p.waves = shape.waves;
      if (info.takes_group_size) p.group_size = shape.group_size;
      if (!info.variants.empty()) p.variant = shape.variant;
      if (!info.default_split.empty()) p.split = shape.split;
      try {
        const auto t = generated(name, job_schedule_params(p, info, setup.job));
        rows.push_back(evaluate_table(*t, a, &setup, false));
      } catch (const ParamError& e) {
        std::string reason = e.what();
        if (reason.rfind(name + ": ", 0) == 0) reason = reason.substr(name.size() + 2);
        skipped.push_back({name, reason});
      }
    }
    for (const auto& t : tables) {
      signals.check();
      if (t->table.devices != shape.devices || t->table.microbatches != shape.microbatches) {
        skipped.push_back(
            {t->name, fmt::format("has S = {}, M = {}; the comparison is at S = {}, M = {}",
                                  t->table.devices, t->table.microbatches, shape.devices,
                                  shape.microbatches)});
        continue;
      }
      rows.push_back(evaluate_table(*t, a, &setup, false));
    }
    all.push_back(to_json(compare(std::move(rows), std::move(skipped))));
  }
  return nlohmann::json{{"comparisons", std::move(all)}}.dump(2);
}

// ---------------------------------------------------------------------------------------------
// Sweep

struct SweepResult {
  std::shared_ptr<const SweepPlan> plan;
  std::vector<SweepRow> rows;
  std::int64_t begin = 0, end = 0;

  std::string text(SweepFormat format, bool header) const {
    std::string out = header && format == SweepFormat::Csv ? sweep_header(*plan) : std::string();
    for (const auto& row : rows)
      out += format_row(*plan, row, format);
    return out;
  }
  // Every row as one JSON array (values in column order), for Python to load.
  std::string rows_json() const {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& row : rows)
      all.push_back(nlohmann::json(row));
    return all.dump();
  }
};

std::shared_ptr<SweepResult> sweep(const std::string& study, int jobs, std::int64_t shard,
                                   std::int64_t shards) {
  if (jobs < 0 || jobs > 4096) throw Error(fmt::format("jobs {}: expected 1 to 4096", jobs));
  if (shards < 1 || shard < 1 || shard > shards || shards > (1 << 20)) {
    throw Error(
        fmt::format("shard {}/{}: expected K/N with 1 <= K <= N <= 1048576", shard, shards));
  }
  auto result = std::make_shared<SweepResult>();
  std::optional<py::error_already_set> interrupted;
  {
    py::gil_scoped_release release;
    auto plan = std::make_shared<const SweepPlan>(load_study(study));
    const auto total = static_cast<std::int64_t>(plan->configurations().size());
    std::tie(result->begin, result->end) = shard_range(total, shard, shards);
    result->plan = plan;
    const int threads = jobs > 0 ? jobs : static_cast<int>(hardware_threads());
    std::atomic<bool> stop{false};
    SignalCheck signals;
    run_sweep(
        *plan, result->begin, result->end, threads,
        [&](std::int64_t, SweepRow&& row) {
          result->rows.push_back(std::move(row));
          if (!interrupted && (interrupted = signals.poll())) stop.store(true);
        },
        &stop);
  }
  if (interrupted) throw std::move(*interrupted);
  return result;
}

// ---------------------------------------------------------------------------------------------
// Tune (tune_command.cpp)

struct TuneOutcome {
  std::string json;
  std::vector<std::shared_ptr<Table>> tables;  // per candidate, in ranking order
};

TuneOutcome tune_search(std::int64_t devices, std::int64_t microbatches,
                        const std::optional<std::string>& limit, bool builtins,
                        const std::optional<std::string>& runnable_by, const SimArgs& a) {
  py::gil_scoped_release release;
  TuneRequest request;
  request.devices = static_cast<std::int32_t>(
      std::clamp<std::int64_t>(devices, 0, std::int64_t{kMaxDevices} + 1));
  request.microbatches =
      static_cast<std::int32_t>(std::clamp<std::int64_t>(microbatches, 0, kMaxMicrobatches + 1));
  request.setup = setup_of(a, request.devices);
  request.memory = memory_of(a);
  request.limit =
      limit ? parse_memory_limit(*limit)
            : MemoryLimit{MemoryLimit::Unit::Activations, static_cast<double>(request.devices)};
  request.builtins = builtins;
  if (runnable_by) {
    request.runnable_by = parse_runtime(*runnable_by);
    if (!request.runnable_by || *request.runnable_by == Runtime::Async ||
        *request.runnable_by == Runtime::Auto) {
      throw Error(fmt::format("runnable_by '{}': expected pytorch or megatron", *runnable_by));
    }
  }
  SignalCheck signals;
  request.progress = [&signals](std::int64_t) { signals.check(); };
  auto result = tune(request);
  TuneOutcome out;
  out.json = to_json(request, result).dump(2);
  for (auto& c : result.candidates) {
    auto t = std::make_shared<Table>();
    t->name = c.name;
    t->table = std::move(c.table);
    t->source = {
        "tune",
        {{"devices", request.devices}, {"microbatches", request.microbatches}, {"found", c.name}}};
    out.tables.push_back(std::move(t));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Plan (plan_command.cpp)

struct PlanArgs {
  std::string model = "llama2-70b";
  std::optional<std::string> model_text;
  std::string system = "dgx-h100";
  std::optional<std::string> system_text;
  std::int64_t gpus = 0, global_batch = 0;
  PlanSpaceText space;
  // The options plan does not search (kPlanSearched), as SimArgs::settings and SimArgs::job.
  std::vector<Keyword> settings;
  std::optional<std::string> job;
  std::int64_t top = 10;
  bool prune = true;
  std::int64_t threads = 0;
  std::int64_t shard = 1, shards = 1;
  std::optional<std::string> from_run;
  std::string runs = "published-runs";
  bool keep_run_options = false;
  std::optional<std::string> runnable_by;
};

// What plan_command.cpp builds from its flags.
PlanRequest plan_request(const PlanArgs& s) {
  for (const auto& [key, value, keyword] : s.settings) {
    if (std::find(kPlanSearched.begin(), kPlanSearched.end(), key) != kPlanSearched.end()) {
      throw Error(fmt::format("{}: plan searches {} (give its choices as plan's own keyword)",
                              keyword, key));
    }
  }
  PlanRequest q;
  if (s.from_run) {
    plan_from_run(q, s.runs, *s.from_run);
    if (s.gpus > 0) q.gpus = s.gpus;
    if (s.global_batch > 0) q.global_batch = s.global_batch;
  } else {
    if (s.gpus == 0) throw Error("plan: --gpus is required (or --from-run ID)");
    if (s.global_batch == 0) throw Error("plan: --global-batch is required (or --from-run ID)");
    q.model =
        s.model_text ? io::parse_model(*s.model_text, "<model dict>") : io::load_model(s.model);
    q.system = s.system_text ? io::parse_system(*s.system_text, "<system dict>")
                             : io::load_system(s.system);
    q.gpus = s.gpus;
    q.global_batch = s.global_batch;
  }
  // The run's options plan does not search: over the model's defaults, or the run's own; a job
  // file's implicit degrees are plan's GPUs'.
  SimulationSetup base =
      s.from_run ? SimulationSetup{q.model, q.job, q.layout, q.system, q.lowering, q.sim}
                 : default_setup(q.model, q.system);
  const auto run = run_settings(
      s.job, s.gpus > 0 ? std::optional<std::int64_t>(s.gpus) : std::nullopt, s.settings);
  apply_settings(base, run.given);
  q.model = std::move(base.model);
  q.system = std::move(base.system);
  q.job = base.job;
  q.layout = base.layout;
  q.lowering = base.lowering;
  q.sim = base.options;
  q.space = parse_plan_space(s.space);
  if (s.runnable_by) {
    q.runnable_by = parse_runtime(*s.runnable_by);
    if (!q.runnable_by || *q.runnable_by == Runtime::Async || *q.runnable_by == Runtime::Auto) {
      throw Error(fmt::format("runnable_by '{}': expected pytorch or megatron", *s.runnable_by));
    }
  }
  if (s.top < 1 || s.top > 100000) throw Error(fmt::format("top {}: expected 1 to 100000", s.top));
  q.top = static_cast<std::int32_t>(s.top);
  q.prune = s.prune;
  if (s.threads < 0 || s.threads > 4096) {
    throw Error(fmt::format("threads {}: expected 0 (all cores) to 4096", s.threads));
  }
  q.threads = static_cast<unsigned>(s.threads);
  q.shard = s.shard;
  q.shards = s.shards;
  if (s.from_run && s.keep_run_options) keep_reference_options(q);
  // A job file's layout is the reference to rank, as a measured run's is.
  if (s.job && !s.from_run) q.reference = job_reference(q, fmt::format("job {}", *s.job));
  return q;
}

// A search-space field of PlanArgs as a Python attribute (PlanArgs::space, parse_plan_space).
template <class T>
void bind_space(py::class_<PlanArgs>& c, const char* name, T PlanSpaceText::*field) {
  c.def_property(
      name, [field](const PlanArgs& a) { return a.space.*field; },
      [field](PlanArgs& a, T value) { a.space.*field = std::move(value); });
}

struct PlanOutcome {
  PlanRequest request;
  PlanResult result;
  std::string json;
};

std::shared_ptr<PlanOutcome> plan_layouts(const PlanArgs& args) {
  auto out = std::make_shared<PlanOutcome>();
  py::gil_scoped_release release;
  out->request = plan_request(args);
  SignalCheck signals;
  out->request.progress = [&signals](int, std::int64_t, std::int64_t) { signals.check(); };
  out->result = plan(out->request);
  out->request.progress = nullptr;  // it refers to `signals`, which ends here
  out->json = to_json(out->request, out->result).dump(2);
  return out;
}

// The schedule table of the layout ranked `rank` (1-based).
std::shared_ptr<Table> plan_table(const PlanOutcome& o, std::size_t rank) {
  if (rank < 1 || rank > o.result.top.size()) {
    throw Error(fmt::format("rank {}: the plan ranked {} layouts", rank, o.result.top.size()));
  }
  const auto& best = o.result.top[rank - 1];
  auto t = std::make_shared<Table>();
  {
    py::gil_scoped_release release;
    t->table = layout_table(o.request, best.layout);
  }
  t->name = best.layout.schedule;
  t->source = {best.layout.schedule,
               {{"devices", best.layout.pipeline_parallel},
                {"microbatches", best.layout.microbatches},
                {"layout", describe(best.layout)}}};
  return t;
}

// ---------------------------------------------------------------------------------------------
// Lists

std::string preset(const std::string& kind, const std::string& name) {
  if (kind != "models" && kind != "systems") {
    throw Error(fmt::format("preset kind '{}': expected models or systems", kind));
  }
  const auto text = io::preset_text(kind, name);
  if (text.empty()) {
    throw Error(fmt::format(
        "no {} preset '{}' (presets: {})", kind.substr(0, kind.size() - 1), name,
        fmt::join(kind == "models" ? io::model_presets() : io::system_presets(), ", ")));
  }
  return std::string(text);
}

// ---------------------------------------------------------------------------------------------
// Exceptions: pipetab::Error and its subclasses as pipetab.Error (a ValueError) and subclasses,
// with the library's message; ParseError also carries file, line and column.

void register_errors(py::module_& m) {
  static py::exception<Error> error(m, "Error", PyExc_ValueError);
  static py::exception<ParamError> param_error(m, "ParamError", error.ptr());
  static py::exception<ParseError> parse_error(m, "ParseError", error.ptr());
  // Translators run newest first: the most derived types are registered last.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ParseError& e) {
      py::object instance = py::handle(parse_error.ptr())(e.what());
      instance.attr("file") = e.file();
      instance.attr("line") = e.line();
      instance.attr("column") = e.column();
      PyErr_SetObject(parse_error.ptr(), instance.ptr());
    } catch (const ParamError& e) {
      param_error(e.what());
    } catch (const Error& e) {
      error(e.what());
    }
  });
}

}  // namespace
}  // namespace pipetab::python

using namespace pipetab::python;  // NOLINT: the module's definitions read better unqualified

PYBIND11_MODULE(_core, m) {
  m.doc() = "pipetab's library (the public API is the pipetab package)";
  m.attr("__version__") = PIPETAB_VERSION;  // CMake's project version (CMakeLists.txt)
  register_errors(m);

  py::class_<Table, std::shared_ptr<Table>>(m, "Table")
      .def_readonly("name", &Table::name)
      .def_property_readonly("devices", [](const Table& t) { return t.table.devices; })
      .def_property_readonly("stages", [](const Table& t) { return t.table.stages; })
      .def_property_readonly("microbatches", [](const Table& t) { return t.table.microbatches; })
      .def_property_readonly("pipelines", [](const Table& t) { return t.table.pipelines(); })
      .def_property_readonly("num_ops", [](const Table& t) { return t.table.ops.size(); })
      .def_property_readonly("has_comms", [](const Table& t) { return !t.table.comms.empty(); })
      .def_property_readonly("path",
                             [](const Table& t) -> std::optional<std::string> {
                               if (!t.file) return std::nullopt;
                               return t.file->path;
                             })
      .def_property_readonly("params_json",
                             [](const Table& t) -> std::optional<std::string> {
                               if (!t.params) return std::nullopt;
                               return pipetab::io::params_json(*t.params).dump();
                             })
      .def("same_schedule",
           [](const Table& a, const Table& b) { return a.table.same_schedule(b.table); })
      .def("export", &export_table, py::arg("format"), py::arg("force") = false)
      .def("ops", &ops_arrays)
      .def("timing", &table_timing, py::arg("costs") = std::nullopt);

  py::class_<SimArgs>(m, "SimArgs")
      .def(py::init<>())
      .def_readwrite("system", &SimArgs::system)
      .def_readwrite("system_text", &SimArgs::system_text)
      .def_readwrite("model", &SimArgs::model)
      .def_readwrite("model_text", &SimArgs::model_text)
      .def_readwrite("settings", &SimArgs::settings)
      .def_readwrite("job", &SimArgs::job)
      .def_readwrite("gpus", &SimArgs::gpus)
      .def_readwrite("costs", &SimArgs::costs)
      .def_readwrite("input_grad_frees", &SimArgs::input_grad_frees);

  py::class_<PlanArgs> plan_args(m, "PlanArgs");
  plan_args.def(py::init<>());
  plan_args.def_readwrite("model", &PlanArgs::model);
  plan_args.def_readwrite("model_text", &PlanArgs::model_text);
  plan_args.def_readwrite("system", &PlanArgs::system);
  plan_args.def_readwrite("system_text", &PlanArgs::system_text);
  plan_args.def_readwrite("gpus", &PlanArgs::gpus);
  plan_args.def_readwrite("global_batch", &PlanArgs::global_batch);
  plan_args.def_readwrite("settings", &PlanArgs::settings);
  plan_args.def_readwrite("job", &PlanArgs::job);
  plan_args.def_readwrite("top", &PlanArgs::top);
  plan_args.def_readwrite("prune", &PlanArgs::prune);
  plan_args.def_readwrite("threads", &PlanArgs::threads);
  plan_args.def_readwrite("shard", &PlanArgs::shard);
  plan_args.def_readwrite("shards", &PlanArgs::shards);
  plan_args.def_readwrite("from_run", &PlanArgs::from_run);
  plan_args.def_readwrite("runs", &PlanArgs::runs);
  plan_args.def_readwrite("keep_run_options", &PlanArgs::keep_run_options);
  plan_args.def_readwrite("runnable_by", &PlanArgs::runnable_by);
  bind_space(plan_args, "tp", &pipetab::PlanSpaceText::tp);
  bind_space(plan_args, "pp", &pipetab::PlanSpaceText::pp);
  bind_space(plan_args, "micro_batch", &pipetab::PlanSpaceText::micro_batch);
  bind_space(plan_args, "chunks", &pipetab::PlanSpaceText::chunks);
  bind_space(plan_args, "cp", &pipetab::PlanSpaceText::cp);
  bind_space(plan_args, "ep", &pipetab::PlanSpaceText::ep);
  bind_space(plan_args, "etp", &pipetab::PlanSpaceText::etp);
  bind_space(plan_args, "moe_recompute", &pipetab::PlanSpaceText::moe_recompute);
  bind_space(plan_args, "a2a_overlap", &pipetab::PlanSpaceText::a2a_overlap);
  bind_space(plan_args, "schedules", &pipetab::PlanSpaceText::schedules);
  bind_space(plan_args, "recompute", &pipetab::PlanSpaceText::recompute);
  bind_space(plan_args, "sequence_parallel", &pipetab::PlanSpaceText::sequence_parallel);
  bind_space(plan_args, "distributed_optimizer", &pipetab::PlanSpaceText::distributed_optimizer);
  bind_space(plan_args, "fsdp", &pipetab::PlanSpaceText::fsdp);
  bind_space(plan_args, "cp_method", &pipetab::PlanSpaceText::cp_method);
  bind_space(plan_args, "search", &pipetab::PlanSpaceText::search);

  py::class_<SweepResult, std::shared_ptr<SweepResult>>(m, "SweepResult")
      .def_property_readonly("columns", [](const SweepResult& r) { return r.plan->columns(); })
      .def_readonly("begin", &SweepResult::begin)
      .def_readonly("end", &SweepResult::end)
      .def(
          "csv",
          [](const SweepResult& r, bool header) {
            return r.text(pipetab::SweepFormat::Csv, header);
          },
          py::arg("header") = true)
      .def("jsonl",
           [](const SweepResult& r) { return r.text(pipetab::SweepFormat::JsonLines, false); })
      .def("rows_json", &SweepResult::rows_json)
      .def("__len__", [](const SweepResult& r) { return r.rows.size(); });

  py::class_<PlanOutcome, std::shared_ptr<PlanOutcome>>(m, "PlanOutcome")
      .def_readonly("json", &PlanOutcome::json)
      .def("table", &plan_table, py::arg("rank") = 1);

  m.def("schedules_json", [] { return pipetab::schedules_json().dump(2); });
  m.def("run_options", &run_options_list);
  m.def("plan_searched", [] {
    return std::vector<std::string>(pipetab::kPlanSearched.begin(), pipetab::kPlanSearched.end());
  });
  m.def("run_shape", &run_shape, py::arg("args"), py::arg("devices"), py::arg("microbatches"),
        py::arg("chunks"), py::arg("default_devices"));
  m.def("model_presets", &pipetab::io::model_presets);
  m.def("system_presets", &pipetab::io::system_presets);
  m.def("preset", &preset, py::arg("kind"), py::arg("name"));
  m.def("generate", &generate_table, py::arg("name"), py::arg("devices"), py::arg("microbatches"),
        py::arg("chunks"), py::arg("waves"), py::arg("group_size"), py::arg("variant"),
        py::arg("split"));
  m.def("load_table", &load_table, py::arg("path"), py::arg("validate"));
  m.def("validate_file", &validate_file, py::arg("path"), py::arg("max_issues"));
  m.def("analyze", &analyze, py::arg("table"), py::arg("args"), py::arg("curves"));
  py::class_<SimulationRun, std::shared_ptr<SimulationRun>>(m, "SimulationRun")
      .def_readonly("json", &SimulationRun::json)
      .def_readonly("title", &SimulationRun::title)
      .def_property_readonly("op_start", [](const SimulationRun& r) { return op_times(r, false); })
      .def_property_readonly("op_end", [](const SimulationRun& r) { return op_times(r, true); })
      .def("svg", &run_svg, py::arg("title") = std::nullopt)
      .def("trace",
           [](const SimulationRun& r) {
             py::gil_scoped_release release;
             return chrome_trace(r.table->table, r.simulation);
           })
      .def("write_trace", &run_write_trace, py::arg("path"));
  m.def("simulate", &simulate, py::arg("table"), py::arg("args"));
  m.def(
      "compare",
      [](const std::vector<std::string>& names, const std::vector<std::shared_ptr<Table>>& tables,
         std::int64_t devices, std::int64_t microbatches, std::optional<std::int64_t> chunks,
         std::optional<std::int64_t> waves, std::optional<std::int64_t> group_size,
         std::optional<std::string> variant, std::optional<std::string> split, const SimArgs& args,
         bool system_given) {
        pipetab::ScheduleParams shape;
        shape.devices = devices;
        shape.microbatches = microbatches;
        shape.chunks = chunks;
        shape.waves = waves;
        shape.group_size = group_size;
        shape.variant = std::move(variant);
        shape.split = std::move(split);
        return compare_schedules(names, tables, shape, args, system_given);
      },
      py::arg("names"), py::arg("tables"), py::arg("devices"), py::arg("microbatches"),
      py::arg("chunks"), py::arg("waves"), py::arg("group_size"), py::arg("variant"),
      py::arg("split"), py::arg("args"), py::arg("system_given"));
  m.def("sweep", &sweep, py::arg("study"), py::arg("jobs"), py::arg("shard"), py::arg("shards"));
  m.def(
      "tune",
      [](std::int64_t devices, std::int64_t microbatches, std::optional<std::string> limit,
         bool builtins, std::optional<std::string> runnable_by, const SimArgs& args) {
        auto out = tune_search(devices, microbatches, limit, builtins, runnable_by, args);
        return py::make_tuple(out.json, out.tables);
      },
      py::arg("devices"), py::arg("microbatches"), py::arg("limit"), py::arg("builtins"),
      py::arg("runnable_by"), py::arg("args"));
  m.def("plan", &plan_layouts, py::arg("args"));
}
