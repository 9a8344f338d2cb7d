// Pictures of a simulation: a Chrome Trace Event file (Perfetto, chrome://tracing) and an SVG
// timeline in the style of the tabular-schedule paper's Figure 2.
#pragma once

#include <string>

#include "pipetab/report/simulation.hpp"
#include "pipetab/table/schedule_table.hpp"

namespace pipetab {

/// Chrome Trace Event JSON: per device a process with a compute thread (the ops, "X" slices)
/// and a communication track (its transfers, async slices); a "network" process with one async
/// track per link that carried data; a flow arrow from each pipeline transfer's producer op to
/// its consumer op; and a memory counter per device (when the simulation recorded memory).
/// Timestamps in microseconds.
std::string chrome_trace(const ScheduleTable& table, const Simulation& simulation);

/// An SVG timeline: one lane per device, ops as boxes coloured by kind (shaded by the device's
/// stage) and labelled by microbatch where there is room, transfers as lines from the sending
/// lane to the receiving lane (all-reduce steps dashed), and a time axis with units. Throws
/// Error for more than 200,000 ops (use the trace instead).
std::string timeline_svg(const ScheduleTable& table, const Simulation& simulation,
                         const std::string& title);

}  // namespace pipetab
