// `segtile predict`: a trained model on images, tiled under the cap. A
// classifier writes one CSV line of class probabilities per image; a model
// with a dense output writes a full-size mask PNG per image.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "apps/commands.h"
#include "apps/executor_cache.h"
#include "io/atomic_file.h"
#include "io/csv.h"
#include "io/image_io.h"
#include "io/weight_file.h"
#include "spec/errors.h"

namespace segtile {

namespace {

namespace fs = std::filesystem;

// The images to run on: every image file of a folder (sorted by name), or
// the first column of a CSV (names relative to the CSV's folder; a header
// line is skipped).
std::vector<std::string> list_images(const std::string &where) {
    std::vector<std::string> out;
    if (fs::is_directory(where)) {
        const std::vector<std::string> exts = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".svs", ".ndpi",
                                               ".scn", ".mrxs", ".bif", ".vms"};
        for (const auto &e : fs::directory_iterator(where)) {
            std::string ext = e.path().extension().string();
            std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
            if (e.is_regular_file() && std::find(exts.begin(), exts.end(), ext) != exts.end())
                out.push_back(e.path().string());
        }
        std::sort(out.begin(), out.end());
        if (out.empty()) throw DataError(where + ": no image files (.png, .jpg, .tif, ...) in this folder");
        return out;
    }
    if (!fs::exists(where)) throw DataError(where + ": no such folder or CSV file; check --images");
    const fs::path base = fs::path(where).parent_path();
    for (const CsvRow &r : read_csv(where)) {
        if (r.fields.empty() || r.fields[0].empty())
            throw DataError(where + ":" + std::to_string(r.line) + ": no file name in the first column");
        std::string lower = r.fields[0];
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        if (out.empty() && r.line == 1 && (lower == "file" || lower == "filename" || lower == "image" ||
                                           lower == "path" || lower == "name"))
            continue;
        const fs::path p(r.fields[0]);
        out.push_back(p.is_absolute() ? p.string() : (base / p).string());
    }
    if (out.empty()) throw DataError(where + ": lists no images");
    return out;
}

class PredictCommand : public Command {
public:
    explicit PredictCommand(CLI::App &parent) {
        cmd_ = parent.add_subcommand("predict", "run a trained model on images: class scores or full-size masks");
        cmd_->add_option("--model", model_, "shipped model name or model .json file")->capture_default_str();
        cmd_->add_option("--weights", weights_, "weights (safetensors), e.g. RUN/weights.safetensors")->required();
        cmd_->add_option("--images", images_, "a folder of images, or a CSV whose first column lists them")
            ->required();
        cmd_->add_option("--out", out_, "output folder: scores.csv (classifiers) or <image>_mask.png")->required();
        opt_.memory_cap = "256MiB";
        opt_.optimizer = "sgd";
        cmd_->add_option("--memory-cap", opt_.memory_cap, "working-memory cap to plan for; 'none': untiled")
            ->capture_default_str();
        cmd_->add_option("--plan", opt_.plan_file, "run this plan file (from `segtile plan --json`)");
        cmd_->add_option("--cuts", opt_.cuts, "with --tile: layers after which to store checkpoints");
        cmd_->add_option("--tile", opt_.tile, "tile size WIDTHxHEIGHT in every segment");
        cmd_->add_flag("--estimate", opt_.estimate, "plan with the analytic kernel-memory estimate (no lowering)");
    }
    CLI::App *app() const override { return cmd_; }
    int run() override;

private:
    CLI::App *cmd_;
    std::string model_ = "marks_cnn", weights_, images_, out_;
    ExecutionOptions opt_;
};

int PredictCommand::run() {
    Model m = load_model(model_);
    const bool dense = m.loss.kind == LossKind::MeanSquaredError;
    const int K = m.output_channels();
    MemoryLedger ledger, data_ledger;
    ParamStore params(m, &ledger);
    load_parameters(weights_, params);  // checks names and shapes first
    // Every image is opened (header only) before anything is written.
    const std::vector<std::string> files = list_images(images_);
    ImageReadOptions ro;
    ro.channels = m.input_channels;
    std::vector<ImageFile> opened;
    for (const auto &f : files) opened.emplace_back(f, ro);
    ExecutorCache cache(m, model_, opt_, &ledger, std::cout);
    for (const auto &img : opened) {
        cache.for_size(img.info().width, img.info().height);
        m.shapes(img.info().width, img.info().height);
    }
    fs::create_directories(out_);
    std::ostringstream csv;
    csv << "file,class";
    for (int c = 0; c < K; c++) csv << ",p" << c;
    csv << "\n";
    for (size_t i = 0; i < opened.size(); i++) {
        const ImageInfo &info = opened[i].info();
        Tensor image = opened[i].read(&data_ledger);  // (W, H, C, 1)
        SegmentedExecutor &exec = cache.for_size(info.width, info.height);
        const TensorShape out = m.shapes(info.width, info.height)[m.loss.input_id];
        Tensor prediction({out.width, out.height, out.channels, 1}, &data_ledger, MemoryLedger::Kind::Data);
        // Forward and head only, with a placeholder label (the loss is
        // discarded): the head's output is the prediction.
        if (dense) {
            Tensor target({out.width, out.height, out.channels, 1}, &data_ledger);  // zeros
            exec.evaluate(image, target.view(), params, &prediction);
        } else {
            Halide::Runtime::Buffer<int32_t> label(1);  // (1)
            label(0) = 0;
            exec.evaluate(image, label, params, &prediction);
        }
        const std::string name = fs::path(files[i]).filename().string();
        if (dense) {
            Tensor scores = K == 1 ? Tensor({out.width, out.height, 2, 1}, &data_ledger) : std::move(prediction);
            if (K == 1) {  // one output channel: class 1 where it exceeds 0.5
                const int64_t plane = out.width * out.height;
                for (int64_t p = 0; p < plane; p++) {
                    scores.data()[p] = 0.5f;
                    scores.data()[plane + p] = prediction.data()[p];
                }
            }
            const std::string path = (fs::path(out_) / (fs::path(files[i]).stem().string() + "_mask.png")).string();
            write_mask_png(path, scores);
            std::cout << name << " -> " << path << "\n";
        } else {
            // Softmax of the logits.
            const float *z = prediction.data();
            const float zmax = *std::max_element(z, z + K);
            std::vector<double> p(K);
            double sum = 0;
            for (int c = 0; c < K; c++) sum += p[c] = std::exp((double)z[c] - zmax);
            const int best = (int)(std::max_element(z, z + K) - z);
            csv << '"' << name << '"' << "," << best;
            for (int c = 0; c < K; c++) csv << "," << p[c] / sum;
            csv << "\n";
            std::cout << name << ": class " << best << " (p = " << p[best] / sum << ")\n";
        }
    }
    if (!dense) {
        const std::string path = (fs::path(out_) / "scores.csv").string();
        write_file_atomically(path, csv.str());
        std::cout << "scores of " << files.size() << " images written to " << path << "\n";
    }
    return 0;
}

}  // namespace

std::unique_ptr<Command> add_predict_command(CLI::App &app) { return std::make_unique<PredictCommand>(app); }

}  // namespace segtile
