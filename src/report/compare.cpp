#include "pipetab/report/compare.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "pipetab/report/output.hpp"
#include "pipetab/report/text.hpp"

namespace pipetab {
namespace {

bool same(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
}

// Competition ranks of the present values, lower first; absent values get 0. With `last`, the
// values it marks rank after all the others (a schedule that does not fit in memory).
std::vector<int> ranks(const std::vector<std::optional<double>>& values,
                       const std::vector<bool>& last = {}) {
  const auto marked = [&](std::size_t i) { return !last.empty() && last[i]; };
  std::vector<int> rank(values.size(), 0);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!values[i]) continue;
    int better = 0;
    for (std::size_t j = 0; j < values.size(); ++j) {
      const auto& other = values[j];
      if (!other) continue;
      if (marked(j) != marked(i)) {
        better += marked(i) ? 1 : 0;
      } else if (*other < *values[i] && !same(*other, *values[i])) {
        ++better;
      }
    }
    rank[i] = better + 1;
  }
  return rank;
}

// Where a schedule's place differs between two levels, among the schedules present at both.
std::vector<bool> changed(const std::vector<std::optional<double>>& a,
                          const std::vector<std::optional<double>>& b,
                          const std::vector<bool>& b_last = {}) {
  std::vector<std::optional<double>> both_a(a.size()), both_b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] && b[i]) {
      both_a[i] = a[i];
      both_b[i] = b[i];
    }
  }
  const auto ra = ranks(both_a), rb = ranks(both_b, b_last);
  std::vector<bool> out(a.size(), false);
  for (std::size_t i = 0; i < a.size(); ++i)
    out[i] = both_a[i] && ra[i] != rb[i];
  return out;
}

nlohmann::json rank_or_null(int rank) {
  return rank ? nlohmann::json(rank) : nlohmann::json(nullptr);
}

}  // namespace

Comparison compare(std::vector<Evaluation> rows, std::vector<Skipped> skipped) {
  Comparison c;
  c.rows = std::move(rows);
  c.skipped = std::move(skipped);
  const auto n = c.rows.size();
  std::vector<std::optional<double>> formula(n), table(n), simulation(n), memory(n);
  std::vector<bool> over_memory(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& e = c.rows[i];
    if (e.formula) formula[i] = e.formula->published_bubble_ratio;
    table[i] = e.table.makespan;
    if (e.simulation) {
      simulation[i] = e.simulation->runtime_s;
      over_memory[i] = e.simulation->any_over_capacity();
      c.system = e.simulation->system;
      c.model = e.simulation->model;
    }
    memory[i] = e.table.peak_activation_max();
  }
  c.formula_rank = ranks(formula);
  c.table_rank = ranks(table);
  c.simulation_rank = ranks(simulation, over_memory);
  c.memory_rank = ranks(memory);
  c.rank_changed = changed(formula, table);
  c.simulation_rank_changed = changed(table, simulation, over_memory);
  return c;
}

nlohmann::json to_json(const Comparison& c) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    auto row = to_json(c.rows[i]);
    row["rank"] = {{"formula", rank_or_null(c.formula_rank[i])},
                   {"table", c.table_rank[i]},
                   {"simulation", rank_or_null(c.simulation_rank[i])},
                   {"memory", c.memory_rank[i]},
                   {"changed", static_cast<bool>(c.rank_changed[i])},
                   {"changed_simulation", static_cast<bool>(c.simulation_rank_changed[i])}};
    rows.push_back(std::move(row));
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : c.skipped)
    skipped.push_back({{"schedule", s.schedule}, {"reason", s.reason}});
  return {{"system", c.system.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.system)},
          {"model", c.model.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.model)},
          {"schedules", std::move(rows)},
          {"skipped", std::move(skipped)}};
}

std::string to_csv(const Comparison& c, bool header) {
  std::string out;
  if (header) {
    auto names = csv_header();
    for (const char* name : {"rank.formula", "rank.table", "rank.simulation", "rank.memory",
                             "rank.changed", "rank.changed_simulation"}) {
      names.emplace_back(name);
    }
    out += csv_line(names);
  }
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    auto row = csv_row(c.rows[i]);
    row.push_back(c.formula_rank[i] ? std::to_string(c.formula_rank[i]) : "");
    row.push_back(std::to_string(c.table_rank[i]));
    row.push_back(c.simulation_rank[i] ? std::to_string(c.simulation_rank[i]) : "");
    row.push_back(std::to_string(c.memory_rank[i]));
    row.emplace_back(c.rank_changed[i] ? "true" : "false");
    row.emplace_back(c.simulation_rank_changed[i] ? "true" : "false");
    out += csv_line(row);
  }
  return out;
}

