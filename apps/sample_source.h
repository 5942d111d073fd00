// Where a training run's images come from: the built-in generated task
// (the main job) or a dataset CSV (io/dataset.h), behind one interface so
// the training loop does not care which.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "apps/run_config.h"
#include "runtime/tensor.h"
#include "spec/model.h"

namespace segtile {

// What one image brings: the image, and its label or (for a dense loss) target.
struct Example {
    Tensor image;   // (W, H, C, 1)
    int label = -1;  // classification
    Tensor mask;     // segmentation: (W, H, 1, 1) int32
};

class SampleSource {
public:
    virtual ~SampleSource() = default;
    virtual size_t size() const = 0;
    virtual std::vector<size_t> order(uint64_t seed, int64_t epoch) const = 0;
    virtual Example load(size_t i, int64_t epoch, MemoryLedger *ledger) = 0;
    virtual std::set<std::pair<int64_t, int64_t>> image_sizes() const = 0;
    virtual std::string describe() const = 0;
    virtual std::string name(size_t i) const = 0;  // image i, as an error names it
};

// The source `o` names (--data, or the built-in task at --size) for model
// `m`. Throws ModelError when the model does not fit the task,
// DatasetError for a bad CSV, std::invalid_argument for a bad --size.
std::unique_ptr<SampleSource> make_source(const TrainOptions &o, const Model &m);

}  // namespace segtile
