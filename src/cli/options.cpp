#include "options.hpp"

#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/table_export.hpp"
#include "pipetab/numeric.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/sim/run_shape.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab::cli {

namespace {

// CLI11 clamps out-of-range integers and reads "010" as octal and "0x10" as hex; whole
// numbers here are decimal, so the text is checked and rewritten in canonical decimal first.
const CLI::Validator kWholeNumber(
    [](std::string& text) {
      std::int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size()) {
        return fmt::format("'{}' is not a whole number within 64 bits", text);
      }
      text = std::to_string(value);
      return std::string();
    },
    "INT");

// A number in [lo, hi], named `what` in the error; CLI::Range lets NaN through.
CLI::Validator number_in(double lo, double hi, const std::string& what, const std::string& name) {
  return CLI::Validator(
      [=](std::string& text) {
        double value = 0.0;
        const auto [ptr, ec] = pipetab::parse_double(text.data(), text.data() + text.size(), value);
        if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size() ||
            !(value >= lo && value <= hi)) {
          return fmt::format("'{}' is not {}", text, what);
        }
        return std::string();
      },
      name);
}

const CLI::Validator kFraction = number_in(0.0, 1.0, "a fraction between 0 and 1", "FRACTION");
const CLI::Validator kScale = number_in(1e-6, 1e6, "a factor between 1e-6 and 1e6", "FACTOR");

}  // namespace

void add_schedule_options(CLI::App& command, ScheduleOptions& o) {
  o.devices = kDefaultDevices;
  o.microbatches = kDefaultMicrobatches;
  o.devices_opt =
      command.add_option("-S,--devices", o.devices, "pipeline depth S: number of devices")
          ->transform(kWholeNumber)
          ->capture_default_str();
  o.microbatches_opt =
      command.add_option("-M,--microbatches", o.microbatches, "microbatches per iteration M")
          ->transform(kWholeNumber)
          ->capture_default_str();
  o.chunks_opt =
      command
          .add_option("-v,--chunks", o.chunks, "model chunks per device v (interleaved; default 2)")
          ->transform(kWholeNumber);
  o.waves_opt = command.add_option("-W,--waves", o.waves, "waves W (hanayo; default 2)")
                    ->transform(kWholeNumber);
  o.group_size_opt =
      command
          .add_option("--group-size", o.group_size,
                      "microbatches per group G of the interleaved order (Megatron's "
                      "microbatch_group_size_per_vp_stage; default S where M is a multiple of S, "
                      "else PyTorch's M/max(1,M/S))")
          ->transform(kWholeNumber);
  o.variant_opt = command.add_option("--variant", o.variant,
                                     "schedule variant, e.g. chimera's direct or doubling");
  o.split_opt =
      command.add_option("--split", o.split, "stage-size split E:L of chimera-asym (default 1:2)");
  o.costs_opt =
      command
          .add_option("--costs", o.costs,
                      "op costs per device share, e.g. F=1,B=2,I=1,W=1 (B = I + W and I = W = B/2 "
                      "are derived when left out)")
          ->default_str("F=1,B=2,I=1,W=1");
  command
      .add_option(
          "--input-grad-frees", o.input_grad_frees,
          "fraction of a stage's activation an I (input-grad backward) frees; W frees the rest")
      ->check(kFraction)
      ->capture_default_str();
}

namespace {
std::string running_subcommand;  // set_running_subcommand: "" registers every command's flags
}  // namespace

void set_running_subcommand(std::string_view name) {
  running_subcommand = std::string(name);
}

