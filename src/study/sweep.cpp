#include "pipetab/study/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/table_file.hpp"
#include "pipetab/report/evaluation.hpp"
#include "pipetab/report/output.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/table/validate.hpp"
#include "pipetab/threads.hpp"

namespace pipetab {

namespace {

const std::vector<std::string> kConfigColumns = {
    "index", "status",          "reason",        "system",
    "model", "bandwidth_scale", "latency_scale", "collective_scale"};

// Columns that identify a configuration, checked when a sweep resumes a file.
const std::vector<std::string> kIdentity = {
    "index", "schedule",        "params.devices", "params.microbatches", "system",
    "model", "bandwidth_scale", "latency_scale",  "collective_scale"};

nlohmann::json optional_json(const auto& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

std::vector<std::string> sweep_columns() {
  auto columns = kConfigColumns;
  for (auto& name : csv_header())
    columns.push_back(std::move(name));
  return columns;
}

SweepPlan::SweepPlan(Study study) : study_(std::move(study)) {
  configurations_ = ConfigurationSpace(study_);
  const auto all = sweep_columns();
  auto pick = [&](const std::string& name) {
    const auto at = std::find(all.begin(), all.end(), name);
    if (at == all.end()) throw Error(fmt::format("unknown sweep column '{}'", name));
    if (std::find(columns_.begin(), columns_.end(), name) != columns_.end()) return;
    columns_.push_back(name);
    picked_.push_back(static_cast<std::size_t>(at - all.begin()));
  };
  for (const char* name : {"index", "status", "reason"})
    pick(name);
  for (const auto& name : study_.record.empty() ? all : study_.record)
    pick(name);
  if (study_.simulate) {
    for (const auto& name : study_.systems)
      systems_.push_back(io::load_system(name));
    for (const auto& name : study_.models)
      models_.push_back(io::load_model(name));
  }
  for (const auto& entry : study_.schedules) {
    tables_.emplace_back();
    if (entry.table.empty()) continue;
    auto file = io::load_table(entry.table);
    if (!validate(file.table, 1).ok())
      throw Error(
          fmt::format("{}: invalid table (see pipetab validate {})", entry.table, entry.table));
    tables_.back() = std::move(file.table);
  }
}

std::vector<std::size_t> SweepPlan::identity_columns() const {
  std::vector<std::size_t> out;
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    if (std::find(kIdentity.begin(), kIdentity.end(), columns_[c]) != kIdentity.end())
      out.push_back(c);
  }
  return out;
}

SweepRow SweepPlan::identity(const Configuration& cfg) const {
  const auto& entry = study_.schedules[static_cast<std::size_t>(cfg.schedule)];
  const auto& table = tables_[static_cast<std::size_t>(cfg.schedule)];
  const bool file = !entry.table.empty();
  const bool simulated = cfg.system >= 0;
  auto sim = [&](auto value) {
    return simulated ? nlohmann::json(value) : nlohmann::json(nullptr);
  };
  SweepRow row;
  for (const auto c : identity_columns()) {
    const auto& name = columns_[c];
    if (name == "index") {
      row.emplace_back(cfg.index);
    } else if (name == "schedule") {
      row.emplace_back(file ? entry.table : entry.name);
    } else if (name == "params.devices") {
      row.emplace_back(file ? std::int64_t{table.devices} : cfg.devices);
    } else if (name == "params.microbatches") {
      row.emplace_back(file ? std::int64_t{table.microbatches} : cfg.microbatches);
    } else if (name == "system") {
      row.push_back(sim(simulated ? study_.systems[static_cast<std::size_t>(cfg.system)] : ""));
    } else if (name == "model") {
      row.push_back(sim(simulated ? study_.models[static_cast<std::size_t>(cfg.model)] : ""));
    } else if (name == "bandwidth_scale") {
      row.push_back(sim(cfg.bandwidth_scale));
    } else if (name == "latency_scale") {
      row.push_back(sim(cfg.latency_scale));
    } else {
      row.push_back(sim(cfg.collective_scale));
    }
  }
  return row;
}

SweepRow SweepPlan::run(const Configuration& cfg) const {
  const auto& entry = study_.schedules[static_cast<std::size_t>(cfg.schedule)];
  const auto& costs_text = study_.costs[static_cast<std::size_t>(cfg.costs)];
  const Costs costs = costs_text.empty() ? Costs{} : parse_costs(costs_text);
  const bool simulated = cfg.system >= 0;

  std::vector<nlohmann::json> all(kConfigColumns.size());
  all[0] = cfg.index;
  if (simulated) {
    all[3] = study_.systems[static_cast<std::size_t>(cfg.system)];
    all[4] = study_.models[static_cast<std::size_t>(cfg.model)];
    all[5] = cfg.bandwidth_scale;
    all[6] = cfg.latency_scale;
    all[7] = cfg.collective_scale;
  }
  try {
    std::optional<SimulationSetup> setup;
    if (simulated) {
      setup.emplace(default_setup(models_[static_cast<std::size_t>(cfg.model)],
                                  systems_[static_cast<std::size_t>(cfg.system)]));
      setup->system.intra = setup->system.intra.scaled(cfg.bandwidth_scale, cfg.latency_scale);
      setup->system.inter = setup->system.inter.scaled(cfg.bandwidth_scale, cfg.latency_scale);
      apply_settings(*setup, study_.settings);
      setup->lowering.collective_scale = cfg.collective_scale;
      auto applied = setup->model.defaults;
      applied.insert(applied.end(), study_.settings.begin(), study_.settings.end());
      require_valid(*setup, applied);
    }
    const EvaluationOptions options{study_.memory, false, setup ? &*setup : nullptr};
    Evaluation e;
    if (!entry.table.empty()) {
      e = evaluate(tables_[static_cast<std::size_t>(cfg.schedule)], nullptr, entry.table, costs,
                   options);
    } else {
      ScheduleParams p;
      p.devices = cfg.devices;
      p.microbatches = cfg.microbatches;
      p.chunks = cfg.chunks;
      p.waves = cfg.waves;
      p.variant = cfg.variant;
      p.split = cfg.split;
      const auto& info = find_schedule(entry.name);
      const auto params = resolve(info, setup ? job_schedule_params(p, info, setup->job) : p);
      e = evaluate(info.generate(params), &params, entry.name, costs, options);
    }
    all[1] = "ok";
    for (auto& [key, value] : flat_record(e))
      all.push_back(std::move(value));
  } catch (const Error& error) {
    // The configuration cannot run (a schedule's constraint, an oversized table): recorded with
    // its reason and its own values, never dropped.
    std::string reason = error.what();
    if (!entry.name.empty() && reason.rfind(entry.name + ": ", 0) == 0)
      reason = reason.substr(entry.name.size() + 2);
    all[1] = "skipped";
    all[2] = reason;
    Evaluation blank;
    blank.schedule = entry.table.empty() ? entry.name : entry.table;
    blank.costs = costs;
    for (auto& [key, value] : flat_record(blank)) {
      if (key == "schedule" || key.rfind("costs.", 0) == 0) {
        all.push_back(std::move(value));
      } else if (key == "params.devices" && cfg.devices > 0) {
        all.emplace_back(cfg.devices);
      } else if (key == "params.microbatches" && cfg.microbatches > 0) {
        all.emplace_back(cfg.microbatches);
      } else if (key == "params.chunks") {
        all.push_back(optional_json(cfg.chunks));
      } else if (key == "params.waves") {
        all.push_back(optional_json(cfg.waves));
      } else if (key == "params.variant") {
        all.push_back(optional_json(cfg.variant));
      } else if (key == "params.split") {
        all.push_back(optional_json(cfg.split));
      } else {
        all.emplace_back(nullptr);
      }
    }
  }
  SweepRow row;
  row.reserve(picked_.size());
  for (const auto at : picked_)
    row.push_back(std::move(all[at]));
  return row;
}

std::int64_t run_sweep(const SweepPlan& plan, std::int64_t begin, std::int64_t end, int threads,
                       const std::function<void(std::int64_t, SweepRow&&)>& sink,
                       const std::atomic<bool>* stop) {
  if (begin >= end) return 0;
  if constexpr (!kHasThreads) {
    // One row after another on this thread: the same rows in the same order.
    std::int64_t index = begin;
    for (; index < end && !(stop != nullptr && stop->load()); ++index)
      sink(index, plan.run(plan.configurations()[static_cast<std::size_t>(index)]));
    return index - begin;
  }
  const auto count = end - begin;
  const auto workers = static_cast<int>(std::clamp<std::int64_t>(threads, 1, count));

  // Finished rows wait in `done` until every row before them has been delivered; a worker takes
  // the next index only while fewer than `window` rows wait, so memory stays bounded even when
  // one slow configuration holds up delivery.
  const std::int64_t window = std::max<std::int64_t>(64, 8 * workers);
  std::vector<std::optional<SweepRow>> done(static_cast<std::size_t>(std::min(count, window)));
  std::mutex mutex;
  std::condition_variable changed;
  std::int64_t next = begin;       // next index to start
  std::int64_t delivered = begin;  // next index to deliver
  std::int64_t started_end = begin;
  std::exception_ptr failure;
  bool halt = false;

  // `stop` is set from a signal handler, which cannot notify: waits poll it.
  auto stopped = [&] { return stop != nullptr && stop->load(); };
  auto wait = [&](std::unique_lock<std::mutex>& lock, auto&& ready) {
    while (!ready())
      changed.wait_for(lock, std::chrono::milliseconds(50));
  };
  auto slot = [&](std::int64_t index) -> std::optional<SweepRow>& {
    return done[static_cast<std::size_t>((index - begin) % static_cast<std::int64_t>(done.size()))];
  };
  auto work = [&] {
    for (;;) {
      std::int64_t index = 0;
      {
        std::unique_lock lock(mutex);
        wait(lock, [&] {
          return halt || next >= end || stopped() ||
                 next - delivered < static_cast<std::int64_t>(done.size());
        });
        if (halt || next >= end || stopped()) {
          changed.notify_all();
          return;
        }
        index = next++;
        started_end = next;
      }
      std::optional<SweepRow> row;
      try {
        row = plan.run(plan.configurations()[static_cast<std::size_t>(index)]);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
        halt = true;
        changed.notify_all();
        return;
      }
      std::lock_guard lock(mutex);
      slot(index) = std::move(row);
      // Only the next row to deliver lets the delivering thread go on.
      if (index == delivered) changed.notify_all();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(workers));
  for (int t = 0; t < workers; ++t)
    pool.emplace_back(work);

  // Every row ready in order is taken under one lock and handed on outside it.
  std::vector<SweepRow> ready;
  for (bool more = true; more;) {
    std::int64_t first = 0;
    {
      std::unique_lock lock(mutex);
      wait(lock, [&] {
        if (halt) return true;
        if (delivered < end && slot(delivered).has_value()) return true;
        // Stopped (or finished): nothing more will come once every started row is delivered.
        const bool no_more = next >= end || stopped();
        return no_more && delivered >= started_end;
      });
      if (halt || delivered >= end || !slot(delivered).has_value()) break;
      first = delivered;
      while (delivered < end && slot(delivered).has_value()) {
        ready.push_back(std::move(*slot(delivered)));
        slot(delivered).reset();
        ++delivered;
      }
      changed.notify_all();
    }
    for (std::size_t i = 0; i < ready.size(); ++i) {
      try {
        sink(first + static_cast<std::int64_t>(i), std::move(ready[i]));
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
        halt = true;
        changed.notify_all();
        // The rows after the failed one were taken but not handed on.
        delivered = first + static_cast<std::int64_t>(i);
        more = false;
        break;
      }
    }
    ready.clear();
  }
  {
    std::lock_guard lock(mutex);
    halt = true;
    changed.notify_all();
  }
  for (auto& thread : pool)
    thread.join();
  if (failure) std::rethrow_exception(failure);
  return delivered - begin;
}

std::string sweep_header(const SweepPlan& plan) {
  return csv_line(plan.columns());
}

std::string format_row(const SweepPlan& plan, const SweepRow& row, SweepFormat format) {
  if (format == SweepFormat::Csv) {
    std::string line;
    line.reserve(16 * row.size());
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c) line += ',';
      append_csv_cell(line, row[c]);
    }
    return line + '\n';
  }
  // Keys in column order (a JSON object from nlohmann would sort them).
  std::string line = "{";
  for (std::size_t c = 0; c < row.size(); ++c) {
    if (c) line += ',';
    line += nlohmann::json(plan.columns()[c]).dump();
    line += ':';
    line += row[c].dump();
  }
  return line + "}\n";
}

std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t total, std::int64_t k,
                                                  std::int64_t n) {
  if (n < 1 || k < 1 || k > n)
    throw Error(fmt::format("--shard {}/{}: expected K/N with 1 <= K <= N", k, n));
  // total · k fits in 64 bits: total ≤ kMaxConfigurations (2^26) and n is bounded by the caller.
  return {total * (k - 1) / n, total * k / n};
}

}  // namespace pipetab
