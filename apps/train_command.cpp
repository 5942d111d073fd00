// `segtile train`: the main job (no options), a dataset, or --resume.
#include <iostream>

#include "apps/commands.h"
#include "apps/training_run.h"

namespace segtile {

namespace {

class TrainCommand : public Command {
public:
    explicit TrainCommand(CLI::App &parent) {
        cmd_ = parent.add_subcommand(
            "train", "train a model; with no options, the main job: marks_cnn on generated 2048x2048 images "
                     "under a 256 MiB working-memory cap");
        o_.optimizer.kind = "adam";
        o_.optimizer.lr = 0.01f;
        o_.execution.memory_cap = "256MiB";
        auto *c = cmd_;
        c->add_option("--model", o_.model, "shipped model name or model .json file")->capture_default_str();
        c->add_option("--data", o_.data, "CSV of images and labels (classification) or masks (segmentation); "
                                         "default: the built-in generated task");
        c->add_option("--images", o_.images, "folder the CSV's names are relative to (default: the CSV's)");
        c->add_option("--task", o_.task, "classification or segmentation (default: from the model's loss)")
            ->check(CLI::IsMember({"classification", "segmentation"}));
        c->add_option("--size", o_.size, "built-in task: image size WIDTHxHEIGHT")->capture_default_str();
        c->add_option("--images-per-epoch", o_.images_per_epoch, "built-in task: generated images per epoch")
            ->capture_default_str();
        c->add_option("--epochs", o_.epochs, "epochs (with --resume: the new total)")->capture_default_str();
        c->add_option("--batch", o_.batch, "images per optimizer step (run one at a time, gradients summed)")
            ->capture_default_str();
        c->add_option("--optimizer", o_.optimizer.kind, "sgd or adam")
            ->capture_default_str()
            ->check(CLI::IsMember({"sgd", "adam"}));
        c->add_option("--lr", o_.optimizer.lr, "learning rate")->capture_default_str();
        c->add_option("--lr-schedule", o_.lr_schedule,
                      "constant; cosine (decays to 0 over the run); step (x0.1 at 1/2 and x0.01 at 3/4 of the epochs)")
            ->capture_default_str()
            ->check(CLI::IsMember({"constant", "cosine", "step"}));
        c->add_option("--momentum", o_.optimizer.momentum, "sgd momentum")->capture_default_str();
        c->add_option("--weight-decay", o_.optimizer.weight_decay, "L2 weight decay")->capture_default_str();
        c->add_option("--seed", o_.seed, "random seed (weights, data order, generated images)")
            ->capture_default_str()
            ->check(CLI::Validator(  // CLI11 would wrap -1 into 2^64 - 1
                [](const std::string &v) { return v.find('-') == std::string::npos ? "" : "'" + v + "' is below 0"; },
                "", "whole number >= 0"));
        c->add_option("--memory-cap", o_.execution.memory_cap,
                      "plan cuts and tiles per image size so working memory stays under this; 'none': untiled")
            ->capture_default_str();
        c->add_option("--plan", o_.execution.plan_file, "run this plan file (from `segtile plan --json`)");
        c->add_option("--cuts", o_.execution.cuts, "with --tile: layers after which to store checkpoints");
        c->add_option("--tile", o_.execution.tile, "train tiled with this tile size WIDTHxHEIGHT in every segment");
        c->add_option("--checkpoint-dir", o_.execution.checkpoint_dir,
                      "keep checkpoints in memory-mapped files in this directory (default: in memory, or in "
                      "temporary files when they would take more than half of the memory available)");
        c->add_flag("--estimate", o_.execution.estimate, "plan with the analytic kernel-memory estimate (no lowering)");
        c->add_option("--target", o_.execution.target,
                      "cpu, or cuda: kernels on an NVIDIA GPU; --memory-cap then caps device memory")
            ->capture_default_str()
            ->check(CLI::IsMember({"cpu", "cuda"}));
        c->add_option("--run", o_.run, "run folder (default: runs/<model>-<date>-<time>)");
        c->add_option("--resume", resume_, "continue the run in this folder from its last saved epoch");
        c->add_option("--trace", o_.trace, "write a Chrome trace (Perfetto) of the first step to this file");
        c->add_option("--stop-after", o_.stop_after, "stop after this many epochs (the run stays resumable)");
        c->add_option("--on-bad-image", o_.on_bad_image,
                      "an image that fails to load at its step: skip (warn, count it in the log, train on the "
                      "rest) or stop")
            ->capture_default_str()
            ->check(CLI::IsMember({"skip", "stop"}));
    }
    CLI::App *app() const override { return cmd_; }
    int run() override {
        if (!resume_.empty()) {
            ResumeOptions changes;
            changes.epochs = cmd_->count("--epochs") ? o_.epochs : 0;
            changes.stop_after = o_.stop_after;
            if (cmd_->count("--on-bad-image")) changes.on_bad_image = o_.on_bad_image;
            resume(resume_, changes, std::cout);
            return 0;
        }
        train(o_, std::cout);
        return 0;
    }

private:
    CLI::App *cmd_;
    TrainOptions o_;
    std::string resume_;
};

}  // namespace

std::unique_ptr<Command> add_train_command(CLI::App &app) { return std::make_unique<TrainCommand>(app); }

}  // namespace segtile
