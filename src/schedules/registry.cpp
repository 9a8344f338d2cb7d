#include "pipetab/schedules/registry.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pipetab/error.hpp"
#include "pipetab/names.hpp"

namespace pipetab {

namespace schedules {
#define PIPETAB_SCHEDULE(info) extern const ScheduleInfo info;
#include "list.inc"
#undef PIPETAB_SCHEDULE
}  // namespace schedules

namespace {

constexpr const ScheduleInfo* kAll[] = {
#define PIPETAB_SCHEDULE(info) &schedules::info,
#include "list.inc"
#undef PIPETAB_SCHEDULE
};

std::int32_t in_range(const ScheduleInfo& info, const char* what, std::int64_t value,
                      std::int64_t limit) {
  if (value < 1)
    throw ParamError(fmt::format("{}: {} = {}: must be at least 1", info.name, what, value));
  if (value > limit) {
    throw ParamError(fmt::format("{}: {} = {}: must be at most {}", info.name, what, value, limit));
  }
  return static_cast<std::int32_t>(value);
}

[[noreturn]] void not_taken(const ScheduleInfo& info, const char* option) {
  throw ParamError(fmt::format("{}: {} is not a parameter of this schedule", info.name, option));
}

// "E:L" with two positive integers.
std::pair<std::int32_t, std::int32_t> parse_split(const ScheduleInfo& info,
                                                  const std::string& text) {
  const auto colon = text.find(':');
  auto part = [&](std::string_view s) {
    std::int32_t value = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (s.empty() || ec != std::errc{} || ptr != s.data() + s.size() || value < 1 ||
        value > 1000000) {
      throw ParamError(fmt::format(
          "{}: --split {}: expected E:L, two whole numbers from 1 to 1000000 (e.g. 1:2)", info.name,
          text));
    }
    return value;
  };
  if (colon == std::string::npos) part("");
  const std::string_view view(text);
  return {part(view.substr(0, colon)), part(view.substr(colon + 1))};
}

std::vector<std::string_view> names_of(const ScheduleInfo& info) {
  std::vector<std::string_view> names{info.name};
  names.insert(names.end(), info.aliases.begin(), info.aliases.end());
  return names;
}

}  // namespace

std::span<const ScheduleInfo* const> all_schedules() {
  return kAll;
}

const ScheduleInfo& find_schedule(std::string_view name) {
  const std::string wanted = lower_case(name);
  // PyTorch's class names carry a "Schedule" prefix its config strings do not.
  const std::string_view bare = std::string_view(wanted).starts_with("schedule")
                                    ? std::string_view(wanted).substr(8)
                                    : std::string_view{};
  for (const auto* info : kAll) {
    const std::string key = lower_case(info->name);
    if (key == wanted || key == bare) return *info;
    for (const auto alias : info->aliases) {
      const std::string a = lower_case(alias);
      if (a == wanted || a == bare) return *info;
    }
  }
  std::string known;
  std::vector<std::string> spelled;  // every name and alias, in lower case
  std::vector<const ScheduleInfo*> of;
  for (const auto* info : kAll) {
    known += fmt::format("{}{}", known.empty() ? "" : ", ", info->name);
    for (const auto candidate : names_of(*info)) {
      spelled.push_back(lower_case(candidate));
      of.push_back(info);
    }
  }
  std::vector<std::string> nearest;
  for (const auto i : nearest_names(spelled, std::array{wanted}, 2)) {
    const std::string schedule(of[i]->name);
    if (std::find(nearest.begin(), nearest.end(), schedule) == nearest.end())
      nearest.push_back(schedule);
  }
  const std::string hint = did_you_mean(nearest);
  throw ParamError(
      fmt::format("unknown schedule '{}'{} (known: {}; PyTorch's names such as "
                  "1F1B or ScheduleInterleaved1F1B are accepted too)",
                  name, hint, known));
}

std::int64_t default_group_size(std::int64_t devices, std::int64_t microbatches,
                                std::string& note) {
  const std::int64_t S = devices, M = microbatches;
  const auto admitted = [&](std::int64_t g) {  // Megatron's rules, or PyTorch's one group
    return (g <= M && g >= S && (M % g == 0 || M % g >= S)) || (g == M && M < S);
  };
  if (M >= S && M % S == 0) return S;
  const std::int64_t rounds = std::max<std::int64_t>(1, M / S);
  if (M % rounds == 0 && admitted(M / rounds)) {
    note = fmt::format(
        "interleaved: M = {} is not a multiple of S = {}, which Megatron's default group size "
        "g = S needs; using PyTorch's Interleaved1F1B group size g = M / max(1, M div S) = {} "
        "(--group-size {})",
        M, S, M / rounds, M / rounds);
    return M / rounds;
  }
  std::int64_t g = S;
  while (!admitted(g))
    ++g;  // g = M always is
  note = fmt::format(
      "interleaved: M = {} is not a multiple of S = {} (Megatron's default g = S) nor of "
      "PyTorch's rounds max(1, M div S) = {}; using the smallest group size Megatron's rules "
      "admit, --group-size {}",
      M, S, rounds, g);
  return g;
}

ResolvedParams resolve(const ScheduleInfo& info, const ScheduleParams& params) {
  ResolvedParams r;
  r.schedule = std::string(info.name);
  r.devices = in_range(info, "devices (-S)", params.devices, kMaxDevices);
  r.microbatches = in_range(info, "microbatches (-M)", params.microbatches, kMaxMicrobatches);
  if (params.chunks) {
    if (info.default_chunks == 0) not_taken(info, "-v/--chunks");
    r.chunks = in_range(info, "chunks (-v)", *params.chunks, kMaxStages);
  } else if (info.default_chunks > 0) {
    r.chunks = info.default_chunks;
  }
  if (params.waves) {
    if (info.default_waves == 0) not_taken(info, "-W/--waves");
    r.waves = in_range(info, "waves (-W)", *params.waves, kMaxStages);
  } else if (info.default_waves > 0) {
    r.waves = info.default_waves;
  }
  if (params.group_size) {
    if (!info.takes_group_size) not_taken(info, "--group-size");
    r.group_size =
        in_range(info, "group size (--group-size)", *params.group_size, kMaxMicrobatches);
  } else if (info.takes_group_size) {
    r.group_size =
        r.chunks > 1
            ? static_cast<std::int32_t>(default_group_size(r.devices, r.microbatches, r.note))
            : r.devices;
  }
  if (params.variant) {
    if (info.variants.empty()) not_taken(info, "--variant");
    bool known = false;
    std::string names;
    for (const auto v : info.variants) {
      known = known || v == *params.variant;
      names += fmt::format("{}{}", names.empty() ? "" : ", ", v);
    }
    if (!known) {
      throw ParamError(fmt::format("{}: unknown variant '{}' (expected one of: {})", info.name,
                                   *params.variant, names));
    }
    r.variant = *params.variant;
  } else if (!info.variants.empty()) {
    r.variant = std::string(info.variants.front());
  }
  if (params.combined_1f1b && !info.takes_combined_1f1b) not_taken(info, "--a2a-overlap");
  r.combined_1f1b = params.combined_1f1b;
  if (params.split && info.default_split.empty()) not_taken(info, "--split");
  if (!info.default_split.empty()) {
    std::tie(r.split_early, r.split_late) =
        parse_split(info, params.split.value_or(std::string(info.default_split)));
  }
  return r;
}

ScheduleTable generate(const ScheduleInfo& info, const ScheduleParams& params) {
  return info.generate(resolve(info, params));
}

std::optional<BuildingBlock> building_block(const ScheduleInfo& info,
                                            const ScheduleParams& params) {
  if (info.block == nullptr) return std::nullopt;
  return info.block(resolve(info, params));
}

}  // namespace pipetab
