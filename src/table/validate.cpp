#include "pipetab/table/validate.hpp"

#include <type_traits>

#include "execution.hpp"
#include <fmt/format.h>

#include "pipetab/error.hpp"

namespace pipetab {

std::string to_string(const ValidationIssue& issue) {
  if (issue.device < 0) return issue.message;
  if (issue.position < 0) return fmt::format("device {}: {}", issue.device, issue.message);
  return fmt::format("device {}, position {} ({}): {}", issue.device, issue.position, issue.op,
                     issue.message);
}

namespace {

// Bits recording which passes of a (microbatch, stage) were seen.
constexpr std::uint8_t kSeenF = 1, kSeenB = 2, kSeenI = 4, kSeenW = 8;

std::uint8_t seen_bit(PassKind kind) {
  switch (kind) {
    case PassKind::F:
      return kSeenF;
    case PassKind::B:
      return kSeenB;
    case PassKind::I:
      return kSeenI;
    case PassKind::W:
      return kSeenW;
    case PassKind::None:
      break;
  }
  return 0;
}

class Checker {
 public:
  Checker(const ScheduleTable& t, std::size_t max_issues) : t_(t), max_(max_issues) {}

  ValidationReport run() && {
    check_shape();
    if (report_.ok()) check_ops();
    if (report_.ok()) check_complete();
    if (report_.ok()) check_executable();
    return std::move(report_);
  }

 private:
  // Counts an issue; builds its message (`message` is a string or a callable returning one)
  // only if the issue is kept, so that a table with millions of bad ops stays linear.
  template <class Message>
  void add(std::int32_t device, std::int64_t position, Message&& message) {
    ++report_.total;
    if (report_.issues.size() >= max_) return;
    ValidationIssue issue;
    issue.device = device;
    issue.position = position;
    if (device >= 0 && position >= 0) {
      issue.op = to_string(t_.ops[static_cast<std::size_t>(
          t_.row_begin[static_cast<std::size_t>(device)] + position)]);
    }
    if constexpr (std::is_invocable_v<Message>) {
      issue.message = message();
    } else {
      issue.message = std::forward<Message>(message);
    }
    report_.issues.push_back(std::move(issue));
  }
  void add(std::string message) { add(-1, -1, std::move(message)); }