void add_run_flags(CLI::App& command, RunFlags& flags, std::span<const std::string_view> except,
                   bool gpus) {
  if (!running_subcommand.empty() && command.get_name() != running_subcommand) return;
  const SimulationSetup defaults = default_setup({}, {});
  auto* settings = &flags.settings;
  command.add_option("--job", flags.job_path,
                     "the job and layout from a torchtitan job TOML or a Megatron-LM argument "
                     "list (docs/jobs.md); the flags given here override it");
  if (gpus) {
    command
        .add_option("--gpus", flags.gpus,
                    "GPUs in all: for a job file that leaves them implicit, and the data-parallel "
                    "replicas (GPUs / (PP × TP × CP)) where no option gives them")
        ->transform(kWholeNumber)
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 31));
  }
  for (const RunOption& o : run_options()) {
    if (o.flag.empty() || std::find(except.begin(), except.end(), o.key) != except.end()) continue;
    const std::string key(o.key), flag(o.flag);
    const std::string help(o.help);
    if (o.type == OptionType::Boolean) {
      if (!o.flag_sets) {
        command.add_flag_callback(
            flag,
            [settings, key, flag] {
              settings->push_back({key, "false", flag});
            },
            help);
        continue;
      }
      // --X sets it, --no-X clears it (a default from the model file or a job file, say).
      const std::string negation = "--no-" + flag.substr(2);
      command.add_flag_function(
          fmt::format("{},!{}", flag, negation),
          [settings, key, flag, negation](std::int64_t count) {
            settings->push_back({key, count > 0 ? "true" : "false", count > 0 ? flag : negation});
          },
          help + fmt::format(" ({} turns it off)", negation));
      continue;
    }
    auto* option = command.add_option_function<std::string>(
        flag,
        [settings, key, flag, scale = o.flag_scale](const std::string& text) {
          std::string value = text;
          if (scale != 1.0) {
            double number = 0.0;
            pipetab::parse_double(text.data(), text.data() + text.size(), number);
            value = fmt::format("{}", number * scale);
          }
          settings->push_back({key, value, flag});
        },
        o.flag_unit.empty() ? help : fmt::format("{} ({})", help, o.flag_unit));
    switch (o.type) {
      case OptionType::Integer:
        option->transform(kWholeNumber)
            ->check(CLI::Range(static_cast<std::int64_t>(o.min), static_cast<std::int64_t>(o.max)));
        break;
      case OptionType::Number:
        option->check(number_in(
            o.min / o.flag_scale, o.max / o.flag_scale,
            fmt::format("a number from {:g} to {:g}", o.min / o.flag_scale, o.max / o.flag_scale),
            "NUMBER"));
        break;
      case OptionType::Tristate:
        option->check(CLI::IsMember({"auto", "true", "false", "on", "off"}));
        break;
      case OptionType::Choice:
        option->check(CLI::IsMember(std::vector<std::string>(o.choices.begin(), o.choices.end())));
        break;
      case OptionType::Boolean:
      case OptionType::Text:
        break;
    }
    std::string shown = o.get(defaults);
    if (o.flag_scale != 1.0) shown = fmt::format("{:g}", std::stod(shown) / o.flag_scale);
    if (!shown.empty()) option->default_str(shown);
  }
}

void add_simulation_options(CLI::App& command, ScheduleOptions& o) {
  o.system_opt = command
                     .add_option("--system", o.system,
                                 "system preset or TOML file for the simulation level (presets: " +
                                     fmt::format("{}", fmt::join(io::system_presets(), ", ")) + ")")
                     ->capture_default_str();
  command
      .add_option("--model", o.model,
                  "model preset, TOML file, or Hugging Face config.json or its folder (presets: " +
                      fmt::format("{}", fmt::join(io::model_presets(), ", ")) + ")")
      ->capture_default_str();
  add_run_flags(command, o.run);
  command
      .add_option("--bandwidth-scale", o.bandwidth_scale,
                  "multiply every link's bandwidth (inside and across nodes) by this factor, as "
                  "the sensitivity study does")
      ->check(kScale)
      ->capture_default_str();
  command
      .add_option("--latency-scale", o.latency_scale,
                  "multiply every link's latencies by this factor")
      ->check(kScale)
      ->capture_default_str();
}

