// libFuzzer target: the model, system and measured-run TOML readers, the Hugging Face config.json
// reader, the cost layer on what they accept (profiles predicted), the system writer's round
// trip, and the job-file readers (torchtitan's TOML and Megatron-LM's arguments,
// io/job_file.hpp) on the same bytes.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

#include "pipetab/cost/stage_cost.hpp"
#include "pipetab/error.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/hf_config.hpp"
#include "pipetab/io/job_file.hpp"
#include "pipetab/parallel/layout.hpp"
#include "pipetab/sim/graph.hpp"
#include "pipetab/sim/options.hpp"
#include "pipetab/study/accuracy.hpp"
#include "pipetab/study/measurements.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  static const auto h100 = pipetab::io::load_system("dgx-h100");
  try {
    // Megatron-Core's pipeline layout notation (--pipeline-layout).
    (void)pipetab::parse_pipeline_layout(text.substr(0, 4096), 32, 1);
  } catch (const pipetab::Error&) {
  }
  try {
    const auto model = pipetab::io::parse_model(text, "fuzz.toml");
    // What the reader accepts, with its job keys applied as the options' rules take them, the
    // workload model can cut into stages or rejects cleanly, and the cost layer prices.
    const auto setup = pipetab::default_setup(model, h100);
    pipetab::require_runnable(model, setup.job, setup.layout);
    const std::int32_t units[] = {1, 2, 1};
    const auto work = pipetab::stage_work(model, setup.job, setup.layout, units, 3);
    (void)pipetab::cost::stage_costs(model, setup.job, setup.layout, work, h100);
    // A mixture of experts spread over expert-parallel ranks, by the layout's rules.
    if (const auto* m = model.transformer(); m != nullptr && m->moe) {
      pipetab::Layout spread = setup.layout;
      spread.dp = 4;
      spread.ep = 2;
      pipetab::require_runnable(model, setup.job, spread);
      const auto spread_work = pipetab::stage_work(model, setup.job, spread, units, 3);
      (void)pipetab::cost::stage_costs(model, setup.job, spread, spread_work, h100);
      // As the simulation prices it: the all-to-alls as flows, each pass's compute split around
      // them. Nothing negative, nothing not a number.
      pipetab::cost::CostOptions flows;
      flows.exchanges_as_flows = true;
      for (const auto& stage :
           pipetab::cost::stage_costs(model, setup.job, spread, spread_work, h100, flows)) {
        for (const auto& layers : stage.layers) {
          if (!layers.passes) continue;
          for (const auto* p : {&layers.passes->forward, &layers.passes->backward}) {
            if (!(p->after_s >= 0.0)) __builtin_trap();
            for (const auto& x : p->exchanges) {
              if (!(x.before_s >= 0.0 && x.beside_s >= 0.0 && x.flows[0].bytes >= 0.0 &&
                    x.flows[1].bytes >= 0.0))
                __builtin_trap();
            }
          }
        }
      }
    }
  } catch (const pipetab::Error&) {
  }
  try {
    // A config.json read as a model is an architecture without a job: given a sequence (and the
    // fused attention its defaults ask for), the workload model cuts it into stages and the cost
    // layer prices it, as the TOML models above.
    const auto model = pipetab::io::parse_hf_config(text, "fuzz.json");
    auto setup = pipetab::default_setup(model, h100);
    setup.job.seq_len = 64;
    pipetab::require_runnable(model, setup.job, setup.layout);
    const std::int32_t units[] = {1, 2, 1};
    const auto work = pipetab::stage_work(model, setup.job, setup.layout, units, 3);
    (void)pipetab::cost::stage_costs(model, setup.job, setup.layout, work, h100);
  } catch (const pipetab::Error&) {
  }
  try {
    const auto system = pipetab::io::parse_system(text, "fuzz.toml");
    (void)pipetab::Network(system, 3);
    // A system written out reads back to itself.
    const auto back = pipetab::io::parse_system(pipetab::io::system_toml(system), "back.toml");
    if (!(back.device == system.device) || !(back.intra == system.intra) ||
        !(back.inter == system.inter) || back.name != system.name)
      __builtin_trap();
  } catch (const pipetab::Error&) {
  }
  // Job files: with and without a GPU count (a -1 shard degree, the data-parallel size).
  for (const std::optional<std::int64_t> gpus :
       {std::optional<std::int64_t>(64), std::optional<std::int64_t>()}) {
    try {
      (void)pipetab::io::parse_torchtitan_job(text, "fuzz.toml", gpus);
    } catch (const pipetab::Error&) {
    }
    try {
      (void)pipetab::io::parse_megatron_args(text, "fuzz.args", gpus);
    } catch (const pipetab::Error&) {
    }
  }
  try {
    auto runs = pipetab::parse_measurements(text, "fuzz.toml");
    // Profiles are priced, not simulated: predict them (iterations could be arbitrarily long).
    std::erase_if(runs.runs, [](const pipetab::MeasuredRun& run) {
      return run.kind != pipetab::MeasurementKind::Profile;
    });
    if (!runs.runs.empty()) (void)pipetab::predict(runs, h100, 1);
  } catch (const pipetab::Error&) {
  }
  return 0;
}
