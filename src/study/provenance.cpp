#include "pipetab/study/provenance.hpp"

#include <algorithm>

#include "pipetab/digest.hpp"
#include "pipetab/io/config.hpp"
#include "pipetab/io/table_file.hpp"

namespace pipetab {

std::vector<StudyInput> study_inputs(const Study& study) {
  std::vector<StudyInput> inputs;
  const auto add = [&](const std::string& role, const std::string& source,
                       std::string_view contents) {
    StudyInput input{role, source, Digest().add(contents).hex()};
    if (std::find(inputs.begin(), inputs.end(), input) == inputs.end())
      inputs.push_back(std::move(input));
  };
  if (!study.file.empty()) add("study", study.file, io::read_file(study.file));
  for (const auto& entry : study.schedules) {
    if (!entry.table.empty()) add("table", entry.table, io::read_file(entry.table));
  }
  // Systems and models name a built-in preset or a file (Study keeps paths resolved).
  const auto config = [&](const std::string& role, const char* kind, const std::string& name) {
    const auto preset = io::preset_text(kind, name);
    if (!preset.empty()) {
      add(role, "preset " + name, preset);
    } else {
      add(role, name, io::read_file(name));
    }
  };
  if (study.simulate) {
    for (const auto& name : study.systems)
      config("system", "systems", name);
    for (const auto& name : study.models)
      config("model", "models", name);
  }
  return inputs;
}

}  // namespace pipetab
