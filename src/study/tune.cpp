#include "pipetab/study/tune.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/numeric.hpp"
#include "pipetab/schedules/registry.hpp"
#include "pipetab/schedules/zero_bubble.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/table/validate.hpp"

namespace pipetab {
namespace {

std::uint64_t fingerprint(const ScheduleTable& t) {
  // FNV-1a over the fields (not the bytes: Pass has padding).
  std::uint64_t h = 1469598103934665603ULL;
  const auto mix = [&h](std::uint64_t v) {
    h ^= v;
    h *= 1099511628211ULL;
  };
  for (auto b : t.row_begin)
    mix(static_cast<std::uint64_t>(b));
  for (const Op& op : t.ops) {
    for (const Pass& p : op.halves) {
      mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(p.microbatch)) << 24 |
          static_cast<std::uint64_t>(p.stage) << 8 | static_cast<std::uint64_t>(p.kind));
    }
  }
  return h;
}

class Search {
 public:
  explicit Search(const TuneRequest& r) : r_(r) {}

  TuneResult run() {
    if (r_.builtins) builtins();
    if (r_.heuristic) heuristic_family();
    rank();
    return std::move(out_);
  }

 private:
  // Simulates a table and keeps it unless an equal table already ran.
  void consider(std::string name, bool builtin, ScheduleTable table) {
    if (r_.progress) r_.progress(out_.generated);
    ++out_.generated;
    if (r_.runnable_by) {
      const auto schedule = std::string_view(name).substr(0, name.find(' '));
      if (const auto why = runtime_refuses(table, schedule, *r_.runnable_by)) {
        out_.skipped.push_back(fmt::format("{}: {}", name, *why));
        return;
      }
    }
    const auto key = fingerprint(table);
    auto [it, end] = seen_.equal_range(key);
    for (; it != end; ++it) {
      if (out_.candidates[it->second].table.same_schedule(table)) {
        ++out_.duplicates;
        return;
      }
    }
    TuneCandidate c;
    c.name = std::move(name);
    c.builtin = builtin;
    const auto peaks = activation_peaks(table, r_.memory);
    c.peak_activation = *std::max_element(peaks.begin(), peaks.end());
    const auto sim = simulate_table(table, r_.setup);
    c.runtime_s = sim.metrics.runtime_s;
    c.peak_memory_bytes = sim.metrics.peak_memory_max();
    c.fits = r_.limit.unit == MemoryLimit::Unit::Activations
                 ? c.peak_activation <= r_.limit.value + 1e-9
                 : c.peak_memory_bytes <= r_.limit.value;
    c.table = std::move(table);
    seen_.emplace(key, out_.candidates.size());
    out_.candidates.push_back(std::move(c));
  }

  // Every registered schedule at S, M, with its chunk, wave and variant options varied.
  void builtins() {
    for (const ScheduleInfo* info : all_schedules()) {
      std::vector<ScheduleParams> options;
      ScheduleParams base;
      base.devices = r_.devices;
      base.microbatches = r_.microbatches;
      options.push_back(base);
      const auto vary = [&options](auto&& set, std::initializer_list<std::int64_t> values) {
        std::vector<ScheduleParams> next;
        for (const auto& p : options) {
          for (auto v : values) {
            auto q = p;
            set(q, v);
            next.push_back(q);
          }
        }
        options = std::move(next);
      };
      if (info->default_chunks > 0)
        vary([](ScheduleParams& p, auto v) { p.chunks = v; }, {2, 3, 4});
      if (info->default_waves > 0) vary([](ScheduleParams& p, auto v) { p.waves = v; }, {1, 2, 3});
      if (!info->variants.empty()) {
        std::vector<ScheduleParams> next;
        for (const auto& p : options) {
          for (auto variant : info->variants) {
            auto q = p;
            q.variant = std::string(variant);
            next.push_back(q);
          }
        }
        options = std::move(next);
      }
      for (const auto& p : options) {
        std::string name(info->name);
        if (p.chunks) name += fmt::format(" -v {}", *p.chunks);
        if (p.waves) name += fmt::format(" -W {}", *p.waves);
        if (p.variant) name += " --variant " + *p.variant;
        try {
          consider(name, true, generate(*info, p));
        } catch (const ParamError& e) {
          out_.skipped.push_back(fmt::format("{}: {}", name, e.what()));
        }
      }
    }
  }

