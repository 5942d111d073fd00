// A training run's options and its record of each epoch, as `train` takes
// them and as log.json saves them (docs/program.md, "The run folder").
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "apps/executor_cache.h"
#include "runtime/optimizer.h"

namespace segtile {

struct TrainOptions {
    std::string model = "marks_cnn";
    // Data: a CSV (and the folder its names are relative to), or the built-in task.
    std::string data, images;
    std::string task;  // "classification" / "segmentation"; "": from the CSV's header or the model's loss
    std::string size = "2048x2048";  // built-in task: image size
    int images_per_epoch = 128;      // built-in task
    int epochs = 10;
    int batch = 8;
    uint64_t seed = 0;
    OptimizerConfig optimizer;
    std::string lr_schedule = "constant";  // constant | cosine | step
    ExecutionOptions execution;
    std::string run;            // run folder; "": runs/<model>-<date>-<time>
    std::string trace;          // Chrome trace of the first step, written here
    int stop_after = 0;         // > 0: stop after this many epochs of this invocation (the run stays resumable)
    // An image that fails to load at its step (damaged past its header, a
    // mask value out of range): "skip" warns, counts it in the epoch's log
    // and trains on the rest; "stop" ends the run with its error.
    std::string on_bad_image = "skip";
};

// Every numeric option finite and in range, before anything is planned
// or written: a NaN rate would train all epochs at loss nan. Throws
// std::invalid_argument naming the option.
void check_options(const TrainOptions &o);

struct EpochLog {
    int epoch = 0;  // 1-based
    double loss = 0, accuracy = 0, images_per_second = 0, seconds = 0, lr = 0;  // over the images used
    int64_t peak_working = 0, high_water_mark = 0, peak_checkpoint = 0;
    int64_t peak_device = 0;  // --target cuda; absent from logs of CPU runs
    int64_t skipped_images = 0;  // failed to load (--on-bad-image skip); absent from older logs
};

// log.json's "config" and its "epochs" entries. The readers throw
// nlohmann::json::exception on a missing or mistyped field; fields added
// since the first runs get their old behaviour when absent.
nlohmann::json config_to_json(const TrainOptions &o);
TrainOptions config_from_json(const nlohmann::json &j);
nlohmann::json epoch_to_json(const EpochLog &e);
EpochLog epoch_from_json(const nlohmann::json &j);

}  // namespace segtile