  void check_shape() {
    const auto& t = t_;
    auto in_range = [&](std::int64_t value, std::int64_t limit, const char* what) {
      if (value < 1 || value > limit) {
        add(fmt::format("{} = {}: must be between 1 and {}", what, value, limit));
        return false;
      }
      return true;
    };
    bool sizes_ok = in_range(t.devices, kMaxDevices, "devices");
    sizes_ok &= in_range(t.stages, kMaxStages, "stages");
    sizes_ok &= in_range(t.microbatches, kMaxMicrobatches, "microbatches");
    sizes_ok &= in_range(t.placement.pipelines, kMaxPipelines, "pipelines");
    if (!sizes_ok) return;
    if (static_cast<std::int64_t>(t.ops.size()) > kMaxOps) {
      add(fmt::format("{} ops: more than the limit of {}", t.ops.size(), kMaxOps));
      return;
    }
    // Each op holds at most two passes and a complete table needs two per (microbatch,
    // stage); checked before anything is sized by microbatches × stages.
    if (std::int64_t{t.microbatches} * t.stages > static_cast<std::int64_t>(t.ops.size())) {
      add(fmt::format(
          "{} ops are too few for {} microbatches x {} stages: every microbatch needs a "
          "forward and a backward on every stage",
          t.ops.size(), t.microbatches, t.stages));
      return;
    }
    if (t.row_begin.size() != static_cast<std::size_t>(t.devices) + 1 || t.row_begin.front() != 0 ||
        t.row_begin.back() != static_cast<std::int64_t>(t.ops.size())) {
      add("malformed table: row index does not match the devices and ops");
      return;
    }
    for (std::size_t d = 0; d + 1 < t.row_begin.size(); ++d) {
      if (t.row_begin[d] > t.row_begin[d + 1]) {
        add("malformed table: row index is not increasing");
        return;
      }
    }
    const auto cells =
        static_cast<std::size_t>(t.placement.pipelines) * static_cast<std::size_t>(t.stages);
    if (t.placement.stages != t.stages || t.placement.device.size() != cells) {
      add(fmt::format("placement must map {} pipeline(s) x {} stages to devices",
                      t.placement.pipelines, t.stages));
      return;
    }
    std::vector<bool> holds_stage(static_cast<std::size_t>(t.devices), false);
    for (std::size_t i = 0; i < cells; ++i) {
      const auto device = t.placement.device[i];
      if (device < 0 || device >= t.devices) {
        add(fmt::format("placement: stage {} of pipeline {} is on device {}, but devices are 0..{}",
                        i % static_cast<std::size_t>(t.stages),
                        i / static_cast<std::size_t>(t.stages), device, t.devices - 1));
        return;
      }
      holds_stage[static_cast<std::size_t>(device)] = true;
    }
    for (std::int32_t d = 0; d < t.devices; ++d) {
      if (!holds_stage[static_cast<std::size_t>(d)]) add(d, -1, "holds no stage of any pipeline");
    }
    if (t.pipeline_of.size() != static_cast<std::size_t>(t.microbatches)) {
      add(fmt::format("every one of the {} microbatches needs a pipeline", t.microbatches));
      return;
    }
    for (std::size_t m = 0; m < t.pipeline_of.size(); ++m) {
      if (t.pipeline_of[m] >= t.placement.pipelines) {
        add(fmt::format("microbatch {} belongs to pipeline {}, but pipelines are 0..{}", m,
                        t.pipeline_of[m], t.placement.pipelines - 1));
        return;
      }
    }
    // A pipeline without microbatches still holds weights and changes memory and runtime, and
    // the CSV reader (which infers pipelines from the microbatches) cannot express it: both
    // readers refuse it, so that a table means the same in either format (issue 14).
    std::vector<bool> carries(static_cast<std::size_t>(t.placement.pipelines), false);
    for (const auto p : t.pipeline_of)
      carries[static_cast<std::size_t>(p)] = true;
    for (std::int32_t p = 0; p < t.placement.pipelines; ++p) {
      if (!carries[static_cast<std::size_t>(p)]) {
        add(
            fmt::format("pipeline {} carries no microbatch: every declared pipeline needs at "
                        "least one",
                        p));
        return;
      }
    }
    check_stage_layers(cells);
    if (!t.slots.empty()) check_slots();
  }

  void check_stage_layers(std::size_t cells) {
    const auto& t = t_;
    if (t.stage_layers.empty()) return;
    if (t.stage_layers.size() != cells) {
      add(fmt::format("stage sizes: expected {} values (pipelines x stages), got {}", cells,
                      t.stage_layers.size()));
      return;
    }
    std::int64_t first_total = 0;
    for (std::int32_t p = 0; p < t.placement.pipelines; ++p) {
      std::int64_t total = 0;
      for (std::int32_t s = 0; s < t.stages; ++s) {
        const auto layers =
            t.stage_layers[static_cast<std::size_t>(p) * static_cast<std::size_t>(t.stages) +
                           static_cast<std::size_t>(s)];
        if (layers < 1) {
          add(fmt::format(
              "stage sizes: stage {} of pipeline {} has size {}; sizes must be positive", s, p,
              layers));
          return;
        }
        total += layers;
      }
      if (p == 0) first_total = total;
      if (total != first_total) {
        add(fmt::format(
            "stage sizes: pipeline {} sums to {} but pipeline 0 to {}; every pipeline holds "
            "the whole model",
            p, total, first_total));
        return;
      }
    }
  }

