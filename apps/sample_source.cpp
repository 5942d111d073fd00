#include "apps/sample_source.h"

#include "io/dataset.h"
#include "runtime/marks_task.h"
#include "spec/errors.h"

namespace segtile {

namespace {

// The main job: image i of epoch e is image e * size + i of the seed's stream.
class GeneratedMarks : public SampleSource {
public:
    GeneratedMarks(LargeMarks task, int per_epoch, uint64_t seed) : task_(task), per_epoch_(per_epoch), seed_(seed) {}
    size_t size() const override { return (size_t)per_epoch_; }
    std::vector<size_t> order(uint64_t, int64_t) const override {
        std::vector<size_t> o(per_epoch_);
        for (size_t i = 0; i < o.size(); i++) o[i] = i;
        return o;
    }
    Example load(size_t i, int64_t epoch, MemoryLedger *ledger) override {
        Example e;
        e.image = Tensor({task_.width, task_.height, 1, 1}, ledger, MemoryLedger::Kind::Data);  // (W, H, 1, 1)
        e.label = task_.generate(e.image, seed_, (uint64_t)epoch * per_epoch_ + i);
        return e;
    }
    std::set<std::pair<int64_t, int64_t>> image_sizes() const override { return {{task_.width, task_.height}}; }
    std::string name(size_t i) const override { return "generated image " + std::to_string(i + 1); }
    std::string describe() const override {
        return std::to_string(per_epoch_) + " generated " + std::to_string(task_.width) + "x" +
               std::to_string(task_.height) + " images per epoch (noise with " + std::to_string(task_.min_marks) +
               "-" + std::to_string(task_.max_marks) + " " + std::to_string(task_.mark_size) + "x" +
               std::to_string(task_.mark_size) + " marks per 512x512 block: filled = class 1, hollow = class 0)";
    }

private:
    LargeMarks task_;
    int per_epoch_;
    uint64_t seed_;
};

class CsvData : public SampleSource {
public:
    CsvData(const std::string &csv, const DatasetOptions &o, const std::string &folder) : data_(csv, o, folder) {}
    size_t size() const override { return data_.size(); }
    std::vector<size_t> order(uint64_t seed, int64_t epoch) const override { return data_.epoch_order(seed, epoch); }
    Example load(size_t i, int64_t, MemoryLedger *ledger) override {
        Sample s = data_.load(i, ledger);
        Example e;
        e.image = std::move(s.image);
        e.label = s.label;
        e.mask = std::move(s.mask);
        return e;
    }
    std::set<std::pair<int64_t, int64_t>> image_sizes() const override {
        std::set<std::pair<int64_t, int64_t>> sizes;
        for (const auto &e : data_.entries()) {
            const ImageInfo info = probe_image(e.image, data_.options().image);
            sizes.insert({info.width, info.height});
        }
        return sizes;
    }
    std::string describe() const override {
        return std::to_string(data_.size()) + " images listed in " + data_.csv();
    }
    std::string name(size_t i) const override { return data_.entries()[i].image; }

private:
    Dataset data_;
};

}  // namespace

std::unique_ptr<SampleSource> make_source(const TrainOptions &o, const Model &m) {
    if (o.data.empty()) {
        if (m.loss.kind != LossKind::SoftmaxCrossEntropy || m.output_channels() != 2 || m.input_channels != 1)
            throw ModelError("model '" + m.name + "' does not fit the built-in task (gray images, 2 classes, "
                             "softmax cross-entropy); pass a classifier like models/marks_cnn.json, or --data");
        LargeMarks task;
        const auto [w, h] = parse_size(o.size, "--size");
        task.width = w;
        task.height = h;
        if (w < task.mark_size || h < task.mark_size)
            throw UsageError("--size " + o.size + ": the built-in task draws " +
                                        std::to_string(task.mark_size) + "-pixel marks; use at least " +
                                        std::to_string(task.mark_size) + "x" + std::to_string(task.mark_size) +
                                        " (the default is " + TrainOptions().size + ")");
        return std::make_unique<GeneratedMarks>(task, o.images_per_epoch, o.seed);
    }
    DatasetOptions d;
    const bool dense = m.loss.kind == LossKind::MeanSquaredError;
    std::string task = o.task.empty() ? (dense ? "segmentation" : "classification") : o.task;
    if (task == "classification" && dense)
        throw ModelError("--task classification needs a classifier (softmax cross-entropy loss); model '" + m.name +
                         "' has a dense mse loss: use --task segmentation or another --model");
    if (task == "segmentation" && !dense)
        throw ModelError("--task segmentation needs a model with a dense (mse) loss, like unet; model '" + m.name +
                         "' is a classifier: use --task classification or another --model");
    d.kind = task == "segmentation" ? DatasetKind::Segmentation : DatasetKind::Classification;
    d.classes = dense && m.output_channels() == 1 ? 2 : m.output_channels();
    d.image.channels = m.input_channels;
    return std::make_unique<CsvData>(o.data, d, o.images);
}

}  // namespace segtile
