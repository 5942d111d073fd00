// The run folder of `segtile train` (docs/program.md, "The run folder"):
// each epoch's set of files saved as one (io/atomic_file.h StagedFiles),
// and read back by --resume.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "apps/executor_cache.h"
#include "apps/run_config.h"
#include "runtime/optimizer.h"

namespace segtile {

// Where a run is: the epochs it has saved.
struct RunState {
    int epochs_done = 0;
    std::vector<EpochLog> epochs;
};

struct SavedRun {
    TrainOptions options;
    RunState state;
};

// runs/<model>-<date>-<time>
std::string default_run_dir(const std::string &model);

// Saves the epoch `epochs.back()` into `dir`: weights, optimizer state,
// plot.png, plan.json (when planned) and log.json, replaced together. A
// failure (a full disk, a folder made read-only) throws std::runtime_error
// saying what the folder still holds.
void save_epoch(const std::string &dir, const TrainOptions &o, const Model &m, const ParamStore &params,
                const Optimizer &opt, const std::vector<EpochLog> &epochs, const ExecutorCache &cache);

// Finishes or undoes a save that a killed process left half done, saying which on `log`.
void recover_save(const std::string &dir, std::ostream &log);

// The options and epochs of `dir`/log.json. Throws std::invalid_argument
// when it is missing, not JSON or lacks a field.
SavedRun read_run_folder(const std::string &dir);

}  // namespace segtile
