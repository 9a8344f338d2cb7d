// pipetab: evaluate pipeline-parallel training schedules at three levels.
#include "commands.hpp"

#include "pipetab/allocator.hpp"

int main(int argc, char** argv) {
  pipetab::keep_freed_memory();
  return pipetab::cli::run(argc, argv);
}
