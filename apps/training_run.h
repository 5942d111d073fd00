// A training run: epochs over a dataset (a CSV of images and labels or
// masks) or over the built-in generated task, a batch processed one image
// at a time with gradients accumulated, an optimizer step per batch, a
// learning-rate schedule, and a run folder rewritten after each epoch as
// one atomic step (weights, optimizer state, log.json, plot.png, plan.json;
// StagedFiles in io/atomic_file.h), from which `--resume` continues
// bit-identically, also after a kill -9 while saving.
#pragma once

#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>

#include "apps/run_config.h"
#include "spec/errors.h"

namespace segtile {

// DivergedError (spec/errors.h): a loss or a batch gradient became
// non-finite; the message names the epoch, the step and the image, and the
// run folder keeps the last finite epoch's files.

// Trains, printing per-epoch lines to `log` and a progress bar on stderr.
// A run that fails before its first save leaves no run folder behind.
// Throws DatasetError, ImageError, WeightFileError, PlanError, ModelError,
// std::invalid_argument for bad input (a non-finite or out-of-range option
// among them, refused before anything is planned); DivergedError when a
// loss or gradient turns non-finite (the optimizer does not step on it; the
// run folder keeps the last epoch saved).
void train(TrainOptions opt, std::ostream &log);

// What `--resume` may change in a saved run.
struct ResumeOptions {
    int epochs = 0;            // > 0: the new total
    int stop_after = 0;        // as TrainOptions
    std::string on_bad_image;  // "": as saved
};

// Continues the run in `run_dir` from its last saved epoch (first finishing
// or undoing a save that a killed process left half done). Throws as
// train(). Both hold the folder's lock (io/folder_lock.h) while they run:
// a second process on the same folder is refused.
void resume(const std::string &run_dir, const ResumeOptions &changes, std::ostream &log);

// The learning rate of optimizer step `step` (0-based) of a run with
// `steps_per_epoch` steps in each of `epochs` epochs.
//   constant: lr; cosine: lr * (1 + cos(pi * step / total_steps)) / 2;
//   step: lr, x0.1 from half the epochs, x0.01 from three quarters.
float scheduled_lr(const std::string &schedule, float lr, int64_t step, int64_t steps_per_epoch, int epochs);

}  // namespace segtile