const io::JobFile* RunFlags::job() const {
  if (job_path.empty()) return nullptr;
  if (!job_) {
    job_ = io::read_job_file(job_path, gpus);
    std::string read;
    for (const auto& s : job_->settings)
      read += fmt::format("{}{} = {}", read.empty() ? "" : ", ", s.key, s.value);
    fmt::print(stderr, "note: {} ({}): read {}\n", job_path, job_->format,
               read.empty() ? std::string("nothing") : read);
    if (!job_->ignored.empty())
      fmt::print(stderr, "note: {}: ignored {}\n", job_path, fmt::join(job_->ignored, "; "));
    for (const auto& note : job_->notes)
      fmt::print(stderr, "note: {}: {}\n", job_path, note);
  }
  return &*job_;
}

std::vector<Setting> RunFlags::all() const {
  std::vector<Setting> out;
  if (const auto* file = job()) {
    for (const auto& s : file->settings) {
      if (s.key != "gpus") out.push_back(s);
    }
  }
  out.insert(out.end(), settings.begin(), settings.end());
  return out;
}

SimulationSetup run_setup(const RunFlags& flags, const std::string& model,
                          const std::string& system) {
  SimulationSetup setup = default_setup(io::load_model(model), io::load_system(system));
  for (const auto& note : setup.model.notes)
    fmt::print(stderr, "note: {}\n", note);
  const auto given = flags.all();
  apply_settings(setup, given);
  auto applied = setup.model.defaults;
  applied.insert(applied.end(), given.begin(), given.end());
  require_valid(setup, applied);
  return setup;
}

namespace {

// Whether `key` is set by a job file or a flag.
bool given(const RunFlags& run, std::string_view key) {
  const auto all = run.all();
  return std::any_of(all.begin(), all.end(), [&](const Setting& s) { return s.key == key; });
}

// The GPU count a job file states or implies, or --gpus.
std::optional<std::int64_t> gpu_count(const RunFlags& run) {
  if (run.gpus) return run.gpus;
  if (const auto* file = run.job()) {
    for (const auto& s : file->settings) {
      if (s.key == "gpus") return std::stoll(s.value);
    }
  }
  return std::nullopt;
}

// The pipeline's depth and, from the GPU count, the data-parallel replicas where no option
// gives them (sim/run_shape.hpp, as the Python API resolves them).
void resolve_layout(Layout& layout, std::int64_t devices, const RunFlags& run) {
  resolve_replicas(layout, devices, gpu_count(run), given(run, "data_parallel"), "--gpus");
}

}  // namespace

std::int64_t ScheduleOptions::pipeline_devices() const {
  if (devices_opt->count() || run.job() == nullptr) return devices;
  for (const auto& s : run.job()->settings) {
    if (s.key == "pipeline_parallel") return std::stoll(s.value);
  }
  return devices;
}

SimulationSetup ScheduleOptions::run_values() const {
  SimulationSetup setup = default_setup(io::load_model(model), {});
  apply_settings(setup, run.all());
  resolve_layout(setup.layout, pipeline_devices(), run);
  return setup;
}

SimulationSetup ScheduleOptions::simulation(const std::string* system_name) const {
  SimulationSetup setup =
      default_setup(io::load_model(model), io::load_system(system_name ? *system_name : system));
  for (const auto& note : setup.model.notes)
    fmt::print(stderr, "note: {}\n", note);
  const auto given = run.all();
  apply_settings(setup, given);
  resolve_layout(setup.layout, pipeline_devices(), run);
  auto applied = setup.model.defaults;
  applied.insert(applied.end(), given.begin(), given.end());
  require_valid(setup, applied);
  setup.system.intra = setup.system.intra.scaled(bandwidth_scale, latency_scale);
  setup.system.inter = setup.system.inter.scaled(bandwidth_scale, latency_scale);
  if (costs_opt->count()) setup.lowering.costs = parsed_costs();
  return setup;
}