  void heuristic_family() {
    ZeroBubbleProblem problem = measured_zero_bubble_problem(r_.setup, r_.devices, r_.microbatches);
    problem.input_grad_frees = r_.memory.input_grad_frees;
    const double estimate = problem.comm;
    std::int32_t max_cap = std::min(r_.microbatches, 3 * r_.devices);
    if (r_.limit.unit == MemoryLimit::Unit::Activations) {
      max_cap = std::min(max_cap, floor_to<std::int32_t>(r_.limit.value + 1e-9));
    }
    std::vector<double> delays = {0.0};
    if (estimate > 0) delays.insert(delays.end(), {estimate, 2 * estimate});
    for (std::int32_t cap = 1; cap <= max_cap; ++cap) {
      problem.memory_limit = cap;
      for (double delay : delays) {
        problem.comm = delay;
        for (const auto& flags : ZeroBubbleFlags::all()) {
          consider(fmt::format("zb-heuristic cap={} delay={:.3g}s{}{}{}", cap, delay,
                               flags.warmup_overshoot ? " warmup-overshoot" : "",
                               flags.gap_overshoot ? " gap-overshoot" : "",
                               flags.eager_weight ? " eager-w" : ""),
                   false, zero_bubble_schedule(problem, flags).table);
        }
        // The authors' V-shape scheduler, planned for these costs (a V stage is half a device
        // share) and this delay.
        ZeroBubbleProblem v = problem;
        for (auto* times : {&v.forward, &v.input_grad, &v.weight_grad}) {
          for (double& t : *times)
            t /= 2;
        }
        for (const auto& flags : ZeroBubbleVFlags::all()) {
          auto schedule = zero_bubble_v_schedule(v, flags);
          if (!schedule) continue;
          try {
            consider(fmt::format("zb-authors-v cap={} delay={:.3g}s{}{}", cap, delay,
                                 flags.fill_f ? " fill-f" : "", flags.fill_b ? " fill-b" : ""),
                     false, std::move(schedule->table));
          } catch (const ParamError& e) {
            out_.skipped.push_back(fmt::format("zb-authors-v cap={}: {}", cap, e.what()));
          }
        }
        // The authors' own scheduler (their warm-up may hold every forward at M = S).
        for (const auto& flags : ZeroBubbleAuthorsFlags::all()) {
          auto schedule = zero_bubble_authors_schedule(problem, flags);
          if (!schedule) continue;
          consider(fmt::format("zb-authors cap={} delay={:.3g}s{}{}{}", cap, delay,
                               flags.allow_bubble_before_first_i ? " bubble-before-first-i" : "",
                               flags.prioritize_i ? " prioritize-i" : "",
                               flags.no_bubble_greedy ? " no-bubble-greedy" : ""),
                   false, std::move(schedule->table));
        }
      }
    }
  }

  void rank() {
    auto& c = out_.candidates;
    std::vector<std::size_t> order(c.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    // Fitting candidates by runtime; the others by how far over the limit they are, so that a
    // limit nothing meets shows what memory the fastest schedules need.
    const bool activations = r_.limit.unit == MemoryLimit::Unit::Activations;
    std::stable_sort(order.begin(), order.end(), [&c, activations](std::size_t a, std::size_t b) {
      if (c[a].fits != c[b].fits) return c[a].fits;
      if (!c[a].fits) {
        const double ma = activations ? c[a].peak_activation : c[a].peak_memory_bytes;
        const double mb = activations ? c[b].peak_activation : c[b].peak_memory_bytes;
        if (ma != mb) return ma < mb;
      }
      return c[a].runtime_s < c[b].runtime_s;
    });
    std::vector<TuneCandidate> sorted;
    sorted.reserve(c.size());
    for (auto i : order)
      sorted.push_back(std::move(c[i]));
    c = std::move(sorted);
    for (std::size_t i = 0; i < c.size(); ++i) {
      if (!c[i].fits) break;
      if (out_.best < 0) out_.best = static_cast<std::int64_t>(i);
      if (c[i].builtin && out_.best_builtin < 0) out_.best_builtin = static_cast<std::int64_t>(i);
    }
  }

  const TuneRequest& r_;
  TuneResult out_;
  std::unordered_multimap<std::uint64_t, std::size_t> seen_;
};

}  // namespace