std::string to_text(const Comparison& c, bool legend) {
  std::string out;
  if (!c.rows.empty()) {
    const auto& first = c.rows.front();
    out += fmt::format("{} devices, {} microbatches; table costs {} per device share",
                       first.shape.devices, first.shape.microbatches, to_string(first.costs));
    if (!c.system.empty()) out += fmt::format("; simulated on {} with model {}", c.system, c.model);
    out += "\n\n";
  }
  // The name column fits the longest name (a table file's path can be long), so that the
  // columns after it stay aligned.
  std::size_t name = 14;
  for (const auto& e : c.rows)
    name = std::max(name, e.schedule.size() + 1);
  out += fmt::format("{:<{}}| {:<17} | {:<23} | {:<20} | {}\n", "", name + 7, "formula",
                     "table (idealized)", "simulation", "memory");
  out +=
      fmt::format("{:<{}}{:>6} | {:>10}{:>6}  | {:>9}{:>8}{:>6} | {:>10}{:>5}{:>5} | {:>8}{:>9}\n",
                  "schedule", name, "stages", "published", "rank", "makespan", "bubble", "rank",
                  "runtime s", "idle", "rank", "act M_a", "peak GB");
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    const auto& e = c.rows[i];
    // 's' marks a per-device-span (Def-A) rate, '~' one its paper states approximately.
    std::string published = "-";
    if (e.formula && e.formula->published_bubble_ratio) {
      const auto kind = e.formula->published_kind;
      published = fmt::format("{}{:.4f}{}", kind == PublishedBubble::approximate_span ? "~" : "",
                              *e.formula->published_bubble_ratio,
                              kind == PublishedBubble::global ? "" : "s");
    }
    std::string marks;
    if (c.rank_changed[i]) marks += "  * formula -> table";
    if (c.simulation_rank_changed[i]) marks += "  * table -> simulation";
    const auto& sim = e.simulation;
    out += fmt::format(
        "{:<{}}{:>6} | {:>10}{:>6}  | {:>9}{:>8.4f}{:>6} | {:>10}{:>5}{:>5} | {:>8}{:>9}{}\n",
        e.schedule, name, e.shape.stages, published,
        c.formula_rank[i] ? std::to_string(c.formula_rank[i]) : "-",
        fmt::format("{:g}", e.table.makespan), e.table.bubble_ratio, c.table_rank[i],
        sim ? fmt::format("{:.4g}", sim->runtime_s) : "-",
        sim ? fmt::format("{:.2f}", sim->idle_ratio) : "-",
        c.simulation_rank[i] ? std::to_string(c.simulation_rank[i]) : "-",
        fmt::format("{:g}", e.table.peak_activation_max()),
        sim ? fmt::format("{:.4g}{}", sim->peak_memory_max() / 1e9,
                          sim->any_over_capacity() ? "!" : "")
            : "-",
        marks);
  }
  for (const auto& e : c.rows) {
    if (!e.simulation_error.empty())
      out += fmt::format("{:<{}}not simulated: {}\n", e.schedule, name, e.simulation_error);
  }
  for (const auto& s : c.skipped)
    out += fmt::format("{:<{}}skipped: {}\n", s.schedule, name, s.reason);
  // Which runtime ran each schedule (the default picks each table's own).
  std::vector<std::pair<std::string, std::vector<std::string>>> runtimes;
  for (const auto& e : c.rows) {
    if (!e.simulation) continue;
    auto it = std::find_if(runtimes.begin(), runtimes.end(),
                           [&](const auto& r) { return r.first == e.simulation->runtime; });
    if (it == runtimes.end()) it = runtimes.insert(runtimes.end(), {e.simulation->runtime, {}});
    it->second.push_back(e.schedule);
  }
  if (!runtimes.empty()) {
    std::vector<std::string> parts;
    for (const auto& [runtime, names] : runtimes)
      parts.push_back(fmt::format("{} ({})", runtime, fmt::join(names, ", ")));
    out += fmt::format("runtime: {}\n", fmt::join(parts, "; "));
  }
  // The error bar, as factors of each runtime: one model, job and system share one regime's
  // residuals, so every row's interval is its runtime times the same two factors.
  for (const auto& e : c.rows) {
    if (!e.simulation) continue;
    const auto& m = *e.simulation;
    if (m.runtime_interval) {
      const auto& i = *m.runtime_interval;
      out += wrap(fmt::format("error bar: each runtime × {:.3f} to × {:.3f} ({:.0f}%, from {} "
                              "published {} runs on {}){}",
                              i.low_s / m.runtime_s, i.high_s / m.runtime_s, 100 * i.level, i.runs,
                              regime_words(i.regime), i.basis,
                              m.interval_note.empty() ? "" : "; " + m.interval_note),
                  kTextWidth, "", "  ");
    } else if (!m.interval_note.empty()) {
      out += wrap("error bar: none, " + m.interval_note, kTextWidth, "", "  ");
    }
    break;
  }
  if (!legend) return out;
  out +=
      "\nRanks, lower first, ties shared: formula by the published bubble ratio (under its "
      "paper's\n"
      "assumptions, e.g. equal F and B; the exact closed forms always equal the table; 's' = a\n"
      "per-device-span rate, the zero-bubble papers' definition, '~' = approximate), table by\n"
      "makespan, simulation by runtime, a schedule over the device's usable memory after those\n"
      "that fit. '*' marks a schedule whose place changes between two levels (among the\n"
      "schedules ranked at both). Memory: activation peak of the table in M_a, and the simulated\n"
      "peak per device (weights, gradients, optimizer state and activations; '!' = over the\n"
      "device's usable memory: its capacity less what the CUDA context and NCCL hold outside\n"
      "the caching allocator, or less --memory-reserve where one is given).\n";
  return out;
}

}  // namespace pipetab
