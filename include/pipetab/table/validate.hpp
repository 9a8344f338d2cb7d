// Validation of a schedule table (docs/design.md §3). Everything else assumes a valid table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// One thing wrong with a table. `device`/`position` locate the op (position = index in the
/// device's order; -1 when the problem is not one op, e.g. a missing pass).
struct ValidationIssue {
  std::int32_t device = -1;
  std::int64_t position = -1;
  std::string op;  ///< the op in action syntax, empty when not about one op
  std::string message;
};

/// All issues found (up to the cap given to validate) and how many there were in total.
struct ValidationReport {
  std::vector<ValidationIssue> issues;
  std::int64_t total = 0;
  bool ok() const noexcept { return total == 0; }
};

/// "device 1, position 3 (1F2): message" — or "message" alone when not located.
std::string to_string(const ValidationIssue& issue);

/// Checks, in this order, stopping after the first group that fails:
///  1. shape: sizes within limits, placement and pipelines consistent, every device holds a
///     stage, stage sizes positive and equal per pipeline;
///  2. ops: every pass names a known stage and microbatch, sits on the device its placement
///     names, and overlapped pairs hold one F and one B;
///  3. completeness: every (microbatch, stage) has exactly one F and exactly one backward
///     (a B, or an I and a W);
///  4. executability: run in order with the dependencies of docs/design.md §3 without deadlock;
///     a deadlock is reported as the cycle of waiting devices.
/// Keeps at most `max_issues` issues (all are counted).
ValidationReport validate(const ScheduleTable& table, std::size_t max_issues = 20);

/// Throws pipetab::Error with the first issue (prefixed by `what`) if the table is invalid.
void require_valid(const ScheduleTable& table, const std::string& what);

}  // namespace pipetab