ScheduleParams ScheduleOptions::params(const ScheduleInfo* info, bool only_applicable) const {
  ScheduleParams p;
  p.devices = pipeline_devices();
  p.microbatches = microbatches;
  const bool all = !only_applicable || info == nullptr;
  if (chunks_opt->count() && (all || info->default_chunks > 0)) p.chunks = chunks;
  // A job file's (or --global-batch's) batch and chunks where -M and -v leave them.
  if (run.job() != nullptr || given(run, "global_batch")) {
    const SimulationSetup values = run_values();
    if (!chunks_opt->count() && values.layout.chunks > 0 && (all || info->default_chunks > 0))
      p.chunks = values.layout.chunks;
    const auto given_microbatches =
        microbatches_opt->count() ? std::optional<std::int64_t>(microbatches) : std::nullopt;
    if (const auto m = batch_microbatches(values.job, values.layout, given_microbatches, "-M"))
      p.microbatches = *m;
  }
  // The order Megatron-Core runs when the job overlaps the experts' all-to-alls.
  if (info != nullptr && info->takes_combined_1f1b && given(run, "a2a_overlap"))
    p = job_schedule_params(p, *info, run_values().job);
  if (waves_opt->count() && (all || info->default_waves > 0)) p.waves = waves;
  if (group_size_opt->count() && (all || info->takes_group_size)) p.group_size = group_size;
  if (variant_opt->count() && (all || !info->variants.empty())) p.variant = variant;
  if (split_opt->count() && (all || !info->default_split.empty())) p.split = split;
  return p;
}

Costs ScheduleOptions::parsed_costs() const {
  return costs_opt->count() ? parse_costs(costs) : Costs{};
}

MemoryOptions ScheduleOptions::memory() const {
  return MemoryOptions{input_grad_frees};
}

bool ScheduleOptions::any_shape_flag() const {
  for (const auto* opt : {devices_opt, microbatches_opt, chunks_opt, waves_opt, group_size_opt,
                          variant_opt, split_opt}) {
    if (opt->count()) return true;
  }
  return false;
}

Subject generated_subject(const std::string& name, const ScheduleOptions& options,
                          bool only_applicable) {
  const ScheduleInfo& info = find_schedule(name);
  Subject subject;
  subject.name = std::string(info.name);  // "1F1B", "ScheduleZBVZeroBubble": the registry's key
  subject.params = resolve(info, options.params(&info, only_applicable));
  if (!subject.params->note.empty()) fmt::print(stderr, "note: {}\n", subject.params->note);
  subject.table = info.generate(*subject.params);
  return subject;
}

Subject file_subject(const std::string& path, const ScheduleOptions& options) {
  if (options.any_shape_flag()) {
    throw Error(
        fmt::format("--table {}: the file sets the sizes; -S, -M, -v, -W, --variant and --split "
                    "do not apply to it",
                    path));
  }
  return file_subject(path);
}

Subject file_subject(const std::string& path) {
  Subject subject;
  subject.name = path;
  subject.file = io::load_table(path);
  io::require_valid(*subject.file);
  subject.table = subject.file->table;
  return subject;
}

void add_subject_options(CLI::App& command, SubjectOptions& o) {
  command.add_option("name", o.name, "schedule name (see pipetab list)");
  command.add_option("--table", o.table,
                     "a table file (PyTorch CSV or pipetab JSON) instead of a name");
  add_schedule_options(command, o.schedule);
  command.add_option("-o,--output", o.output, "write to this file instead of stdout");
}

Subject one_subject(const SubjectOptions& o) {
  if (!o.name.empty() && !o.table.empty()) {
    throw Error(fmt::format("give a schedule name or --table FILE, not both ('{}' and --table {})",
                            o.name, o.table));
  }
  std::string name = o.name;
  if (name.empty() && o.table.empty() && o.schedule.run.job() != nullptr)
    name = job_schedule(o.schedule.run.job()->settings);  // a job file's stands for the name
  if (name.empty() && o.table.empty())
    throw Error("give a schedule name (see pipetab list) or --table FILE");
  return name.empty() ? file_subject(o.table, o.schedule)
                      : generated_subject(name, o.schedule, false);
}

}  // namespace pipetab::cli
