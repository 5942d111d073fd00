// segtile: command-line program. `segtile train` with no options runs the
// main job: the built-in model trained on generated images.
#include <cstdio>
#include <iostream>
#include <memory>
#include <numeric>
#include <regex>

#include <CLI/CLI.hpp>

#include "apps/jit_step_kernel.h"
#include "apps/planning.h"
#include "io/atomic_file.h"
#include "generators/jit_kernel.h"
#include "runtime/trainer.h"
#include "spec/model.h"
#include "tiny_cnn_step.h"
#include "tiny_cnn_tiled.h"
#include "runtime/executor.h"

namespace {

constexpr const char *kBuiltinModel = "tiny_cnn";

std::pair<int, int> parse_size(const std::string &s) {
    std::smatch m;
    if (!std::regex_match(s, m, std::regex(R"((\d+)x(\d+))")))
        throw CLI::ValidationError("--size", "expected WIDTHxHEIGHT, e.g. 64x64, got '" + s + "'");
    return {std::stoi(m[1]), std::stoi(m[2])};
}

float mean(const std::vector<float> &v, size_t from, size_t to) {
    return std::accumulate(v.begin() + from, v.begin() + to, 0.0f) / (float)(to - from);
}

struct TiledOptions {
    std::string cuts;  // layer names, comma-separated
    std::string tile;  // WxH; empty: untiled training (unless planned)
    std::string checkpoint_dir;
    std::string plan_file;         // a plan from `segtile plan --json`
    segtile::PlanOptions planning;  // --memory-cap: plan for it
    bool planned() const { return !plan_file.empty() || !planning.memory_cap.empty(); }
};

std::unique_ptr<segtile::StepKernel> tiled_kernel(const segtile::Model &m, const std::string &model_name,
                                                  const TiledOptions &opt, segtile::MemoryLedger &ledger) {
    using namespace segtile;
    std::vector<int> cuts;
    std::vector<TileSize> tiles;
    if (opt.planned()) {
        const Plan plan = !opt.plan_file.empty() ? read_plan_file(opt.plan_file, m) : plan_for(m, opt.planning);
        std::cout << plan_table(plan, m);
        cuts = plan.cuts;
        tiles = plan.tile_sizes();
    } else {
        cuts = parse_cuts(m, opt.cuts);
        const auto [tw, th] = parse_size(opt.tile);
        tiles.assign(make_segments(m, cuts).segments.size(), TileSize{tw, th});
    }
    SegmentLayout layout = make_segments(m, cuts);
    ModelKernels kernels;
    if (model_name == kBuiltinModel && cuts == parse_cuts(m, tiny_cnn_tiled_cuts())) {
        kernels = tiny_cnn_tiled_kernels(m, &ledger);
    } else {
        std::cout << "JIT-compiling " << 2 * layout.segments.size() + 1 << " kernels for these cuts...\n" << std::flush;
        kernels = jit_model_kernels(m, layout, Halide::Float(32), &ledger);
    }
    std::cout << "tiled: " << layout.segments.size() << " segments, checkpoints in "
              << (opt.checkpoint_dir.empty() ? std::string("memory") : opt.checkpoint_dir) << "\n";
    return std::make_unique<TiledStep>(std::make_unique<SegmentedExecutor>(
        m, layout, std::move(kernels), tiles, &ledger, halide_type_of<float>(), opt.checkpoint_dir));
}

int run_train(const std::string &model_name, const std::string &size, segtile::TrainConfig cfg,
              TiledOptions tiled) {
    using namespace segtile;
    Model m = load_model(model_name);
    std::tie(cfg.data.width, cfg.data.height) = parse_size(size);
    cfg.data.channels = m.input_channels;
    MemoryLedger ledger;
    std::unique_ptr<StepKernel> kernel;
    if (!tiled.tile.empty() || tiled.planned()) {
        tiled.planning.width = cfg.data.width;
        tiled.planning.height = cfg.data.height;
        tiled.planning.batch = cfg.batch;
        tiled.planning.optimizer = cfg.optimizer.kind;
        kernel = tiled_kernel(m, model_name, tiled, ledger);
    } else if (model_name == kBuiltinModel) {
        kernel = aot_step(m, tiny_cnn_step_argv, tiny_cnn_step_metadata, &ledger);
    } else {
        std::cout << "JIT-compiling the training step of " << m.name << " (no prebuilt library)...\n" << std::flush;
        kernel = jit_step(m, &ledger);
    }
    std::cout << "training " << m.name << (tiled.tile.empty() && !tiled.planned() ? " untiled" : " tiled") << " on generated " << cfg.data.width << "x" << cfg.data.height
              << " images (marks: filled = class 1, hollow = class 0), " << cfg.steps << " steps of batch "
              << cfg.batch << ", " << cfg.optimizer.kind << " lr " << cfg.optimizer.lr << "\n";
    TrainReport r = train_synthetic(m, *kernel, cfg, ledger, std::cout);
    const size_t k = std::min<size_t>(10, r.losses.size() / 2);
    if (k > 0) {
        std::printf("loss: first %zu steps %.4f -> last %zu steps %.4f; accuracy %.1f%% -> %.1f%%\n", k,
                    mean(r.losses, 0, k), k, mean(r.losses, r.losses.size() - k, r.losses.size()),
                    100 * mean(r.accuracy, 0, k), 100 * mean(r.accuracy, r.accuracy.size() - k, r.accuracy.size()));
    }
    std::printf("%.1f s; peak working memory (ledger) %s, of which Halide %s; checkpoint store %s; "
                "process high-water mark %s\n",
                r.seconds, format_bytes(r.peak_working).c_str(), format_bytes(ledger.halide_peak()).c_str(),
                format_bytes(ledger.peak(MemoryLedger::Kind::Checkpoint)).c_str(),
                format_bytes(r.high_water_mark).c_str());
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"segtile: train convolutional networks on images larger than memory, with exact gradients"};
    app.require_subcommand(1);