  void check_slots() {
    const auto& t = t_;
    if (t.slots.size() != t.ops.size()) {
      add("malformed table: explicit slots do not match the ops");
      return;
    }
    for (std::int32_t d = 0; d < t.devices; ++d) {
      const auto b = t.row_begin[static_cast<std::size_t>(d)];
      const auto e = t.row_begin[static_cast<std::size_t>(d) + 1];
      for (auto i = b; i < e; ++i) {
        const auto slot = t.slots[static_cast<std::size_t>(i)];
        if (slot < 0 || (i > b && slot <= t.slots[static_cast<std::size_t>(i) - 1])) {
          add(d, i - b, "explicit slots must increase along a device's row");
          return;
        }
      }
    }
  }

  void check_ops() {
    const auto& t = t_;
    seen_.assign(static_cast<std::size_t>(t.microbatches) * static_cast<std::size_t>(t.stages), 0);
    for (std::int32_t d = 0; d < t.devices; ++d) {
      const auto row = t.row(d);
      for (std::size_t p = 0; p < row.size(); ++p)
        check_op(d, static_cast<std::int64_t>(p), row[p]);
    }
  }

  void check_op(std::int32_t d, std::int64_t p, const Op& op) {
    const auto& t = t_;
    if (op.first().kind == PassKind::None) {
      add(d, p, "empty op");
      return;
    }
    if (op.is_pair() && (op.first().kind != PassKind::F || op.second().kind != PassKind::B)) {
      add(d, p,
          fmt::format(
              "an overlapped pair holds one F and one full backward B, in that order (got {} "
              "and {})",
              kind_letter(op.first().kind), kind_letter(op.second().kind)));
      return;
    }
    for (const Pass& pass : op.passes()) {
      if (pass.microbatch < 0 || pass.microbatch >= t.microbatches) {
        add(d, p,
            fmt::format("microbatch {} out of range (microbatches are 0..{})", pass.microbatch,
                        t.microbatches - 1));
        continue;
      }
      if (pass.stage >= t.stages) {
        add(d, p,
            fmt::format("stage {} out of range (stages are 0..{})", pass.stage, t.stages - 1));
        continue;
      }
      const auto pipeline = t.pipeline_of_microbatch(pass.microbatch);
      const auto placed = t.placement.device_of(pipeline, pass.stage);
      if (placed != d) {
        add(d, p,
            fmt::format(
                "stage {} of {} (microbatch {}) is placed on device {}, not device {}", pass.stage,
                t.placement.pipelines > 1 ? fmt::format("pipeline {}", pipeline) : "the pipeline",
                pass.microbatch, placed, d));
        continue;
      }
      auto& seen = seen_[key(pass)];
      const auto bit = seen_bit(pass.kind);
      if (seen & bit) {
        add(d, p, [&] {
          const auto [first_device, first_position] = locate(pass);
          return fmt::format("duplicate {}: it already ran at device {}, position {}",
                             to_string(pass), first_device, first_position);
        });
        continue;
      }
      seen = static_cast<std::uint8_t>(seen | bit);
    }
  }

  void check_complete() {
    const auto& t = t_;
    for (std::int32_t s = 0; s < t.stages; ++s) {
      for (std::int32_t m = 0; m < t.microbatches; ++m) {
        const auto pipeline = t.pipeline_of_microbatch(m);
        const auto seen = seen_[key(m, s)];
        const auto device = t.placement.device_of(pipeline, s);
        auto missing = [&](const char* what) {
          add(device, -1, fmt::format("microbatch {}, stage {}: {}", m, s, what));
        };
        if (!(seen & kSeenF)) missing("no forward F");
        const bool b = seen & kSeenB, i = seen & kSeenI, w = seen & kSeenW;
        if (b && (i || w)) {
          missing("has both a full backward B and a split backward I/W");
        } else if (!b && !i && !w) {
          missing("no backward (a B, or an I and a W)");
        } else if (i && !w) {
          missing("an I without its W");
        } else if (w && !i) {
          missing("a W without its I");
        }
      }
    }
  }

  void check_executable() {
    const auto ex = detail::execute(
        t_, [](std::size_t) { return 1.0; }, [](std::size_t, double, double) {});
    if (ex.complete) return;
    report_deadlock(ex);
  }