MemoryLimit parse_memory_limit(const std::string& text) {
  const auto fail = [&text]() -> MemoryLimit {
    throw ParamError(fmt::format(
        "--memory-limit {}: expected activations in M_a (e.g. 6 or 6Ma) or bytes with a unit "
        "(e.g. 80GB, 80GiB, 512MB, 8e10B), greater than 0",
        text));
  };
  double number = 0;
  const std::size_t read = parse_number_prefix(text, number);
  if (read == 0 || !std::isfinite(number) || number <= 0) return fail();
  // 1e300GB used to be called "not positive": name the real fault, a number too large.
  const auto too_large = [&text](double largest, const char* unit) -> MemoryLimit {
    throw ParamError(
        fmt::format("--memory-limit {}: too large (at most {:g} {})", text, largest, unit));
  };
  std::string unit = text.substr(read);
  unit.erase(0, unit.find_first_not_of(' '));
  // Limits beyond every device's memory mean "no limit"; anything up to these is accepted and
  // anything above is an error rather than an infinity: 2^31 M_a, and 1 EB (10^18 bytes).
  constexpr double kMaxActivations = 2147483648.0, kMaxBytes = 1e18;
  if (unit.empty() || unit == "Ma" || unit == "M_a") {
    if (!(number <= kMaxActivations)) return too_large(kMaxActivations, "M_a");
    return {MemoryLimit::Unit::Activations, number};
  }
  struct Suffix {
    const char* name;
    double scale;
  };
  constexpr Suffix kSuffixes[] = {{"B", 1},
                                  {"kB", 1e3},
                                  {"KB", 1e3},
                                  {"MB", 1e6},
                                  {"GB", 1e9},
                                  {"TB", 1e12},
                                  {"KiB", 1024.0},
                                  {"MiB", 1048576.0},
                                  {"GiB", 1073741824.0},
                                  {"TiB", 1099511627776.0}};
  for (const auto& s : kSuffixes) {
    if (unit == s.name) {
      if (!(number * s.scale <= kMaxBytes)) return too_large(kMaxBytes / s.scale, s.name);
      return {MemoryLimit::Unit::Bytes, number * s.scale};
    }
  }
  return fail();
}

std::string to_string(const MemoryLimit& limit) {
  if (limit.unit == MemoryLimit::Unit::Activations) return fmt::format("{:g} M_a", limit.value);
  return fmt::format("{:.4g} GB", limit.value / 1e9);
}