    auto *train = app.add_subcommand("train", "train a model (default: the built-in task and model)");
    std::string model = kBuiltinModel, size = "64x64";
    segtile::TrainConfig cfg;
    cfg.optimizer.kind = "adam";
    cfg.optimizer.lr = 0.01f;
    train->add_option("--model", model, "shipped model name or model .json file")->capture_default_str();
    train->add_option("--size", size, "image size WIDTHxHEIGHT")->capture_default_str();
    train->add_option("--steps", cfg.steps, "training steps")->capture_default_str()->check(CLI::PositiveNumber);
    train->add_option("--batch", cfg.batch, "images per step")->capture_default_str()->check(CLI::PositiveNumber);
    train->add_option("--lr", cfg.optimizer.lr, "learning rate")->capture_default_str()->check(CLI::PositiveNumber);
    train->add_option("--optimizer", cfg.optimizer.kind, "sgd or adam")
        ->capture_default_str()
        ->check(CLI::IsMember({"sgd", "adam"}));
    train->add_option("--momentum", cfg.optimizer.momentum, "sgd momentum")->capture_default_str();
    train->add_option("--weight-decay", cfg.optimizer.weight_decay, "L2 weight decay")->capture_default_str();
    train->add_option("--seed", cfg.seed, "random seed (weights and data)")->capture_default_str();
    TiledOptions tiled;
    train->add_option("--tile", tiled.tile, "train tiled with this tile size WIDTHxHEIGHT (default: untiled)");
    train->add_option("--cuts", tiled.cuts, "layers after which to store checkpoints, comma-separated")
        ->capture_default_str();
    train->add_option("--checkpoint-dir", tiled.checkpoint_dir,
                      "keep checkpoints in memory-mapped files in this directory");

    train->add_option("--memory-cap", tiled.planning.memory_cap,
                      "plan cuts and tiles so working memory stays under this, e.g. 256MiB");
    train->add_option("--plan", tiled.plan_file, "run this plan file (from `segtile plan --json`)");
    train->add_flag("--estimate", tiled.planning.estimate, "plan with the analytic kernel-memory estimate (no lowering)");

    auto *plan = app.add_subcommand("plan", "choose cuts and tile sizes for a memory cap, and print the plan");
    std::string plan_model = kBuiltinModel, plan_size = "1024x1024", plan_json;
    segtile::PlanOptions popt;
    plan->add_option("--model", plan_model, "shipped model name or model .json file")->capture_default_str();
    plan->add_option("--size", plan_size, "image size WIDTHxHEIGHT")->capture_default_str();
    plan->add_option("--memory-cap", popt.memory_cap, "working-memory cap, e.g. 512MiB (default: none)");
    plan->add_option("--checkpoint-cap", popt.checkpoint_cap, "checkpoint-store cap (default: none)");
    plan->add_option("--batch", popt.batch, "images per step")->capture_default_str()->check(CLI::PositiveNumber);
    plan->add_option("--optimizer", popt.optimizer, "sgd or adam (its state is part of working memory)")
        ->capture_default_str()
        ->check(CLI::IsMember({"sgd", "adam"}));
    plan->add_option("--json", plan_json, "also write the plan to this file (for `segtile train --plan`)");
    plan->add_flag("--estimate", popt.estimate, "analytic kernel-memory estimate only (fast, approximate)");
    plan->add_flag("--calibrate", popt.calibrate, "measure this machine's compute rate for the time model first");

    CLI11_PARSE(app, argc, argv);
    try {
        if (train->parsed()) return run_train(model, size, cfg, tiled);
        if (plan->parsed()) {
            segtile::Model m = segtile::load_model(plan_model);
            std::tie(popt.width, popt.height) = parse_size(plan_size);
            const segtile::Plan p = segtile::plan_for(m, popt);
            std::cout << segtile::plan_table(p, m);
            if (!plan_json.empty()) {
                segtile::write_file_atomically(plan_json, segtile::plan_to_json(p));
                std::cout << "plan written to " << plan_json << "\n";
            }
            return 0;
        }
    } catch (const segtile::PlanError &e) {
        std::fprintf(stderr, "segtile: %s\n", e.what());
        return 3;
    } catch (const segtile::ModelError &e) {
        std::fprintf(stderr, "segtile: %s\n", e.what());
        return 2;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "segtile: %s\n", e.what());
        return 1;
    }
    return 0;
}