  // Follows "device waits for a pass on another device" links from the first stuck device
  // until a device repeats; that cycle is the deadlock.
  void report_deadlock(const detail::Execution& ex) {
    const auto& t = t_;
    struct Wait {
      std::int32_t device;
      std::int64_t position;
      Pass needed;
      std::int32_t producer_device;
      std::int64_t producer_position;
    };
    std::vector<Wait> chain;
    std::vector<std::int32_t> step_of(static_cast<std::size_t>(t.devices), -1);
    std::int32_t d = 0;
    while (ex.next[static_cast<std::size_t>(d)] == t.row_begin[static_cast<std::size_t>(d) + 1])
      ++d;
    while (step_of[static_cast<std::size_t>(d)] < 0) {
      step_of[static_cast<std::size_t>(d)] = static_cast<std::int32_t>(chain.size());
      const auto position =
          ex.next[static_cast<std::size_t>(d)] - t.row_begin[static_cast<std::size_t>(d)];
      const Pass needed = pass_of(ex.blocked_on[static_cast<std::size_t>(d)]);
      const auto [e, q] = locate(needed);
      if (e == d && q == position) {
        add(d, position,
            fmt::format("the halves of this pair depend on each other (one needs {})",
                        to_string(needed)));
        return;
      }
      if (e == d) {
        add(d, position,
            fmt::format("needs {}, which comes later on the same device (position {})",
                        to_string(needed), q));
        return;
      }
      chain.push_back({d, position, needed, e, q});
      d = e;
    }
    std::string message = "deadlock: ";
    for (auto k = static_cast<std::size_t>(step_of[static_cast<std::size_t>(d)]); k < chain.size();
         ++k) {
      const auto& w = chain[k];
      const auto index =
          static_cast<std::size_t>(t.row_begin[static_cast<std::size_t>(w.device)] + w.position);
      message += fmt::format(
          "{}device {} at position {} ({}) waits for {} (device {}, position {})",
          k == static_cast<std::size_t>(step_of[static_cast<std::size_t>(d)]) ? "" : "; ", w.device,
          w.position, to_string(t.ops[index]), to_string(w.needed), w.producer_device,
          w.producer_position);
    }
    const auto& first = chain[static_cast<std::size_t>(step_of[static_cast<std::size_t>(d)])];
    add(first.device, first.position, std::move(message));
  }

  Pass pass_of(detail::Slot slot) const {
    const auto key_index = slot / 2;
    Pass pass;
    pass.microbatch = static_cast<std::int32_t>(key_index % t_.microbatches);
    pass.stage = static_cast<std::uint16_t>(key_index / t_.microbatches);
    if (slot % 2 == 0) {
      pass.kind = PassKind::F;
    } else {
      pass.kind = (seen_[static_cast<std::size_t>(key_index)] & kSeenB) ? PassKind::B : PassKind::I;
    }
    return pass;
  }

  // Where a pass runs: (device, position). Only used on error paths.
  std::pair<std::int32_t, std::int64_t> locate(const Pass& pass) const {
    const auto device = t_.device_of(pass);
    const auto row = t_.row(device);
    for (std::size_t p = 0; p < row.size(); ++p) {
      for (const Pass& half : row[p].passes()) {
        if (half == pass) return {device, static_cast<std::int64_t>(p)};
      }
    }
    return {device, -1};
  }

  std::size_t key(std::int32_t microbatch, std::int32_t stage) const {
    return static_cast<std::size_t>(detail::pass_key(t_, microbatch, stage));
  }
  std::size_t key(const Pass& pass) const { return key(pass.microbatch, pass.stage); }

  const ScheduleTable& t_;
  std::size_t max_;
  ValidationReport report_;
  std::vector<std::uint8_t> seen_;
};

}  // namespace

ValidationReport validate(const ScheduleTable& table, std::size_t max_issues) {
  return Checker(table, max_issues).run();
}

void require_valid(const ScheduleTable& table, const std::string& what) {
  const auto report = validate(table, 1);
  if (report.ok()) return;
  throw Error(fmt::format("{}: invalid table: {}", what, to_string(report.issues.front())));
}

}  // namespace pipetab