// The heuristic's inputs measured on the workload: per-stage F, I, W times as the simulator
// lowers them (a 1f1b-split table has every kind once per stage), and the delay of the slowest
// stage boundary's message alone on its route.
ZeroBubbleProblem measured_zero_bubble_problem(const SimulationSetup& setup, std::int32_t devices,
                                               std::int32_t microbatches) {
  ScheduleParams p;
  p.devices = devices;
  p.microbatches = 1;
  const auto probe = generate(find_schedule("1f1b-split"), p);
  const Network network(setup.system, probe.devices, gpus_per_device(setup.layout));
  // Each pass's time with its exchanges (all-to-alls, context-parallel) alone on their links, as
  // the op's duration: what the scheduler plans with.
  LoweringOptions lowering = setup.lowering;
  lowering.inner_transfers = false;
  const auto graph = lower(probe, setup.model, setup.job, setup.layout, network, lowering);
  ZeroBubbleProblem problem = ZeroBubbleProblem::uniform(devices, microbatches, 0.0, 0.0, 0.0, 1.0);
  for (std::size_t n = 0; n < probe.ops.size(); ++n) {
    const Pass& pass = probe.ops[n].first();
    auto& slot = pass.kind == PassKind::F   ? problem.forward
                 : pass.kind == PassKind::I ? problem.input_grad
                                            : problem.weight_grad;
    slot[pass.stage] = graph.duration[n];
  }
  const auto work = table_work(probe, setup.model, setup.job, setup.layout);
  std::vector<std::int32_t> route;
  for (std::int32_t j = 0; j + 1 < devices; ++j) {
    route.clear();
    const double latency = network.append_route(j, j + 1, route);
    double bandwidth = std::numeric_limits<double>::infinity();
    for (auto link : route)
      bandwidth = std::min(bandwidth, network.links()[static_cast<std::size_t>(link)].bandwidth);
    const double bytes = work[static_cast<std::size_t>(j)].message_bytes;
    problem.comm = std::max(problem.comm, latency + (route.empty() ? 0.0 : bytes / bandwidth));
  }
  return problem;
}

TuneResult tune(const TuneRequest& request) {
  if (request.devices < 1 || request.devices > kMaxDevices) {
    throw ParamError(
        fmt::format("tune: devices (-S) = {}: must be from 1 to {}", request.devices, kMaxDevices));
  }
  if (request.microbatches < 1 || request.microbatches > kMaxMicrobatches) {
    throw ParamError(fmt::format("tune: microbatches (-M) = {}: must be from 1 to {}",
                                 request.microbatches, kMaxMicrobatches));
  }
  if (!(request.limit.value > 0) || !std::isfinite(request.limit.value)) {
    throw ParamError("tune: the memory limit must be a positive number");
  }
  // NaN passes every comparison-based bound and turns the memory accounting into NaN.
  if (!(request.memory.input_grad_frees >= 0.0 && request.memory.input_grad_frees <= 1.0)) {
    throw ParamError(fmt::format("tune: input_grad_frees = {}: must be a fraction from 0 to 1",
                                 request.memory.input_grad_frees));
  }
  require_supported(request.setup.system, request.setup.job, request.setup.layout,
                    request.setup.lowering);
  return Search(request).run();
}

bool over_device_memory(const TuneCandidate& c, const SimulationSetup& setup) {
  const double capacity = usable_memory_bytes(setup);
  return capacity > 0 && c.peak_memory_bytes > capacity;
}

nlohmann::json to_json(const TuneRequest& request, const TuneResult& result) {
  const auto& system = request.setup.system;
  const auto candidate = [&](std::int64_t i) {
    if (i < 0) return nlohmann::json(nullptr);
    const auto& c = result.candidates[static_cast<std::size_t>(i)];
    return nlohmann::json{{"name", c.name},
                          {"builtin", c.builtin},
                          {"fits", c.fits},
                          {"runtime_s", c.runtime_s},
                          {"peak_activation", c.peak_activation},
                          {"peak_memory_bytes", c.peak_memory_bytes},
                          {"over_device_memory", over_device_memory(c, request.setup)}};
  };
  nlohmann::json j = {
      {"devices", request.devices},
      {"microbatches", request.microbatches},
      {"system", system.name},
      {"model", request.setup.model.name},
      {"memory_limit",
       {{"unit", request.limit.unit == MemoryLimit::Unit::Activations ? "M_a" : "bytes"},
        {"value", request.limit.value}}},
      {"device_memory_bytes", system.device.memory_bytes},
      {"generated", result.generated},
      {"duplicates", result.duplicates},
      {"skipped", result.skipped}};
  j["best"] = candidate(result.best);
  j["best_builtin"] = candidate(result.best_builtin);
  auto& ranking = j["candidates"] = nlohmann::json::array();
  for (std::size_t i = 0; i < result.candidates.size(); ++i)
    ranking.push_back(candidate(static_cast<std::int64_t>(i)));
  return j;
}

}  // namespace pipetab
