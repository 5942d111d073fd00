// `segtile plan`: cuts and tile sizes for a model, image size and cap.
#include <iostream>

#include "apps/commands.h"
#include "apps/executor_cache.h"
#include "io/atomic_file.h"

namespace segtile {

namespace {

class PlanCommand : public Command {
public:
    explicit PlanCommand(CLI::App &parent) {
        cmd_ = parent.add_subcommand("plan", "choose cuts and tile sizes for a memory cap, and print the plan");
        cmd_->add_option("--model", model_, "shipped model name or model .json file")->capture_default_str();
        cmd_->add_option("--size", size_, "image size WIDTHxHEIGHT")->capture_default_str();
        cmd_->add_option("--memory-cap", opt_.memory_cap, "working-memory cap, e.g. 512MiB (default: none)");
        cmd_->add_option("--checkpoint-cap", opt_.checkpoint_cap, "checkpoint-store cap (default: none)");
        cmd_->add_option("--batch", opt_.batch, "images per step")->capture_default_str()->check(CLI::PositiveNumber);
        cmd_->add_option("--optimizer", opt_.optimizer, "sgd or adam (its state is part of working memory)")
            ->capture_default_str()
            ->check(CLI::IsMember({"sgd", "adam"}));
        cmd_->add_option("--cuts", opt_.cuts,
                         "only these cuts, e.g. conv2,conv3 (none: one segment); tile sizes are still chosen. "
                         "Compares a plan of yours with the planner's");
        cmd_->add_flag("--mapped-checkpoints", opt_.mapped_checkpoints,
                       "plan for checkpoints in memory-mapped files (`segtile train --checkpoint-dir`): the "
                       "checkpoint pages a row of tiles holds resident count against --memory-cap");
        cmd_->add_option("--json", json_, "also write the plan to this file (for `segtile train --plan`)");
        cmd_->add_flag("--estimate", opt_.estimate, "analytic kernel-memory estimate only (fast, approximate)");
        cmd_->add_flag("--calibrate", opt_.calibrate,
                       "time segment kernels on this machine first (four cases of three small models at several tile sizes, a minute or "
                       "two) and fit the time model's rates to them; saved for later plans");
        cmd_->add_option("--target", opt_.target, "cpu, or cuda: plan for a GPU (--memory-cap caps device memory)")
            ->capture_default_str()
            ->check(CLI::IsMember({"cpu", "cuda"}));
    }
    CLI::App *app() const override { return cmd_; }
    int run() override {
        Model m = load_model(model_);
        std::tie(opt_.width, opt_.height) = parse_size(size_, "--size");
        const Plan p = plan_for(m, opt_);
        std::cout << plan_table(p, m);
        if (!json_.empty()) {
            write_file_atomically(json_, plan_to_json(p));
            std::cout << "plan written to " << json_ << "\n";
        }
        return 0;
    }

private:
    CLI::App *cmd_;
    std::string model_ = "marks_cnn", size_ = "4096x4096", json_;
    PlanOptions opt_;
};

}  // namespace

std::unique_ptr<Command> add_plan_command(CLI::App &app) { return std::make_unique<PlanCommand>(app); }

}  // namespace segtile
